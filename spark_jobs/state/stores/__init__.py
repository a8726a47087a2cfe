"""The store engine: keyed aggregates on executor-local stores, one module per role, as Spark's state package.

- ``provider``: the engine's side of the keyed-state interface (``StoreState``, ``StoreBackend``), on the
  driver: opens no store itself; ``store_state``: the stores at one version, read and snapshotted by tasks;
  ``apply``: an epoch's Spark plan.
- ``tasks``: what runs inside the store tasks on the executors (apply, read, dump, load, split); imports
  only ``store``, ``loader`` and pyarrow, so a Python worker starts fast.
- ``store``: one subtask's versioned store (SQLite), with undo for the last versions; ``fold``: the fold of
  epochs' per-key contributions into a store's rows, in Arrow and numpy.
- ``loader``: where a task finds its store on its executor, and how it rebuilds it from the checkpoint's
  files when it is absent or at another version; ``placement``: which executor holds which store, and the
  preferred locations that send each store's task back there.
"""
