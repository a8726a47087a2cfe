"""What the DAGs call (orchestration) and the Airflow demo; the view is ``absreplay.airflow_plugin``."""
