"""The demo: text lands in batches, barriers are injected, epochs are processed and
checkpoints finalized, then the audit is printed and the committed counts are
checked against an independent recount.
"""

from __future__ import annotations

import shutil
import time

from rich.console import Console
from sqlalchemy import text

from absreplay import views
from absreplay.context import job_context
from absreplay_examples.recount import recount
from absreplay_examples.sample_data import land_batch
from absreplay.submit import run_processing
from coordinator.sources import source
from coordinator.catalog.db import upgrade
from coordinator.errors import AbsError
from coordinator.settings import Settings
from coordinator.checkpoints.store import CheckpointStore

JOB = "wordcount"


def committed_counts(store: CheckpointStore) -> dict[str, int]:
    with store.engine.connect() as c:
        return dict(c.execute(text("SELECT word, count FROM wordcount_counts")).all())


def check_exact(store: CheckpointStore, settings: Settings) -> tuple[bool, int, int]:
    """Does the sink equal a recount of exactly the records before the latest completed barrier?"""
    latest = store.latest_completed(JOB)
    cut = store.cut(JOB, latest.checkpoint_id) if latest else {}
    expected = recount(source.input_dir(settings.data_dir, JOB), cut)
    got = committed_counts(store)
    return got == dict(expected), sum(cut.values()), len(expected)


def run_demo(out: Console, batches: int, lines_per_batch: int) -> bool:
    base = Settings.from_env()
    home = base.home / "demo"
    shutil.rmtree(home, ignore_errors=True)
    settings = Settings.from_env({"ABS_HOME": str(home), "ABS_SPARK_MASTER": base.spark_master})
    out.print(f"[bold]ABS Replay demo[/] in {home} (SQLite catalog, local Spark, local state)")
    upgrade(settings.database_url)
    ctx = job_context(JOB, settings)
    input_dir = source.input_dir(settings.data_dir, JOB)
    t0 = time.perf_counter()
    for batch in range(batches):
        landed = land_batch(input_dir, batch, lines_per_batch // 2)
        outcome = ctx.coordinator.inject()
        out.print(f"batch {batch}: {landed:,} lines landed; barrier {outcome.checkpoint_id} injected")
        if batch % 2 == 1 or batch == batches - 1:
            out.print("processing pending epochs (spark-submit)...")
            code = run_processing(settings, [JOB, "--snapshot-mode", "async"])
            if code:
                raise AbsError(f"processing failed with exit code {code}")
            out.print(views.finalize_line(JOB, ctx.coordinator.finalize()))
            exact, records, words = check_exact(ctx.store, settings)
            out.print(f"  sink {'equals' if exact else 'DIFFERS FROM'} the recount ({records:,} records, {words:,} words)")
    return finish_demo(out, ctx, settings, t0)


def finish_demo(out: Console, ctx, settings: Settings, t0: float, where: str = "") -> bool:
    """The audit table, the top words and the verdict line every demo ends with."""
    out.print(views.history_table(JOB, ctx.store.history(JOB)))
    exact, records, words = check_exact(ctx.store, settings)
    top = sorted(committed_counts(ctx.store).items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    out.print("top words: " + ", ".join(f"{w}={c}" for w, c in top))
    out.print(f"demo took {time.perf_counter() - t0:.1f}s{where}; audit it with: "
              f"sqlite3 {settings.database_url[10:]} 'SELECT * FROM snapshot_history'")
    verdict = "EXACT" if exact else "NOT EXACT"
    out.print(f"[bold]{verdict}[/]: committed counts {'equal' if exact else 'differ from'} an independent recount "
              f"of {records:,} records ({words:,} distinct words)")
    return exact
