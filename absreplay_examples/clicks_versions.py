"""The README's clicks job as its user edits it, one job file a version: the file's text with each part
that changes between versions named, for the upgrade tests and benchmark (``tests/cli/test_job_upgrades``,
``bench/upgrade_bench``)."""

from __future__ import annotations

TEMPLATE = """import absreplay.api as abs

job = abs.Job("clicks", parallelism=2)
clicks = job.source("clicks", abs.json_lines({{"user": str, "page": str, "ts": int}}, time="ts"))
clicks.filter("valid", lambda df: df.where(df.page != "{skip}")).key_by({key}).aggregate(
    "per_user", clicks=abs.count(){last}).sink("{sink}", abs.SqlTable("{table}"))
{pages}"""
#: a keyed aggregate more, with its own sink
PAGES = """clicks.key_by("page", str).aggregate("per_page", clicks=abs.count()).sink(
    "pages", abs.SqlTable("clicks_per_page"))
"""
#: the first version: a filter that keeps every click, clicks per user
FIRST = {"skip": "none", "key": '"user", str', "last": "", "pages": "", "sink": "totals", "table": "clicks_per_user"}


def job_file(**parts: str) -> str:
    """The job file of the version that differs from the first in ``parts``."""
    return TEMPLATE.format(**{**FIRST, **parts})
