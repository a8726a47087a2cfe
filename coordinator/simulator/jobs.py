"""The reference jobs' semantics for the simulator: word count and label propagation.

They mirror the reference jobs (``absreplay_examples``) record by record instead of epoch by
epoch, so the oracle can run the same job graph (``coordinator.dataflow.jobs``) over
the same input with the same barrier cut as the Spark runtime, under any of
the snapshot algorithms. Both keep the simulator an oracle: their final states
do not depend on the interleaving (sums; minima over a component).

Label propagation (``connected_components``: source -> parse -> labels (loop
head) -> propagate -> feedback (loop tail) -> labels, and labels -> sink) is
asynchronous here: a message is handled when it arrives, with no rounds. The
head's state per vertex is (label, neighbours). Record kinds (``Record.tag``):

- ``edge`` (u, v) from the source; ``parse`` turns it into the two ``arc``s
  u->v and v->u (one for a self-loop), hashed to the head by their start;
- at the head an ``arc`` v->w adds v (labelled v) and the neighbour w, and
  sends v's label to w; a ``label`` (w, l) from the back-edge lowers w's label
  to l if smaller, and then w sends l to all its neighbours. A vertex a label
  reaches before its first arc is added with no neighbours (its arcs follow);
- the head reports every label change as an ``update`` to the sink; the body
  forwards ``label``s, the tail sends them round again.
"""

from __future__ import annotations

import re
from typing import Any

from coordinator.dataflow.graph import OperatorKind
from coordinator.simulator.channels import Record
from coordinator.simulator.operators import SOURCE_OFFSET, Emission, Route
from coordinator.simulator.semantics import hash_partition

EDGE, ARC, LABEL, UPDATE = "edge", "arc", "label", "update"
# the tokenizer of absreplay_examples.wordcount, in Python's terms (as absreplay_examples.recount)
NON_WORD = re.compile(r"\W+")


def _source(state: dict, record: Record) -> list[Emission]:
    state[SOURCE_OFFSET] = record.origin[1] + 1
    return [(Route.ANY, record)]


class WordCount:
    """lines -> words -> count per word (the sink keeps the latest count it was sent)."""

    def source_record(self, task_name: str, offset: int, item: Any) -> Record:
        return Record(key=offset, value=str(item), origin=(task_name, offset))

    def initial_state(self, kind: OperatorKind) -> dict:
        return {SOURCE_OFFSET: 0} if kind is OperatorKind.SOURCE else {}

    def apply(self, kind: OperatorKind, state: dict, record: Record, from_back_edge: bool) -> list[Emission]:
        if kind is OperatorKind.SOURCE:
            return _source(state, record)
        if kind is OperatorKind.FLAT_MAP:
            words = [w for w in NON_WORD.split(str(record.value).lower()) if w]
            return [(Route.ANY, Record(w, 1, origin=record.origin)) for w in words]
        if kind is OperatorKind.AGGREGATE:
            state[record.key] = state.get(record.key, 0) + int(record.value)
            return [(Route.ANY, Record(record.key, state[record.key], origin=record.origin))]
        if kind is OperatorKind.SINK:
            state[record.key] = max(state.get(record.key, 0), int(record.value))
            return []
        raise ValueError(f"word count has no operator of kind {kind}")

    def partition(self, record: Record, parallelism: int) -> int:
        return hash_partition(record, parallelism)


class LabelPropagation:
    """connected_components, one record at a time; the head's state is vertex -> (label, neighbours)."""

    def source_record(self, task_name: str, offset: int, item: Any) -> Record:
        u, v = item
        return Record(key=int(u), value=int(v), origin=(task_name, offset), tag=EDGE)

    def initial_state(self, kind: OperatorKind) -> dict:
        return {SOURCE_OFFSET: 0} if kind is OperatorKind.SOURCE else {}

    def apply(self, kind: OperatorKind, state: dict, record: Record, from_back_edge: bool) -> list[Emission]:
        if kind is OperatorKind.SOURCE:
            return _source(state, record)
        if kind is OperatorKind.FLAT_MAP:  # parse (edges) or propagate (labels)
            if record.tag == EDGE:
                u, v = record.key, record.value
                arcs = [(u, v)] if u == v else [(u, v), (v, u)]
                return [(Route.ANY, Record(a, b, origin=record.origin, tag=ARC)) for a, b in arcs]
            return [(Route.ANY, record)] if record.tag == LABEL else []
        if kind is OperatorKind.ITERATE_HEAD:
            return self._head(state, record)
        if kind is OperatorKind.ITERATE_TAIL:
            return [(Route.LOOP, record)] if record.tag == LABEL else []
        if kind is OperatorKind.SINK:
            if record.tag == UPDATE:
                state[record.key] = min(state.get(record.key, record.value), record.value)
            return []
        raise ValueError(f"label propagation has no operator of kind {kind}")

    def _head(self, state: dict, record: Record) -> list[Emission]:
        v = int(record.key)
        out: list[Emission] = []
        if v not in state:
            first = v if record.tag == ARC else min(v, int(record.value))
            state[v] = (first, frozenset())
            out.append((Route.ANY, Record(v, first, origin=record.origin, tag=UPDATE)))
        label, neighbours = state[v]
        if record.tag == ARC:
            w = int(record.value)
            if w != v and w not in neighbours:
                state[v] = (label, neighbours | {w})
                out.append((Route.ANY, Record(w, label, origin=record.origin, tag=LABEL)))
        elif record.tag == LABEL and int(record.value) < label:
            label = int(record.value)
            state[v] = (label, neighbours)
            out.append((Route.ANY, Record(v, label, origin=record.origin, tag=UPDATE)))
            out += [(Route.ANY, Record(w, label, origin=record.origin, tag=LABEL)) for w in sorted(neighbours)]
        return out

    def partition(self, record: Record, parallelism: int) -> int:
        return hash_partition(record, parallelism)


WORD_COUNT = WordCount()
LABEL_PROPAGATION = LabelPropagation()
