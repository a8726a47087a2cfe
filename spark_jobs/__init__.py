"""The processing application: epochs in order, aligned state, two-phase snapshots (PySpark)."""
