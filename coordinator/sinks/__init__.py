"""Sinks: where a job's output goes, two-phase and exactly once.

- ``base``: what a sink target is to the checkpoint lifecycle (the ``SinkTarget`` protocol);
- ``transactions``: stage a checkpoint's output, commit it in checkpoint order once the
  checkpoint completes, abort it when it fails, revert a sink for a rewind;
- one module per kind of target: ``sql_table``, ``parquet_dir``, ``delta_table``;
- ``locations``: a sink's URI (its Airflow asset), ``commits``: what a finalize or a recovery
  committed to each sink (the asset event's extra).
"""
