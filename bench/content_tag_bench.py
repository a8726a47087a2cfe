"""Content tag benchmark: what checking an epoch's segments against their content tags costs, on the driver
(``segment_changes.check_before_run`` reads each file once more) against Spark reading the same epoch.

    python bench/content_tag_bench.py [--segments 16] [--mib 16] [--repeat 4]

Lands ``--segments`` text segments of ``--mib`` MiB each in a temporary directory, then times, best of
``--repeat`` (in turns, so that a busy machine slows each alike): the driver's ``content_tag_of`` of every
segment; one local[2] session counting the epoch's records as the runs read them, whole
(``epoch_source.read_epoch``) and split into lines (``epoch_source.read_lines``); and the whole-file read
again with each file's ``xxhash64`` compared in the same scan, the one reader that could check the bytes it
reads itself. Prints the figures and writes bench/results/content_tag.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyspark.sql import functions as F  # noqa: E402

from coordinator.catalog.models import SourceSegment  # noqa: E402
from coordinator.sources.record_formats import TextLines  # noqa: E402
from coordinator.sources.segment_reader import content_tag_of  # noqa: E402
from spark_jobs.records.epoch_source import read_epoch, read_lines  # noqa: E402
from spark_jobs.records.xxh64 import SPARK_SEED, xxh64  # noqa: E402
from spark_jobs.session import build_session  # noqa: E402


def land(root: Path, segments: int, mib: int) -> list[SourceSegment]:
    rng = random.Random(1)
    words = [f"word{i}" for i in range(5000)]
    block = "".join(" ".join(rng.choices(words, k=8)) + "\n" for _ in range(20_000)).encode()
    (root / "p0").mkdir(parents=True)
    out, offset = [], 0
    for i in range(segments):
        path = root / "p0" / f"seg-{i:06d}.txt"
        with path.open("wb") as f:
            while f.tell() < mib << 20:
                f.write(block)
        records = path.read_bytes().count(b"\n")
        out.append(SourceSegment(partition="p0", name=path.name, first_offset=offset, records=records))
        offset += records
    return out


def guarded_count(spark, root: Path, segments: list[SourceSegment]) -> int:
    """The whole-file read with each file's bytes checked in the scan: its xxhash64 against the driver's."""
    def signed(h: int) -> int:
        return h - (1 << 64) if h >= 1 << 63 else h

    paths = [root / s.partition / s.name for s in segments]
    pairs = ", ".join(f"'file:{path}', {signed(xxh64(path.read_bytes(), SPARK_SEED))}L" for path in paths)
    raw = spark.read.text([str(path) for path in paths], wholetext=True)
    ok = F.xxhash64("value") == F.element_at(F.expr(f"map({pairs})"), F.col("_metadata.file_path"))
    value = F.when(ok, F.col("value")).otherwise(F.raise_error(F.lit("changed")))
    return raw.select(F.posexplode(F.split(value, "\n", -1))).where(F.length("col") > 0).count()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=16)
    ap.add_argument("--mib", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "content_tag.json"))
    args = ap.parse_args()
    spark = build_session("abs-content-tag-bench", 2, "local[2]")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        segments = land(root, args.segments, args.mib)
        records = sum(s.records for s in segments)
        ways = {
            "driver_content_tags": lambda: [content_tag_of(root / s.partition / s.name) for s in segments],
            "spark_whole_files": lambda: read_epoch(spark, root, segments, TextLines()).count(),
            "spark_lines": lambda: read_lines(spark, root, segments, TextLines()).count(),
            "spark_whole_files_checked": lambda: guarded_count(spark, root, segments),
        }
        runs: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.repeat):
            for way, run in ways.items():
                t0 = time.perf_counter()
                run()
                runs[way].append(round(time.perf_counter() - t0, 3))
                print(f"{way:28} {runs[way][-1]:7.3f} s", flush=True)
    spark.stop()
    best = {way: min(times) for way, times in runs.items()}
    result = {"segments": args.segments, "mib_each": args.mib, "records": records, "master": "local[2]",
              "runs_s": runs, "best_s": best,
              "driver_share_of_whole_file_read": round(best["driver_content_tags"] / best["spark_whole_files"], 3)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"best: {best} -> {args.out}")


if __name__ == "__main__":
    main()
