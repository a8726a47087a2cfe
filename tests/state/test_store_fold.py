"""The fold of epochs' contributions into a store's rows (``spark_jobs.state.stores.fold``): the store's SQL rules
for NULLs, NaN, strings and booleans, applied in epoch order."""

from __future__ import annotations

import math

import pyarrow as pa

from spark_jobs.state.stores.fold import fold

SCHEMA = pa.schema([("k", pa.string()), ("total", pa.float64()), ("lo", pa.string()), ("hi", pa.bool_()),
                    ("s", pa.int64()), ("c", pa.int64()), ("avg", pa.float64()), ("updated", pa.int64())])
MERGES = {"total": "sum", "lo": "min", "hi": "max", "s": "sum", "c": "sum", "avg": "first"}
MEANS = {"avg": ("s", "c")}


def rows(*values: tuple) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, v, strict=True)) for v in values], SCHEMA)


def test_nulls_keep_the_other_side_and_a_nan_is_a_null() -> None:
    stored = rows(("a", None, "m", False, 4, 2, 2.0, 1), ("b", 1.5, None, None, None, 0, None, 1))
    contributions = rows(
        ("a", 0.25, None, True, 2, 1, None, 2), ("b", math.nan, "q", None, None, 0, None, 2),
        ("a", None, "c", None, None, 1, None, 3), ("c", 2.0, "z", False, 3, 3, None, 3))
    folded = fold(SCHEMA, ("k",), MERGES, MEANS, stored, contributions)
    got = {(r["k"], r["updated"]): r for r in folded.changes.to_pylist()}
    assert [got["a", 2][c] for c in ("total", "lo", "hi", "s", "c", "avg")] == [0.25, "m", True, 6, 3, 2.0]
    assert [got["a", 3][c] for c in ("total", "lo", "hi", "s", "c", "avg")] == [0.25, "c", True, 6, 4, 1.5]
    # NaN stays NULL's: the stored 1.5 is kept; a count of 0 makes the mean NULL (SQL's x / 0)
    assert [got["b", 2][c] for c in ("total", "lo", "hi", "s", "c", "avg")] == [1.5, "q", None, None, 0, None]
    assert [got["c", 3][c] for c in ("total", "lo", "hi", "s", "c", "avg")] == [2.0, "z", False, 3, 3, 1.0]
    assert {r["k"]: r["updated"] for r in folded.final.to_pylist()} == {"a": 3, "b": 2, "c": 3}
    assert folded.added == 1


def test_a_float_sum_adds_in_epoch_order() -> None:
    """Bit-equal to applying the epochs one at a time: ((stored + c1) + c2) + c3, not stored + (c1 + c2 + c3)."""
    parts = [1e16, 1.0, 1.0, -1e16]
    stored = rows(("a", parts[0], "x", True, 0, 1, 0.0, 1))
    contributions = rows(*[("a", v, "x", True, 0, 1, None, i) for i, v in enumerate(parts[1:], 2)])
    total = fold(SCHEMA, ("k",), MERGES, MEANS, stored, contributions).final.column("total")[0].as_py()
    assert total == ((parts[0] + parts[1]) + parts[2]) + parts[3] == 0.0


def test_the_undo_of_each_epoch_is_the_row_it_replaced() -> None:
    stored = rows(("a", 1.0, "m", False, 1, 1, 1.0, 1))
    contributions = rows(("a", 1.0, "m", False, 1, 1, None, 2), ("b", 1.0, "m", False, 1, 1, None, 2),
                         ("a", 1.0, "m", False, 1, 1, None, 3))
    undo, present, versions = fold(SCHEMA, ("k",), MERGES, MEANS, stored, contributions).before(("k",), 1)
    got = sorted(zip(versions.tolist(), undo.column("k").to_pylist(), present.tolist(),
                     undo.column("total").to_pylist(), undo.column("updated").to_pylist(), strict=True))
    assert got == [(2, "a", True, 1.0, 1), (2, "b", False, None, None), (3, "a", True, 2.0, 2)]
