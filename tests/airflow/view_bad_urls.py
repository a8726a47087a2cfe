"""Bad URLs of the ABS Replay view, for a job ``wordcount`` with at most one page of checkpoints and
none numbered 999: each with the status it must get (never 500) and what its message must say.

Shared by the in-process test (tests/airflow/test_airflow_view_errors.py) and the browser test in a real
Airflow (tests/airflow/test_airflow_view_browser.py). Paths are under the view's mount (``/absreplay``).
"""

from __future__ import annotations

BIGINT_MAX = "9223372036854775807"
HUGE = "99999999999999999999"
ID_RANGE = f"is not a whole number from 1 to {BIGINT_MAX}"

#: pages (HTML): (path, status, a part of the message on the error page)
BAD_PAGES: list[tuple[str, int, str]] = [
    (f"/jobs/wordcount/checkpoints/{HUGE}", 422, f"checkpoint id '{HUGE}' {ID_RANGE}"),
    ("/jobs/wordcount/checkpoints/9223372036854775808", 422, f"checkpoint id '9223372036854775808' {ID_RANGE}"),
    (f"/jobs/wordcount/checkpoints/{BIGINT_MAX}", 404, f"checkpoint {BIGINT_MAX} of job 'wordcount' does not exist"),
    ("/jobs/wordcount/checkpoints/999", 404, "checkpoint 999 of job 'wordcount' does not exist"),
    ("/jobs/wordcount/checkpoints/0", 422, f"checkpoint id '0' {ID_RANGE}"),
    ("/jobs/wordcount/checkpoints/-1", 422, f"checkpoint id '-1' {ID_RANGE}"),
    ("/jobs/wordcount/checkpoints/abc", 422, f"checkpoint id 'abc' {ID_RANGE}"),
    ("/jobs/wordcount/checkpoints/1.5", 422, f"checkpoint id '1.5' {ID_RANGE}"),
    ("/jobs/nojob", 404, "no job 'nojob' in the catalog"),
    ("/jobs/nojob/checkpoints/1", 404, "no job 'nojob' in the catalog"),
    ("/jobs/wordcount?page=99", 404, "there is no page 99 of the checkpoints of wordcount"),
    (f"/jobs/wordcount?page={BIGINT_MAX}", 404, f"there is no page {BIGINT_MAX} of the checkpoints of wordcount"),
    ("/jobs/wordcount?status=FAILED&page=2", 404, "there is no page 2 of the FAILED checkpoints of wordcount"),
    (f"/jobs/wordcount?page={HUGE}", 422, f"page '{HUGE}' {ID_RANGE}"),
    ("/jobs/wordcount?page=0", 422, f"page '0' {ID_RANGE}"),
    ("/jobs/wordcount?page=-1", 422, f"page '-1' {ID_RANGE}"),
    ("/jobs/wordcount?page=abc", 422, f"page 'abc' {ID_RANGE}"),
    ("/jobs/wordcount?page=1e3", 422, f"page '1e3' {ID_RANGE}"),
    ("/jobs/wordcount?status=NOPE", 422, "status 'NOPE'"),
    ("/nowhere", 404, "has no page"),
]

#: JSON (``/api/...``): (path, status); the body is FastAPI's JSON error with a ``detail``
BAD_API_CALLS: list[tuple[str, int]] = [
    (f"/api/jobs/wordcount/checkpoints/{HUGE}", 422),
    ("/api/jobs/wordcount/checkpoints/-1", 422),
    ("/api/jobs/wordcount/checkpoints/abc", 422),
    ("/api/jobs/wordcount/checkpoints/999", 404),
    (f"/api/jobs/wordcount/checkpoints?offset={HUGE}", 422),
    ("/api/jobs/wordcount/checkpoints?offset=-1", 422),
    ("/api/jobs/wordcount/checkpoints?offset=abc", 422),
    ("/api/jobs/wordcount/checkpoints?limit=0", 422),
    ("/api/jobs/wordcount/checkpoints?limit=501", 422),
    ("/api/jobs/nojob/timeline", 404),
    ("/api/nowhere", 404),
]
