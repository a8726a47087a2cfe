"""A source's own id field: a JSON-lines source that resends orders (the same order id in a later
segment, or twice in one) counts each order once; the resent ones are dead letters naming the id.
The sink equals plain Python over the distinct orders; verify is exact."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from sqlalchemy import text

from coordinator.dataflow.discovery import get_job
from absreplay_examples.sample_data import land_jsonl_segment
from tests.helpers import JOBS_DIR, cli_ok, make_workspace

pytestmark = [pytest.mark.spark]
JOBS = str(JOBS_DIR)
T0 = 1_790_000_000_000  # epoch ms


@pytest.mark.sink_unchecked("judged here against plain Python over the distinct orders")
def test_resent_orders_count_once(tmp_path, sqlite_url, spark, monkeypatch) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    ws = make_workspace(tmp_path, sqlite_url, get_job("orders_by_id"), jobs_dir=JOBS)
    distinct: dict[str, dict] = {}
    sent = 0
    for batch in range(3):
        for part in range(2):
            orders = [{"order": f"o{batch}-{part}-{i}", "customer": f"c{i % 4}", "amount": 10 + i,
                       "ts": T0 + batch * 60_000 + i} for i in range(20)]
            if batch:  # resend a few of the previous batch's orders, and one twice in this segment
                orders += [{"order": f"o{batch - 1}-{part}-{i}", "customer": f"c{i % 4}", "amount": 10 + i,
                            "ts": T0 + (batch - 1) * 60_000 + i} for i in range(3)]
                orders.append(orders[0])
            path = ws.input_dir / f"p{part}" / f"seg-{batch:04d}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_name(".tmp").write_text("".join(json.dumps(o) + "\n" for o in orders))
            os.replace(path.with_name(".tmp"), path)
            sent += len(orders)
            distinct.update({o["order"]: o for o in orders})
        cli_ok(ws, "run", "orders_by_id", spark=spark)
    count, amount = Counter(), Counter()
    for o in distinct.values():
        count[o["customer"]] += 1
        amount[o["customer"]] += o["amount"]
    with ws.store.engine.connect() as c:
        got = {k: (n, a) for k, n, a in c.execute(text("SELECT customer, orders, amount FROM orders_by_customer"))}
        dead = c.execute(text("SELECT count(*) FROM dead_letters WHERE job = 'orders_by_id'")).scalar()
    assert got == {k: (count[k], amount[k]) for k in count}
    assert dead == sent - len(distinct) == 2 * 2 * 4  # 2 batches x 2 partitions x (3 resent + 1 twice)
    assert "verified" in cli_ok(ws, "verify", "orders_by_id", spark=spark)


@pytest.mark.sink_unchecked("judged here against plain Python over the distinct orders")
def test_json_lines_in_files_named_jsonl_are_the_jobs_records(tmp_path, sqlite_url, spark, monkeypatch) -> None:
    """A file named ``*.jsonl`` of a JSON-lines source holds that source's records, not id envelopes."""
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    ws = make_workspace(tmp_path, sqlite_url, get_job("orders_by_id"), jobs_dir=JOBS)
    orders = {part: [{"order": f"o{part}-{i}", "customer": f"c{i % 3}", "amount": i, "ts": T0 + i}
                     for i in range(30)] for part in range(2)}
    for part, sent in orders.items():
        land_jsonl_segment(ws.input_dir / f"p{part}", "seg-000001.jsonl", [*sent, sent[0]])  # one resent
    ws.coordinator.inject()
    assert not ws.run_epochs(spark).failed
    ws.coordinator.finalize()
    count, amount = Counter(), Counter()
    for o in (o for sent in orders.values() for o in sent):
        count[o["customer"]] += 1
        amount[o["customer"]] += o["amount"]
    with ws.store.engine.connect() as c:
        got = {k: (n, a) for k, n, a in c.execute(text("SELECT customer, orders, amount FROM orders_by_customer"))}
        dead = c.execute(text("SELECT reason FROM dead_letters WHERE job = 'orders_by_id' ORDER BY partition")).scalars().all()
    assert got == {k: (count[k], amount[k]) for k in count}
    assert [r.split(":")[0] for r in dead] == ["duplicate id o0-0", "duplicate id o1-0"]
