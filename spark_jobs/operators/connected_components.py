"""connected_components: edge lines -> label propagation through an iterate loop.

State (the loop head ``labels``, keyed by vertex): each vertex's component
label, its sorted neighbour ids, and ``updated``. A label is always the id of
a vertex of the same component and only ever decreases; at the fixpoint it is
the smallest vertex id of the component.

One round of the loop:

- the head merges its input into the state: new edges (both directions; a
  self-loop only adds the vertex), and candidate labels (vertex, label) from
  the back-edge, keeping the minimum. A vertex is *active* when it is new,
  gained a neighbour, or its label dropped;
- the body (``propagate``) sends every active vertex's label to all its
  neighbours;
- the tail (``feedback``) combines the messages per target vertex (minimum)
  and returns them on the back-edge.

Round 1 of epoch n consumes back-edge log n-1 together with the epoch's
edges; later rounds consume the previous round's messages. After
``max_rounds`` rounds (or earlier, once nothing circulates) the messages of
the last round are back-edge log n. Everything is joins and aggregates over
minima and sorted sets, so the result does not depend on partitioning or task
order; each round is materialized (localCheckpoint) to keep lineage short.
The head is one union + aggregate (one shuffle) every round: a cheaper-looking
join of the state with the messages, co-partitioned and so without a shuffle,
got twice as slow with every further round here (Spark 4.2, local mode).

Malformed lines never get here (they are dead letters from inject); if one
did, the epoch fails with ``raise_error`` instead of dropping it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StructField, StructType

from coordinator.record_formats import EDGE_PATTERN

NEIGHBOURS = ArrayType(LongType(), containsNull=False)


def _null(type_name: str) -> Column:
    return F.lit(None).cast(type_name)


class ConnectedComponentsOperators:
    state_schema = StructType(
        [
            StructField("vertex", LongType(), False),
            StructField("component", LongType(), False),
            StructField("neighbors", NEIGHBOURS, False),
            StructField("updated", LongType(), False),
        ]
    )
    key = "vertex"
    sink_columns = ("vertex", "component")
    needs_sequence_numbers = False
    #: a message on the back-edge: "vertex may belong to the component labelled ``label``"
    back_edge_schema = StructType(
        [StructField("vertex", LongType(), False), StructField("label", LongType(), False)]
    )
    back_edge_key = "vertex"

    # -- the operators ----------------------------------------------------------------
    def parse(self, records: DataFrame) -> DataFrame:
        """Lines -> (src, dst)."""
        line = F.col("line")
        edge = F.struct(
            F.regexp_extract(line, EDGE_PATTERN, 1).cast("long").alias("src"),
            F.regexp_extract(line, EDGE_PATTERN, 2).cast("long").alias("dst"),
        )
        bad = F.raise_error(F.concat(F.lit("connected_components: a malformed edge line reached the operator "
                                           "(it should have been a dead letter): "), line))
        return records.select(F.when(line.rlike(EDGE_PATTERN), edge).otherwise(bad).alias("e")).select("e.*")

    def adjacency(self, edges: DataFrame) -> DataFrame:
        """(vertex, new neighbours) of both endpoints of every edge; a self-loop gives the vertex only."""
        both = edges.select(F.col("src").alias("vertex"), F.col("dst").alias("other")).unionByName(
            edges.select(F.col("dst").alias("vertex"), F.col("src").alias("other"))
        )
        both = both.select("vertex", F.when(F.col("vertex") != F.col("other"), F.col("other")).alias("other"))
        return both.groupBy("vertex").agg(F.collect_set("other").alias("neighbors"))

    def head(self, state: DataFrame, adjacency: DataFrame | None, messages: DataFrame | None,
             checkpoint_id: int) -> DataFrame:
        """Merge edges and candidate labels into the state; adds ``active`` (send your label)."""
        parts = [state.select("vertex", F.col("component").alias("old"), "neighbors", "updated",
                              _null("long").alias("msg"))]
        if adjacency is not None:
            parts.append(adjacency.select("vertex", _null("long").alias("old"), "neighbors",
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

    def propagate_and_feedback(self, merged: DataFrame) -> DataFrame:
        """Body and tail: active vertices' labels to their neighbours, combined per target (minimum)."""
        sent = merged.where("active").select(F.explode("neighbors").alias("vertex"), F.col("component").alias("label"))
        return sent.groupBy("vertex").agg(F.min("label").alias("label"))

    # -- the epoch --------------------------------------------------------------------
    def loop_step(
        self, state: DataFrame, records: DataFrame, back_edge: DataFrame | None, checkpoint_id: int,
        max_rounds: int | None,
    ) -> tuple[DataFrame, DataFrame]:
        adjacency = self.adjacency(self.parse(records))
        messages = back_edge
        rounds = 0
        while True:
            merged = self.head(state, adjacency, messages, checkpoint_id).localCheckpoint(eager=True)
            state = merged.drop("active")
            # counted in the pass that materializes them: no extra job per round
            sent = Observation()
            messages = self.propagate_and_feedback(merged).observe(sent, F.count(F.lit(1)).alias("n"))
            messages = messages.localCheckpoint(eager=True)
            adjacency, rounds = None, rounds + 1
            if (max_rounds is not None and rounds >= max_rounds) or not sent.get["n"]:
                return state, messages

    def step(self, state: DataFrame, records: DataFrame, checkpoint_id: int) -> DataFrame:
        """The epoch with the loop run to its fixpoint (what a stop-the-world snapshot would hold)."""
        return self.loop_step(state, records, None, checkpoint_id, None)[0]
