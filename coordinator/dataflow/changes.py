"""What changed between two versions of a job's declaration (``coordinator.dataflow.versions``), operator by
operator and sink by sink, and what an upgrade does with each.

Compatible is what keeps every stored row meaningful: a new aggregate column (built from the input, the
others carried over), a dropped one, a sink's new column. Incompatible is what makes stored rows mean
something else: another key or column type, another window or function, other inputs, and everything
fed by such an operator. No Spark here; ``coordinator.upgrades.job_plan`` reads the versions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Change(StrEnum):
    UNCHANGED = "unchanged"
    NEW = "new"
    COMPATIBLE = "changed compatibly"
    INCOMPATIBLE = "changed incompatibly"
    REMOVED = "removed"


#: what an upgrade does with a part, by what it is and how it changed
_EFFECTS = {
    ("state", Change.UNCHANGED): "state carried over",
    ("state", Change.NEW): "state built from the input",
    ("state", Change.COMPATIBLE): "new columns built from the input, the others carried over",
    ("state", Change.INCOMPATIBLE): "state cannot be carried over: rebuilt from the start you choose",
    # its input changed, not its state's shape: a checkpoint's state of it still reads
    ("readable state", Change.INCOMPATIBLE): "rebuilt from the start you choose (a checkpoint's state of it "
                                             "restored, the input after it replayed)",
    ("state", Change.REMOVED): "state kept in the checkpoints that hold it until they expire",
    ("stateless", Change.UNCHANGED): "no state",
    ("stateless", Change.NEW): "runs on the replayed input",
    ("stateless", Change.INCOMPATIBLE): "its output differs from the start you choose",
    ("stateless", Change.REMOVED): "no longer runs",
    ("sink", Change.UNCHANGED): "keeps its output, gets nothing twice",
    ("sink", Change.NEW): "gets the backfilled output",
    ("upsert", Change.COMPATIBLE): "its rows restated with the new columns (the table gains them)",
    ("append", Change.COMPATIBLE): "records from now on have the new columns; records written stay as they are",
    ("sink", Change.INCOMPATIBLE): "its output replaced from the start you choose, as a rewind replaces it",
    ("sink", Change.REMOVED): "keeps what it holds, gets nothing more",
}


@dataclass(frozen=True)
class PartChange:
    """One operator or sink: how it changed, why, and what an upgrade does with it."""

    part: str  # "operator" | "sink"
    name: str
    change: Change
    detail: str
    effect: str
    #: an operator whose stored state the new declaration reads as it is (unchanged, a column added or
    #: dropped, another function or input over the same state): a replay from a checkpoint restores it;
    #: a sink whose target takes the new rows over what it holds
    restorable: bool = False


@dataclass(frozen=True)
class JobChanges:
    parts: tuple[PartChange, ...]

    @property
    def needs_upgrade(self) -> bool:
        """Whether the next run cannot simply restore the stored state: something new or changed."""
        return any(p.change in (Change.NEW, Change.COMPATIBLE, Change.INCOMPATIBLE) for p in self.parts)

    @property
    def incompatible(self) -> tuple[PartChange, ...]:
        return tuple(p for p in self.parts if p.change is Change.INCOMPATIBLE)

    @property
    def unfit_sinks(self) -> tuple[PartChange, ...]:
        """Declared sinks whose own shape (key, columns, kind) changed: what they hold cannot take the new rows."""
        return tuple(p for p in self.parts if p.part == "sink" and p.change is not Change.REMOVED and not p.restorable)

    def of(self, change: Change) -> tuple[PartChange, ...]:
        return tuple(p for p in self.parts if p.change is change)

    def line(self) -> str:
        """The changes in one line: each part that is not unchanged, with its change and detail."""
        changed = [f"{p.part} {p.name} {p.change}" + (f" ({p.detail})" if p.detail else "")
                   for p in self.parts if p.change is not Change.UNCHANGED]
        return "; ".join(changed) or "nothing changed"


def compare(old: dict[str, Any], new: dict[str, Any]) -> JobChanges:
    """How the declaration of parts ``new`` differs from the stored ``old`` (both ``versions.describe``)."""
    before, after = _operators(old), _operators(new)
    changes: dict[str, tuple[Change, str]] = {}
    restorable: dict[str, bool] = {}
    for name, op in after.items():
        changes[name] = (Change.NEW, "") if name not in before else _operator(before[name], op)
        restorable[name] = name in before and op["state"] is not None and _same_state(before[name], op)
    # an operator fed by one that changed incompatibly holds state built from other records: it is rebuilt too
    for name, op in after.items():
        if changes[name][0] in (Change.UNCHANGED, Change.COMPATIBLE) and op["state"] is not None:
            upstream = _changed_upstream(name, after, changes)
            if upstream:
                changes[name] = (Change.INCOMPATIBLE, f"fed by {upstream}, which changed incompatibly")
    parts = [PartChange("operator", name, change, detail, _EFFECTS[_effect(after[name], change, restorable[name])],
                        restorable[name]) for name, (change, detail) in changes.items()]
    parts += [PartChange("operator", name, Change.REMOVED, "", _EFFECTS[(_role(op), Change.REMOVED)])
              for name, op in before.items() if name not in after]
    old_sinks, new_sinks = ({s["name"]: s for s in p["sinks"]} for p in (old, new))
    for name, sink in new_sinks.items():
        change, detail = (Change.NEW, "") if name not in old_sinks else _sink(old_sinks[name], sink)
        # a sink whose own columns, key and kind still fit what it holds takes the new rows (restorable)
        fits = change is not Change.INCOMPATIBLE
        upstream = _changed_upstream(name, after, changes, sink["input"])
        if change in (Change.UNCHANGED, Change.COMPATIBLE) and upstream:
            change, detail = Change.INCOMPATIBLE, f"fed by {upstream}, which changed incompatibly"
        role = ("upsert" if sink["key"] else "append") if change is Change.COMPATIBLE else "sink"
        parts.append(PartChange("sink", name, change, detail, _EFFECTS[(role, change)], fits))
    parts += [PartChange("sink", name, Change.REMOVED, "", _EFFECTS[("sink", Change.REMOVED)])
              for name in old_sinks if name not in new_sinks]
    return JobChanges(tuple(parts))


def _effect(op: dict[str, Any], change: Change, restorable: bool) -> tuple[str, Change]:
    role = _role(op)
    return ("readable state" if role == "state" and change is Change.INCOMPATIBLE and restorable else role), change


def _operators(parts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each operator but sinks (they are compared as sinks): its kind, inputs, state, parameters, records."""
    inputs: dict[str, list[str]] = defaultdict(list)
    for source, target, _ in parts["edges"]:
        inputs[target].append(source)
    states = {s["operator"]: s for s in parts["states"]}
    sources = {s["name"]: s for s in parts["sources"]}
    params = parts.get("params")  # None: a version recorded before parameters were part of it
    return {op["name"]: {"kind": op["kind"], "inputs": sorted(inputs[op["name"]]), "state": states.get(op["name"]),
                         "params": None if params is None else params.get(op["name"], {}),
                         "records": sources.get(op["name"])}
            for op in parts["operators"] if op["kind"] != "sink"}


