"""Snapshots of a weak-consistency job (``consistency="weak"``, seed 003; ``coordinator.checkpoints.weak``).

Not exactly-once, on purpose: the sources ack each epoch as they read it (``consume``),
so no run reads it again; the epoch's output goes straight into the sinks, whose tasks
ack; and on the writer thread each stateful operator writes its snapshot, incremental
on its own last one, and acks alone, in its own transaction, with no alignment. One
whose snapshot fails keeps its previous one (its ``base``) and the others' stand; a run
restores each operator from its own latest ack (``spark_jobs.run.restore.restore_weak``).
The files, seals and handles are the aligned writer's (``spark_jobs.run.snapshot``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from coordinator.checkpoints.lifecycle import AckResult
from coordinator.checkpoints.state_handle import StateHandle
from coordinator.dataflow.graph import OperatorKind
from coordinator.errors import FencedError
from coordinator.faults import fault_point
from spark_jobs.run.snapshot import Epoch, SnapshotTiming, SnapshotWriter


@dataclass
class WeakSnapshotWriter(SnapshotWriter):
    #: operator -> its own last acked snapshot (the base of its next one)
    bases: dict[str, int | None] = field(default_factory=dict)
    stages_sinks = False

    def _take(self, checkpoint_id: int, epoch: Epoch, timing: SnapshotTiming, t0: float) -> None:
        """The epoch's output into the sinks now (their tasks ack), its state snapshots on the writer thread."""
        self._write_sink_directly(checkpoint_id, epoch, timing)
        self.store.ack_many(self.job.name, checkpoint_id, [
            StateHandle(operator=sink.name, subtask=i) for sink in self.job.sinks for i in range(self.job.parallelism)])
        self._in_background(t0, timing, self._write_weak, checkpoint_id, epoch, timing)

    def consume(self, checkpoint_id: int) -> None:
        """The source subtasks ack epoch ``checkpoint_id`` as they read it (their offsets move on; no run
        reads it again, whatever becomes of its state)."""
        self.store.ack_many(self.job.name, checkpoint_id,
                            [h for h in self._stateless_handles() if self._kind(h) is OperatorKind.SOURCE])

    def _kind(self, handle: StateHandle) -> OperatorKind:
        return self.job.graph.operator(handle.operator).kind

    def _write_weak(self, checkpoint_id: int, epoch: Epoch, timing: SnapshotTiming) -> None:
        """Each stateful operator writes its snapshot on its own (incremental on its own last
        one) and acks alone, in its own transaction; one that fails keeps its previous snapshot and the
        others' stand. The stateless operators ack that they hold nothing."""
        if self._halted:
            return
        t0 = time.perf_counter()
        errors, fulls = [], []
        try:
            for spec in self.job.states:
                op = spec.operator
                try:
                    handles, full, _ = self._write_state(checkpoint_id, spec, epoch.states[op], epoch, timing,
                                                         self.bases.get(op))
                    fault_point("snapshot.before_ack", checkpoint_id)
                    results = self.store.ack_many(self.job.name, checkpoint_id, handles)
                except FencedError:
                    raise
                except Exception as exc:  # this operator's snapshot fails; the others go on
                    epoch.states[op].state.forget_bases()  # its base's rows may be gone with an executor
                    errors.append(f"{op}: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                    continue
                fulls.append(full)
                if all(r in (AckResult.SUCCESS, AckResult.DUPLICATE) for r in results):
                    self.bases[op] = checkpoint_id
                    self.chain_lengths[op] = 1 if full else self.chain_lengths.get(op, 0) + 1
                else:
                    errors.append(f"{op}: acks {sorted({str(r) for r in results})}")
                fault_point("snapshot.after_ack", checkpoint_id, self.job.states.index(spec) + 1)
            self.store.ack_many(self.job.name, checkpoint_id,
                                [h for h in self._stateless_handles() if self._kind(h) is not OperatorKind.SOURCE])
        except FencedError as exc:
            self._halted, self._fenced = True, exc
            raise
        except BaseException:
            self._halted = True
            raise
        timing.async_ms = int((time.perf_counter() - t0) * 1000)
        timing.full = bool(fulls) and all(fulls)
        if errors:
            timing.error = "; ".join(errors)
        self.base_parallelism = self.job.parallelism
