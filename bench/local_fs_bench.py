"""Local file system benchmark: Parquet writes with Hadoop's chmod per file, and with spark_jobs.local_fs.

    python bench/local_fs_bench.py [--writes 40] [--rounds 2]

One local[2] session writes ``--writes`` small Parquet tables partitioned seven ways, in turns (A/B/A/B,
``--rounds`` each) with Spark's own local file system and with ``spark_jobs.local_fs``'s. Each turn's CPU is
the session JVM's and its children's (the chmod processes) from /proc. Prints the figures and writes
bench/results/local_fs.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_jobs import local_fs  # noqa: E402
from spark_jobs.session import build_session  # noqa: E402


def jvm_cpu_s(pid: int) -> float:
    """CPU seconds of the JVM and of its children it waited for (utime, stime, cutime, cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def turn(spark, pid: int, out: Path, writes: int) -> tuple[float, float]:
    df = spark.range(1000).selectExpr("id", "id % 7 AS k")
    c0, t0 = jvm_cpu_s(pid), time.perf_counter()
    for i in range(writes):
        df.write.mode("overwrite").partitionBy("k").parquet(str(out / f"w{i}"))
    return time.perf_counter() - t0, jvm_cpu_s(pid) - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "local_fs.json"))
    args = ap.parse_args()
    spark = build_session("abs-local-fs-bench", 2, "local[2]")
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    kinds = {"hadoop": local_fs.uninstall, "local_fs": local_fs.install}
    runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        turn(spark, pid, Path(tmp) / "warmup", 5)
        for r in range(args.rounds):
            for kind, use in kinds.items():
                name = use(spark)
                wall, cpu = turn(spark, pid, Path(tmp) / f"{kind}-{r}", args.writes)
                runs[kind].append({"file_system": name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)})
                print(f"{kind:8} {name:45} {wall:6.2f} s {cpu:6.2f} CPU-s", flush=True)
    spark.stop()
    median = {kind: {k: statistics.median(x[k] for x in rs) for k in ("wall_s", "cpu_s")} for kind, rs in runs.items()}
    result = {"writes": args.writes, "partitions_per_write": 7, "master": "local[2]", "runs": runs,
              "median": median, "ratios": {k: round(median["local_fs"][k] / median["hadoop"][k], 2)
                                           for k in ("wall_s", "cpu_s")}}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"local_fs / hadoop: wall {result['ratios']['wall_s']}, CPU {result['ratios']['cpu_s']} -> {args.out}")


if __name__ == "__main__":
    main()
