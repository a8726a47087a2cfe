"""The DataFrame state engine: an operator's state is one immutable (locally checkpointed) DataFrame that
every epoch's operator recomputes whole (``frame_state``), and a window's or a join's delta is taken against
its base's state held in memory (``state_diff``). Keeps every operator kind."""
