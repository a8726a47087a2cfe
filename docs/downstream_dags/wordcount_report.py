"""An example downstream DAG: it runs each time ABS Replay commits new output to wordcount's sink.

Every sink of a job is an Airflow asset named by its location (``SinkDeclaration.location``):
here the SQL table ``wordcount_counts`` in the catalog database, so its URI is
``postgres://HOST:PORT/DATABASE/public/wordcount_counts`` (the password never in it). The
``finalize`` task of ``abs_wordcount_epochs``, and a recovery that commits, emit one event of it
per run that committed something to the table; a finalize that committed nothing emits none, so
this DAG does not run for it. Each event's extra says what was committed: ``checkpoints``,
``rows`` and ``high_water_marks``.

Copy this file into your DAGs folder and put your catalog's host, port and database in the URI
(``WORDCOUNT_COUNTS_ASSET`` overrides it here, which the project's tests use). Airflow's task
log of ``finalize`` prints every asset event it emits, with the URI.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Asset, dag, task

WORDCOUNT_COUNTS = Asset(os.environ.get(
    "WORDCOUNT_COUNTS_ASSET", "postgres://catalog.internal:5432/absreplay/public/wordcount_counts"))


@dag(
    schedule=[WORDCOUNT_COUNTS],
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["absreplay", "example"],
    doc_md=__doc__,
)
def wordcount_report() -> None:
    @task
    def report(triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """What was committed since this DAG last ran (several commits may trigger one run)."""
        committed = []
        for event in triggering_asset_events[WORDCOUNT_COUNTS]:
            extra = event.extra
            print(f"wordcount_counts: checkpoint(s) {extra['checkpoints']} committed {extra['rows']} row(s); "
                  f"every record before {extra['high_water_marks']} is in the table")
            committed.append(extra)
        return committed

    report()


wordcount_report()
