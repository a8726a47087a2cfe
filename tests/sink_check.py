"""The lost/duplicated checker, for every job, run after every test that used a workspace.

A sink's high-water marks are its claim: every source record below them is in the
sink, exactly once. After each test, each workspace the test made is judged against an
independent recomputation from the source files up to those marks (absreplay_examples.recount
for wordcount, absreplay_examples.union_find for connected_components, tests/views_data for the
tests' views_by_country job, tests/carts_data for open_carts, tests/sessions_data for click_sessions, tests/joins_data for clicks_to_buys, tests/clicks_data for the README's clicks, absreplay_examples.synthetic_data for synthetic, epoch by epoch
along the checkpoints' recorded epoch starts), never the job's own
code. A test that leaves a sink inconsistent on purpose says so with
``@pytest.mark.sink_unchecked("why")``.

Not judged: a workspace without source files (catalog-level tests stage synthetic
output), id envelope segments (which ones is the job's declaration; their expected output
depends on the id store's policy, which those tests check themselves), a sink that never committed, and a
connected_components sink while records still circulate in the loop (labels converge
only when the back-edge log is empty).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select, text

from absreplay_examples.recount import recount
from absreplay_examples.union_find import labels_at
from coordinator.checkpoints import back_edge_logs
from coordinator.sources import source
from coordinator.storage import filesystems
from coordinator.storage.location import Location
from coordinator.catalog.models import BackEdgeLog, SinkWatermark
from absreplay_examples import synthetic_data
from tests import views_data
from tests.helpers import lost_and_duplicated

def wrong_and_extra(expected: dict, got: dict) -> tuple[int, int]:
    """Labels: keys missing or with another value (lost), keys that should not be there (duplicated)."""
    return sum(1 for k, v in expected.items() if got.get(k) != v), sum(1 for k in got if k not in expected)


def marks_of(ws, sink: str) -> dict[str, int]:
    """A sink's high-water marks: the cut its committed output claims."""
    with ws.store.sessions() as s:
        return dict(s.execute(select(SinkWatermark.partition, SinkWatermark.offset).where(
            SinkWatermark.job == ws.job.name, SinkWatermark.sink == sink)).all())


def _kafka_word_counts(ws) -> tuple[str, tuple[int, int]] | None:
    """Each topic against a recount at its sink's marks: a word's latest count, and every word appended once,
    plus once more for each epoch a rewind superseded after the append sink had published it (an append-only
    topic keeps those records, as documented)."""
    from collections import Counter

    from coordinator.catalog.models import Checkpoint, SinkTransaction
    from coordinator.checkpoints.lifecycle import CheckpointStatus, SinkTxnStatus

    specs = {sink.name: sink for sink in ws.job.sinks}
    marks = {name: marks_of(ws, name) for name in specs}
    if not any(marks.values()):
        return None
    url = ws.settings.database_url
    counts = {r["word"]: r["count"] for r in specs["counts_out"].target(url).read().to_pylist()}
    words = Counter(r["word"] for r in specs["words_out"].target(url).read().to_pylist())
    with ws.store.sessions() as s:
        republished = s.execute(select(Checkpoint.checkpoint_id, Checkpoint.epoch_start).join(
            SinkTransaction, (SinkTransaction.job == Checkpoint.job)
            & (SinkTransaction.checkpoint_id == Checkpoint.checkpoint_id)).where(
            Checkpoint.job == ws.job.name, Checkpoint.status == CheckpointStatus.SUPERSEDED,
            SinkTransaction.sink == "words_out", SinkTransaction.status == SinkTxnStatus.COMMITTED)).all()
    appended = recount(ws.input_dir, marks["words_out"])
    for checkpoint_id, start in republished:
        before = recount(ws.input_dir, ws.store.cut(ws.job.name, start)) if start else Counter()
        appended += recount(ws.input_dir, ws.store.cut(ws.job.name, checkpoint_id)) - before
    lost = dup = 0
    for found, expected in ((Counter(counts), recount(ws.input_dir, marks["counts_out"])), (words, appended)):
        lost += sum((expected - found).values())
        dup += sum((found - expected).values())
    return f"{ws.job.name} sinks counts_out, words_out", (lost, dup)


def epoch_cuts(store, job: str, checkpoint_id: int) -> list[dict[str, int]]:
    """The cuts ending the epochs that produced ``checkpoint_id``'s state, in order (each checkpoint's
    epoch starts at the cut of its ``epoch_start``)."""
    chain = [checkpoint_id]
    while (start := store.checkpoint(job, chain[0]).epoch_start) not in (None, 0):
        chain.insert(0, start)
    return [store.cut(job, n) for n in chain]


def _files(root: Path | Location) -> list[tuple[str, str]]:
    """(folder relative to ``root``, name) of every file under ``root``, wherever it is."""
    if isinstance(root, Location):
        return [(f.path[len(root.path) + 1:].rsplit("/", 1)[0], f.base_name)
                for f in filesystems.files_under(root.fs, root.path)]
    return [(p.parent.relative_to(root).as_posix(), p.name) for p in root.rglob("*") if p.is_file()]


