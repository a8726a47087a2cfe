"""Keyed state: one interface (``backend``: restore, apply an epoch, a synchronous snapshot, its asynchronous
write), two engines, each in its own folder (``frames``: the state one DataFrame; ``stores``: keyed aggregates
on executor-local stores), and what both share: the snapshot files' format by subtask (``keyed_state``) and an
aggregate's columns as Spark expressions (``aggregate_parts``)."""
