"""Keyed state: on executor-local stores (the state engine, one module per role, as Spark's state package),
or on DataFrames (``keyed_state``: their snapshots and restores, by subtask; ``state_frame``: a state read
back as a DataFrame).

- ``provider``: the driver's side. Plans an epoch's store tasks (``aggregate``), opens none itself, and
  writes or seals their snapshots (``StoreBackend``, ``StoreState``).
- ``tasks``: what runs inside the store tasks on the executors (apply, read, dump, load, split); imports
  only ``store``, ``loader`` and pyarrow, so a Python worker starts fast.
- ``store``: one subtask's versioned store (SQLite), with undo for the last versions.
- ``fold``: the fold of epochs' per-key contributions into a store's rows, in Arrow and numpy.
- ``loader``: the maintenance side: where a task finds its store on its executor, and how it rebuilds it
  from the checkpoint's files under the state root when it is absent or at another version.
- ``placement``: the coordinator: which executor holds which store, and the preferred locations that send
  each store's task back there.
"""
