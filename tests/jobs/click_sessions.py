"""Session windows (tests/operators/test_session_windows.py runs it; tests/sessions_data.py lands its input and
recomputes its sink in plain Python): clicks (JSON lines: id, user, event time ``ts`` in epoch ms,
time on page ``ms``) per user in sessions of clicks less than 20 s apart, emitted once the watermark
(newest click - 15 s) passes a session's last click + 20 s + 5 s of allowed lateness. Late clicks are
dead letters of the window."""

import absreplay.api as abs

GAP_MS, DELAY_MS, LATENESS_MS = 20_000, 15_000, 5_000

job = abs.Job("click_sessions", parallelism=2, description="clicks per user and session")
(job.source("clicks", abs.json_lines({"id": str, "user": str, "ts": int, "ms": int}, time="ts"))
    .key_by("user", str)
    .window("sessions", abs.Session(gap_ms=GAP_MS), time="ts", delay_ms=DELAY_MS,
            allowed_lateness_ms=LATENESS_MS, clicks=abs.count(), last=abs.max("ts"), ms=abs.sum("ms"))
    .sink("to_sql", abs.SqlTable("click_sessions")))
