"""Snapshots: one task's part of checkpoint n, and the global snapshot assembled from all of them.

The global snapshot is what recovery needs: every task's state, the cut (the
sources' positions), the back-edge logs of Algorithm 2 and, for unaligned
checkpoints, the in-flight records of every channel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from coordinator.dataflow.graph import Channel
from coordinator.simulator.channels import Record
from coordinator.simulator.operators import SOURCE_OFFSET

ChannelRecords = dict[Channel, tuple[Record, ...]]
#: (checkpoint id, task name) -> True when that task's snapshot of that checkpoint fails (injected)
SnapshotFails = Callable[[int, str], bool]


def no_snapshot_fails(checkpoint_id: int, task: str) -> bool:
    return False


@dataclass(frozen=True)
class TaskSnapshot:
    """One task's ack for checkpoint ``checkpoint_id``.

    ``back_edge_log``: records received on a back-edge after the state copy and
    before that back-edge's barrier (Algorithm 2). ``received_in_flight``: the
    same for every input channel (unaligned). ``overtaken``: records on this
    task's output channels that its barrier overtook (unaligned).
    """

    checkpoint_id: int
    task: str
    state: dict
    back_edge_log: ChannelRecords = field(default_factory=dict)
    received_in_flight: ChannelRecords = field(default_factory=dict)
    overtaken: ChannelRecords = field(default_factory=dict)


@dataclass(frozen=True)
class GlobalSnapshot:
    """Checkpoint n: task states, source positions, back-edge logs and in-flight channel contents."""

    checkpoint_id: int
    mode: str
    task_states: dict[str, dict]
    source_positions: dict[str, int]
    back_edge_logs: ChannelRecords
    in_flight: ChannelRecords

    def state(self, task_name: str) -> dict:
        return self.task_states[task_name]

    @property
    def back_edge_log_size(self) -> int:
        return sum(len(records) for records in self.back_edge_logs.values())

    @property
    def in_flight_size(self) -> int:
        return sum(len(records) for records in self.in_flight.values())

    def replay(self, include_back_edge_logs: bool = True) -> ChannelRecords:
        """The records to put back on each channel, before anything else, when restoring."""
        out: dict[Channel, list[Record]] = {}
        logs = self.back_edge_logs if include_back_edge_logs else {}
        for source in (logs, self.in_flight):
            for channel, records in source.items():
                out.setdefault(channel, []).extend(records)
        return {channel: tuple(records) for channel, records in out.items() if records}

    @classmethod
    def assemble(
        cls, checkpoint_id: int, mode: str, parts: Mapping[str, TaskSnapshot], sources: frozenset[str]
    ) -> GlobalSnapshot:
        back_edge_logs: ChannelRecords = {}
        received: dict[Channel, tuple[Record, ...]] = {}
        overtaken: dict[Channel, tuple[Record, ...]] = {}
        for part in parts.values():
            back_edge_logs.update(part.back_edge_log)
            received.update(part.received_in_flight)
            overtaken.update(part.overtaken)
        # FIFO order on a channel: what the receiver logged was ahead of what the barrier overtook
        in_flight = {
            channel: received.get(channel, ()) + overtaken.get(channel, ())
            for channel in sorted(received.keys() | overtaken.keys(), key=_channel_order)
        }
        return cls(
            checkpoint_id=checkpoint_id,
            mode=mode,
            task_states={name: part.state for name, part in parts.items()},
            source_positions={name: parts[name].state[SOURCE_OFFSET] for name in sorted(sources)},
            back_edge_logs={c: back_edge_logs[c] for c in sorted(back_edge_logs, key=_channel_order)},
            in_flight={c: records for c, records in in_flight.items() if records},
        )


def _channel_order(channel: Channel) -> tuple[str, str]:
    return (channel.source.name, channel.target.name)
