"""connected_components (docs/jobs.md, "Cyclic dataflows"): edge lines -> label propagation in an iterate loop -> SQL.

Records are lines ``src dst``: two integer vertex ids (64-bit, optional sign)
separated by spaces or tabs; any other line is a dead letter at inject, with
its reason. ``EDGE_PATTERN`` is written so that Python's ``re`` and Java's
regex engine read it the same way: ASCII classes only, no ``\\d`` or ``\\s``.

State (the loop head ``labels``, keyed by vertex): each vertex's component
label and its sorted neighbour ids. A label is always the id of a vertex of
the same component and only ever decreases; at the fixpoint it is the smallest
vertex id of the component. One round of the loop:

- the head merges its input into the state: new edges (both directions; a
  self-loop only adds the vertex), and candidate labels (vertex, label) from
  the back-edge, keeping the minimum. A vertex is *active* when it is new,
  gained a neighbour, or its label dropped;
- the body (``propagate``) sends every active vertex's label to all its
  neighbours, and the tail (``feedback``) combines the messages per target
  vertex (minimum) and returns them to the head.

Everything is joins and aggregates over minima and sorted sets, so the result
does not depend on partitioning or task order. The head is one union +
aggregate (one shuffle) every round: a cheaper-looking join of the state with
the messages, co-partitioned and so without a shuffle, got twice as slow with
every further round here (Spark 4.2, local mode).
"""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

import absreplay.api as abs

EDGE_PATTERN = r"^[ \t\r\f\x0B]*([+-]?[0-9]+)[ \t\r\f\x0B]+([+-]?[0-9]+)[ \t\r\f\x0B]*$"
_EDGE = re.compile(EDGE_PATTERN.encode("ascii"))
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def parse_edge(line: bytes) -> tuple[int, int] | None:
    """(src, dst) of an edge line, or None when the line is not one."""
    m = _EDGE.fullmatch(line)
    if m is None:
        return None
    src, dst = int(m.group(1)), int(m.group(2))
    if not (LONG_MIN <= src <= LONG_MAX and LONG_MIN <= dst <= LONG_MAX):
        return None
    return src, dst


def edge_problem(line: bytes) -> str | None:
    if _EDGE.fullmatch(line) is None:
        return "not an edge: expected two integer vertex ids 'src dst' separated by spaces or tabs"
    if parse_edge(line) is None:
        return "not an edge: a vertex id does not fit in a signed 64-bit integer"
    return None


def _null(type_name: str) -> Column:
    return F.lit(None).cast(type_name)


def parse(records: DataFrame) -> DataFrame:
    """Lines -> (src, dst). Malformed lines are dead letters from inject; if one got here, the
    epoch fails with ``raise_error`` instead of dropping it."""
    line = F.col("line")
    edge = F.struct(
        F.regexp_extract(line, EDGE_PATTERN, 1).cast("long").alias("src"),
        F.regexp_extract(line, EDGE_PATTERN, 2).cast("long").alias("dst"),
    )
    bad = F.raise_error(F.concat(F.lit("connected_components: a malformed edge line reached the operator "
                                       "(it should have been a dead letter): "), line))
    return records.select(F.when(line.rlike(EDGE_PATTERN), edge).otherwise(bad).alias("e")).select("e.*")


def adjacency(edges: DataFrame) -> DataFrame:
    """(vertex, new neighbours) of both endpoints of every edge; a self-loop gives the vertex only."""
    both = edges.select(F.col("src").alias("vertex"), F.col("dst").alias("other")).unionByName(
        edges.select(F.col("dst").alias("vertex"), F.col("src").alias("other"))
    )
    both = both.select("vertex", F.when(F.col("vertex") != F.col("other"), F.col("other")).alias("other"))
    return both.groupBy("vertex").agg(F.collect_set("other").alias("neighbors"))


def head(state: DataFrame, edges: DataFrame | None, messages: DataFrame | None, checkpoint_id: int) -> DataFrame:
    """Merge edges and candidate labels into the state; adds ``active`` (send your label)."""
    parts = [state.select("vertex", F.col("component").alias("old"), "neighbors", "updated",
                          _null("long").alias("msg"))]
    if edges is not None:
        parts.append(adjacency(edges).select("vertex", _null("long").alias("old"), "neighbors",
                                             _null("long").alias("updated"), _null("long").alias("msg")))
    if messages is not None:
        parts.append(messages.select("vertex", _null("long").alias("old"), _null("array<long>").alias("neighbors"),
                                     _null("long").alias("updated"), F.col("label").alias("msg")))
    rows = parts[0]
    for part in parts[1:]:
        rows = rows.unionByName(part)
    merged = rows.groupBy("vertex").agg(
        F.min("old").alias("old"),
        F.max(F.when(F.col("old").isNotNull(), F.size("neighbors"))).alias("old_degree"),
        F.sort_array(F.array_distinct(F.flatten(F.collect_list("neighbors")))).alias("neighbors"),
        F.max("updated").alias("updated"),
        F.min("msg").alias("msg"),
    )
    component = F.least(F.coalesce(F.col("old"), F.col("vertex")), F.col("msg"))
    active = (
        F.col("old").isNull()
        | (F.col("component") < F.col("old"))
        | (F.size("neighbors") > F.coalesce(F.col("old_degree"), F.lit(0)))
    )
    return merged.withColumn("component", component).select(
        "vertex",
        "component",
        "neighbors",
        F.when(active, F.lit(checkpoint_id).cast("long")).otherwise(F.col("updated")).alias("updated"),
        active.alias("active"),
    )


def propagate(merged: DataFrame) -> DataFrame:
    """Body and tail: active vertices' labels to their neighbours, combined per target (minimum)."""
    sent = merged.where("active").select(F.explode("neighbors").alias("vertex"), F.col("component").alias("label"))
    return sent.groupBy("vertex").agg(F.min("label").alias("label"))


job = abs.Job("connected_components", parallelism=2,
              description="connected components of an undirected edge list, by label propagation in a loop")
(
    job.source("source", abs.TextLines(check=edge_problem))
    .flat_map("parse", parse)
    .key_by("vertex", int)
    .iterate("labels", abs.Loop(head=head, body=propagate, back_edge={"vertex": int, "label": int},
                                back_edge_key="vertex", rounds=4),
             state={"component": int, "neighbors": list[int]})
    .sink("sink", abs.SqlTable("cc_labels"), columns=("vertex", "component"))
)
