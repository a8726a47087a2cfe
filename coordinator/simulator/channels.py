"""Messages (records and barriers) and the FIFO queue of one channel.

A channel queue stands for everything between two tasks: the sender's output
buffer, the network and the receiver's input buffer. It is FIFO, as the paper
assumes, except for one operation: an unaligned barrier may overtake the
records queued behind the last barrier (never another barrier), and the records
it overtook are handed back so that they can be stored with the snapshot.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from coordinator.dataflow.graph import Channel


@dataclass(frozen=True)
class Record:
    """A data record. ``origin`` is (source task name, offset) of the input record it derives from;
    ``tag`` tells record kinds apart where a semantics has several (e.g. edges and labels)."""

    key: int | str
    value: int | str
    hops: int = 0
    origin: tuple[str, int] = ("", -1)
    tag: str = ""


@dataclass(frozen=True)
class Barrier:
    checkpoint_id: int


Message = Record | Barrier


class ChannelQueue:
    """The FIFO contents of one channel."""

    def __init__(self, channel: Channel, index: int = 0, non_empty: set[int] | None = None) -> None:
        self.channel = channel
        self.index = index
        # shared with the scheduler, so that it need not scan every channel at every step
        self._non_empty = non_empty if non_empty is not None else set()
        self._items: deque[Message] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def push(self, message: Message) -> None:
        self._items.append(message)
        self._non_empty.add(self.index)

    def pop(self) -> Message:
        message = self._items.popleft()
        if not self._items:
            self._non_empty.discard(self.index)
        return message

    def drain(self) -> list[Message]:
        """Empty the channel and return what it held: what a failed receiver's input buffer loses."""
        items = list(self._items)
        self._items.clear()
        self._non_empty.discard(self.index)
        return items

    def contents(self) -> tuple[Message, ...]:
        return tuple(self._items)

    def overtake(self, barrier: Barrier) -> list[Record]:
        """Insert ``barrier`` ahead of the records queued after the last barrier; return those records.

        Barriers never overtake barriers, otherwise checkpoint n+1 could be
        taken at a task before checkpoint n.
        """
        items = list(self._items)
        last_barrier = max((i for i, m in enumerate(items) if isinstance(m, Barrier)), default=-1)
        overtaken = [m for m in items[last_barrier + 1 :] if isinstance(m, Record)]
        items.insert(last_barrier + 1, barrier)
        self._items = deque(items)
        self._non_empty.add(self.index)
        return overtaken
