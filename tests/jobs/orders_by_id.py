"""A job whose source resends records (tests/sources/test_id_field.py runs it): JSON lines with an id field;
the id store makes each order count once. A sum of amounts per customer into the catalog database."""

import absreplay.api as abs

job = abs.Job("orders_by_id", parallelism=2, description="amount per customer, each order once")
(
    job.source("orders", abs.json_lines({"order": str, "customer": str, "amount": int, "ts": int},
                                        time="ts", id="order"))
    .key_by("customer", str)
    .aggregate("spent", orders=abs.count(), amount=abs.sum("amount"))
    .sink("out", abs.SqlTable("orders_by_customer"))
)
