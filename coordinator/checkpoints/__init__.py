"""Checkpoints: their lifecycle and policies -- ids, acks, completion, expiry, recovery,
rescaling, and the snapshot files a checkpoint points at.

- ``lifecycle``: a checkpoint's states and transitions, a pure state machine (no I/O);
- ``policy``: checkpoint policies and the trigger decision (inject a barrier now, or skip);
- ``coordinator``: inject barriers and finalize checkpoints for one job;
- ``store``: the lifecycle applied to catalog rows, one transaction per method;
- ``lease``: at most one processing run per job, and the fencing token its writes carry;
- ``state_handle``: what a task acks a checkpoint with;
- ``recovery``: restore or rewind to a checkpoint, and the audited record of it;
- ``rescale``: changing a job's parallelism between runs (key groups);
- ``state_files``: where snapshots live, and garbage collection of unreferenced ones;
- ``manifests``: sealing a snapshot's files when it is acked, verifying them on restore;
- ``state_chain``: which files make up an operator's keyed state at a checkpoint;
- ``state_reader``: that state read with pyarrow, without Spark;
- ``back_edge_logs``: the records still in a loop when an epoch ended, part of its checkpoint.
"""
