"""A job whose process function deletes keys (found through ABS_JOBS_DIR by tests/operators/test_deletes_job.py).

Shop events as JSON lines (user, item, kind ``add`` or ``checkout``, event time ``ts``). Per user, the
open cart: how many items were added since the user's last checkout, and when the last was. A checkout
empties the cart: the function returns the user's row with ``_delete`` true, the key leaves the state,
and each sink deletes its row in the commit of that checkpoint (a SQL table in the catalog, a Delta
table at ``$CARTS_DELTA``, a Parquet directory at ``$CARTS_PARQUET``). A user's events arrive in event
time order across batches (tests/carts_data.py lands them so): the cart depends only on which events
came, never on where epochs end.
"""

from __future__ import annotations

from pyspark.sql import functions as F

import absreplay.api as abs


def open_cart(state, events):
    """The touched users' carts after the epoch's events: the adds after the last checkout (those of the
    state too when the epoch has no checkout); a cart left empty by a checkout is deleted."""
    checkout = events.groupBy("user").agg(F.max(F.when(F.col("kind") == "checkout", F.col("ts"))).alias("out"))
    adds = (events.join(checkout, "user")
            .where((F.col("kind") == "add") & (F.col("out").isNull() | (F.col("ts") > F.col("out"))))
            .groupBy("user").agg(F.count(F.lit(1)).alias("added"), F.max("ts").alias("newest")))
    cart = checkout.join(state, "user", "left").join(adds, "user", "left")
    kept = F.col("out").isNull()
    items = F.coalesce(F.col("added"), F.lit(0)) + F.when(kept, F.coalesce(F.col("items"), F.lit(0))).otherwise(0)
    last = F.coalesce(F.col("newest"), F.when(kept, F.col("last_add")))
    return cart.select("user", items.alias("items"), last.alias("last_add"), (items == 0).alias("_delete"))


job = abs.Job("open_carts", parallelism=2, description="open carts per user, deleted at checkout")
carts = (
    job.source("events", abs.json_lines({"user": str, "item": str, "kind": str, "ts": int}, time="ts"))
    .key_by("user", str)
    .process("cart", open_cart, state={"items": int, "last_add": int})
)
carts.sink("to_sql", abs.SqlTable("open_carts"))
carts.sink("to_delta", abs.DeltaTable("${CARTS_DELTA}"))
carts.sink("to_parquet", abs.ParquetDirectory("${CARTS_PARQUET}"))
