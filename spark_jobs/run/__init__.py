"""The driver's side of one processing run: epochs in order, restore, snapshots, progress."""