def judge(ws) -> tuple[str, tuple[int, int]] | None:
    """(what was compared, (lost, duplicated)), or None when this workspace cannot be judged."""
    root = source.input_dir(ws.settings.data_dir, ws.job.name)
    segments = _files(root)
    if not segments or any(ws.job.format_of(partition).envelope(name) for partition, name in segments):
        return None
    if ws.job.name == "views_by_country":  # tests/jobs: its sinks hold windows, judged by tests/views_data
        tables = {s.name: s.target(ws.settings.database_url).read() for s in ws.job.sinks
                  if not s.name.endswith("_late")}
        found = views_data.check(ws.store, ws.job.name, ws.input_dir, tables)
        return (f"{ws.job.name} sinks {sorted(found)}",
                (sum(lost for lost, _ in found.values()), sum(dup for _, dup in found.values())))
    if ws.job.name == "click_sessions":  # tests/jobs: session windows and their late clicks, tests/sessions_data
        from tests import sessions_data

        found = sessions_data.check(ws)
        return (f"{ws.job.name} sinks {sorted(found)}",
                (sum(lost for lost, _ in found.values()), sum(dup for _, dup in found.values())))
    if ws.job.name == "clicks_to_buys":  # tests/jobs: an interval join and its late records, tests/joins_data
        from tests import joins_data

        found = joins_data.check(ws)
        return (f"{ws.job.name} sinks {sorted(found)}",
                (sum(lost for lost, _ in found.values()), sum(dup for _, dup in found.values())))
    if ws.job.name == "idle_users":  # tests/jobs: state TTL in epochs, tests/ttl_data
        from tests import ttl_data

        found = ttl_data.check(ws)
        return (f"{ws.job.name} sinks {sorted(found)}",
                (sum(lost for lost, _ in found.values()), sum(dup for _, dup in found.values()))) if found else None
    if ws.job.name == "open_carts":  # tests/jobs: a process function that deletes keys, three sinks
        from tests import carts_data

        if not any(marks_of(ws, sink.name) for sink in ws.job.sinks):
            return None
        found = carts_data.check(ws)
        return (f"{ws.job.name} sinks {sorted(found)}",
                (sum(lost for lost, _ in found.values()), sum(dup for _, dup in found.values())))
    if ws.job.name == "kafka_word_counts":  # tests/jobs: sinks that are Kafka topics, read back read_committed
        return _kafka_word_counts(ws)
    if ws.job.name == "clicks":  # the README's job, in each version a user gives it: tests/clicks_data
        from tests import clicks_data

        found = clicks_data.check(ws, marks_of)
        return (f"{ws.job.name} sinks {sorted(found)}",
                (sum(lost for lost, _ in found.values()), sum(dup for _, dup in found.values()))) if found else None
    [sink_spec] = ws.job.sinks
    sink = sink_spec.declaration.table
    with ws.store.sessions() as s:
        marks = dict(s.execute(select(SinkWatermark.partition, SinkWatermark.offset).where(
            SinkWatermark.job == ws.job.name, SinkWatermark.sink == sink_spec.name)).all())
        at = s.scalar(select(func.max(SinkWatermark.checkpoint_id)).where(SinkWatermark.job == ws.job.name))
        circulating = s.scalar(select(func.coalesce(func.sum(BackEdgeLog.records), 0)).where(
            BackEdgeLog.job == ws.job.name, BackEdgeLog.checkpoint_id == at)) if at else 0
    if not marks:
        return None
    cut = {p: o for p, o in marks.items() if p != back_edge_logs.LOOP_PARTITION}
    if sink == "synthetic_out":  # changelogs of changelogs: replayed epoch by epoch, along the cuts
        cuts = [*epoch_cuts(ws.store, ws.job.name, at)[:-1], cut]
        with ws.store.engine.connect() as c:
            got = {k: tuple(v) for k, *v in c.execute(text("SELECT k3, total, updates, peak FROM synthetic_out"))}
        expected = synthetic_data.reference(ws.input_dir, cuts).per_bucket
        return f"{ws.job.name} sink at checkpoint {at}", wrong_and_extra(expected, got)
    with ws.store.engine.connect() as c:
        if sink == "wordcount_counts":
            got = dict(c.execute(text("SELECT word, count FROM wordcount_counts")).all())
            expected = dict(recount(root, cut, lines=ws.job.lines))
        elif sink == "cc_labels":
            if circulating:
                return None
            got = dict(c.execute(text("SELECT vertex, component FROM cc_labels")).all())
            expected = labels_at(source.input_dir(ws.settings.data_dir, ws.job.name), cut)
            return f"{ws.job.name} sink at checkpoint {at}", wrong_and_extra(expected, got)
        else:
            raise AssertionError(f"no independent recomputation for sink {sink}: add one here")
    return f"{ws.job.name} sink at checkpoint {at}", lost_and_duplicated(expected, got)