def _role(op: dict[str, Any]) -> str:
    return "stateless" if op["state"] is None else "state"


def _operator(old: dict[str, Any], new: dict[str, Any]) -> tuple[Change, str]:
    if old["kind"] != new["kind"]:
        return Change.INCOMPATIBLE, f"kind {old['kind']} -> {new['kind']}"
    if old["inputs"] != new["inputs"]:
        return Change.INCOMPATIBLE, f"inputs {', '.join(old['inputs'])} -> {', '.join(new['inputs'])}"
    if old["records"] != new["records"]:
        return Change.INCOMPATIBLE, f"records {_record_shape(old['records'])} -> {_record_shape(new['records'])}"
    if old["params"] is not None and new["params"] is not None:
        why = _params(old["params"], new["params"])
        if why:
            return Change.INCOMPATIBLE, why
    if old["state"] is None or new["state"] is None:
        return (Change.UNCHANGED, "") if old["state"] == new["state"] else (Change.INCOMPATIBLE, "its state differs")
    return _state(old["state"], new["state"])


def _same_state(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether ``old``'s stored state reads as ``new``'s: the same kind of state, key and identity, no column
    of another type, and parameters that differ at most in code or aggregates added (a window of another
    size is another set of rows)."""
    if old["state"] is None or new["state"] is None or _state(old["state"], new["state"])[0] is Change.INCOMPATIBLE:
        return False
    if old["params"] is None or new["params"] is None:
        return True
    shaping = ({k: v for k, v in p.items() if k not in ("code", "aggregates")} for p in (old["params"], new["params"]))
    if next(shaping) != next(shaping):
        return False
    aggregates = old["params"].get("aggregates", {}), new["params"].get("aggregates", {})
    return all(aggregates[0][n] == aggregates[1][n] for n in set(aggregates[0]) & set(aggregates[1]))


def _state(old: dict[str, Any], new: dict[str, Any]) -> tuple[Change, str]:
    for what in ("kind", "key", "identity"):
        if old[what] != new[what]:
            return Change.INCOMPATIBLE, f"state {what} {_join(old[what])} -> {_join(new[what])}"
    if old["columns"] is None or new["columns"] is None:
        same = old["columns"] == new["columns"]
        return (Change.UNCHANGED, "") if same else (Change.INCOMPATIBLE, "its state's columns differ")
    return _columns(old["columns"], new["columns"], key=set(new["key"]))


def _sink(old: dict[str, Any], new: dict[str, Any]) -> tuple[Change, str]:
    for what in ("kind", "input", "key"):
        if old[what] != new[what]:
            return Change.INCOMPATIBLE, f"{what} {_join(old[what])} -> {_join(new[what])}"
    return _columns(old["columns"], new["columns"], key=set(new["key"] or ()))


def _columns(old: list[str], new: list[str], key: set[str]) -> tuple[Change, str]:
    """Columns as ``name:type``: a type changed is incompatible; columns added or dropped are not."""
    before, after = (dict(c.split(":", 1) for c in cols) for cols in (old, new))
    retyped = [f"{'key ' if c in key else ''}column {c} {before[c]} -> {after[c]}"
               for c in after if c in before and before[c] != after[c]]
    if retyped:
        return Change.INCOMPATIBLE, "; ".join(retyped)
    added = [f"{c}:{t}" for c, t in after.items() if c not in before and c != "updated"]
    dropped = [c for c in before if c not in after]
    if not added and not dropped:
        return Change.UNCHANGED, ""
    return Change.COMPATIBLE, "; ".join(
        ([f"new column{'s' if len(added) > 1 else ''} {', '.join(added)}"] if added else [])
        + ([f"column{'s' if len(dropped) > 1 else ''} {', '.join(dropped)} dropped"] if dropped else []))


def _params(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Why the parameters that shape an operator's output differ ('' when they agree). Aggregates added or
    dropped show as columns; an aggregate that is another one under the same name does not."""
    whys = []
    aggregates = old.get("aggregates", {}), new.get("aggregates", {})
    for name in sorted(set(aggregates[0]) & set(aggregates[1])):
        if aggregates[0][name] != aggregates[1][name]:
            whys.append(f"aggregate {name} {_aggregate(aggregates[0][name])} -> {_aggregate(aggregates[1][name])}")
    for what in sorted((set(old) | set(new)) - {"aggregates"}):
        if old.get(what) != new.get(what):
            whys.append("its function changed" if what == "code" else
                        f"{what} {_value(old.get(what))} -> {_value(new.get(what))}")
    return "; ".join(whys)


def _changed_upstream(name: str, ops: dict[str, dict[str, Any]], changes: dict[str, tuple[Change, str]],
                      first: str | None = None) -> str:
    """The nearest operator upstream of ``name`` (through stateless ones) that changed incompatibly, or ''."""
    todo, seen = [first] if first else list(ops[name]["inputs"]), set()
    while todo:
        up = todo.pop()
        if up in seen or up not in ops:
            continue
        seen.add(up)
        if changes.get(up, (None,))[0] is Change.INCOMPATIBLE:
            return up
        if ops[up]["state"] is None:  # a stateless operator passes its input's change on
            todo += ops[up]["inputs"]
    return ""


def _aggregate(spec: list[Any]) -> str:
    kind, type_, column = spec[:3]
    return f"{kind}({column or ''}):{type_}"


def _record_shape(records: dict[str, Any] | None) -> str:
    if records is None:
        return "-"
    return records["format"] + (f" ({', '.join(records['fields'])})" if records["fields"] else "")


def _join(value: Any) -> str:
    if value is None:
        return "none"
    return ", ".join(value) if isinstance(value, list) else str(value)


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={v}" for k, v in sorted(value.items())) + "}"
    return "none" if value is None else str(value)
