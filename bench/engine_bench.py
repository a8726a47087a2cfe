"""Storage engines for one subtask's keyed aggregate state: the reload from a checkpoint, and an epoch's fold.

    python bench/engine_bench.py [--keys 1e5,1e6] [--touched 1e4] [--epochs 10] [--quick] [--out FILE]
                                 [--engines sqlite,rocksdict,lmdb,duckdb,arrow_runs]

Today's store (SQLite, ``spark_jobs.state.stores.store.SubtaskStore``) against RocksDB (rocksdict), LMDB, DuckDB and
sorted Arrow runs (``ArrowRuns``, LSM-like), each state of N keys (k, count, total, updated):

- ``reload_s``: the checkpoint's Parquet file read, sorted by key (as ``spark_jobs.state.stores.loader._chain`` does) and loaded;
  ``first_epoch_after_reload_s``: the first epoch after it (where a lazy engine pays);
- ``median_epoch_s``, ``max_epoch_s``: ``--epochs`` more epochs of ``--touched`` keys (half held, half new), each
  in one transaction: the touched keys' rows read, folded with the contributions (``spark_jobs.state.stores.fold.fold``, the same
  for every engine), written back with the epoch's undo (pre-images, ``KEEP`` versions kept) and the version;
- ``bytes_on_disk``: the blocks the store's files take after the epochs.

Then the touched keys' rows (and ``UNTOUCHED`` others) are checked against a plain-Python fold: an engine that
disagrees gets no figures and the bench exits 1. Each (engine, size) runs in a process and temp dir of its own;
an exception or a crash is recorded as its error. Writes bench/results/engine.json, merged into what the file
holds (other engines and sizes kept); ``--quick`` (1e4 and 1e5 keys, 3 epochs) writes engine-quick.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from importlib.metadata import version as version_of
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.kit import options  # noqa: E402
from bench.engines import CHECKPOINT, CLASSES, SCHEMA, UNTOUCHED, VALUES, folded_epoch  # noqa: E402

console = Console(width=160, markup=False)
ENGINES = ("sqlite", "rocksdict", "lmdb", "duckdb", "arrow_runs")
OPS = ("reload_s", "first_epoch_after_reload_s", "median_epoch_s", "max_epoch_s", "bytes_on_disk")
NOTES = ["no engine syncs to disk at an epoch's commit but duckdb (its WAL): sqlite in WAL mode with synchronous="
         "NORMAL, rocksdb's WAL unsynced, lmdb sync=False, arrow_runs plain writes and a rename",
         "duckdb has threads=1 (a store is one Spark task's, on one core); rocksdb its background threads and a "
         "10-bit bloom filter", "the page cache is warm: a reload reads a file just written",
         "keys: 16 hex digits of a hash of the key's id; values: int64"]


# -- the workload -----------------------------------------------------------------------------------------------
def key_strings(ids: np.ndarray) -> pa.Array:
    """Key ``i``: 16 hex digits of a bijective hash of ``i`` (unique, in an order unrelated to ``i``)."""
    mixed, digits = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15), np.frombuffer(b"0123456789abcdef", np.uint8)
    data = np.empty((len(ids), 16), np.uint8)
    for j in range(16):
        data[:, j] = digits[(mixed >> np.uint64(60 - 4 * j)) & np.uint64(15)]
    offsets = np.arange(0, 16 * len(ids) + 1, 16, dtype=np.int32)
    return pa.StringArray.from_buffers(len(ids), pa.py_buffer(offsets), pa.py_buffer(data))


def write_workload(data: Path, keys: int, touched: int, epochs: int, seed: int) -> None:
    """checkpoint.parquet (``keys`` rows, in no key order), epoch-NN.parquet (a row per touched key), and
    reference.parquet: the final rows of every touched key and of ``UNTOUCHED`` others, folded in Python."""
    rng = np.random.default_rng(seed)
    count, total = rng.integers(1, 1_000, keys), rng.integers(1, 1_000, keys)
    pq.write_table(pa.table([key_strings(np.arange(keys)), count, total, np.full(keys, CHECKPOINT)], schema=SCHEMA),
                   data / "checkpoint.parquet")

    def held(i: int) -> list[int]:
        return [int(count[i]), int(total[i]), CHECKPOINT] if i < keys else [0, 0, 0]

    reference, half = {int(i): held(i) for i in rng.choice(keys, min(UNTOUCHED, keys), replace=False)}, touched // 2
    for e in range(epochs):
        ids = rng.permutation(np.concatenate([rng.choice(keys, half, replace=False),
                                              keys + e * (touched - half) + np.arange(touched - half)]))
        c, t, v = rng.integers(1, 10, len(ids)), rng.integers(-1_000, 1_000, len(ids)), CHECKPOINT + 1 + e
        pq.write_table(pa.table([key_strings(ids), c, t, np.full(len(ids), v)], schema=SCHEMA),
                       data / f"epoch-{e:02d}.parquet")
        for i, dc, dt in zip(ids.tolist(), c.tolist(), t.tolist(), strict=True):
            row = reference.setdefault(i, held(i))
            row[0], row[1], row[2] = row[0] + dc, row[1] + dt, v
    ids = np.array(sorted(reference))
    pq.write_table(pa.table([key_strings(ids), *np.array([reference[i] for i in ids.tolist()]).T.copy()],
                            schema=SCHEMA), data / "reference.parquet")


# -- one engine at one size, in a process of its own --------------------------------------------------------------
def measure_engine(engine: str, data: Path, store: Path) -> dict:
    """The reload and the epochs, timed, then the check: the figures, and how many keys disagree."""
    reference = pq.read_table(data / "reference.parquet")
    folded_epoch(SCHEMA.empty_table(), reference.sort_by("k"), 0)  # warm-up: Parquet, sorts, the fold
    tag, out, db = f"[{engine}, {pq.read_metadata(data / 'checkpoint.parquet').num_rows:,} keys]", {}, \
        CLASSES[engine](store)
    print(f"{tag} reload", flush=True)
    t0, cpu0 = time.perf_counter(), time.process_time()  # CPU time too (every thread's): the machine may be busy
    rows = pq.read_table(data / "checkpoint.parquet").sort_by([("k", "ascending")])
    out["reload_read_sort_s"] = time.perf_counter() - t0  # the part every engine shares
    db.reload(rows)
    out["reload_s"], out["reload_cpu_s"] = time.perf_counter() - t0, time.process_time() - cpu0
    del rows
    epochs, times, cpu = sorted(data.glob("epoch-*.parquet")), [], []
    print(f"{tag} {len(epochs)} epochs", flush=True)
    for i, path in enumerate(epochs):
        contributions = pq.read_table(path)
        t0, cpu0 = time.perf_counter(), time.process_time()
        db.apply(contributions, CHECKPOINT + 1 + i, CHECKPOINT + i)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - cpu0)
    out.update(first_epoch_after_reload_s=times[0], fold_epoch_s=times[1:], median_epoch_s=statistics.median(times[1:]),
               max_epoch_s=max(times[1:]), median_epoch_cpu_s=statistics.median(cpu[1:]))
    print(f"{tag} check", flush=True)
    got = db.rows_of(reference.column("k"))
    mine = dict(zip(got.column("k").to_pylist(), zip(*(got.column(c).to_pylist() for c in VALUES))))
    expected = zip(reference.column("k").to_pylist(), zip(*(reference.column(c).to_pylist() for c in VALUES)))
    out["checked_keys"], out["wrong_keys"] = reference.num_rows, sum(mine.get(k) != v for k, v in expected)
    db.close()
    out["bytes_on_disk"] = sum(f.stat().st_blocks * 512 for f in store.rglob("*") if f.is_file())
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_worker(engine: str, data: Path, store: Path, timeout: float) -> dict:
    """``measure_engine`` in a child process (its progress lines printed as they come), or its error."""
    store.mkdir(parents=True)
    result = store.with_suffix(".json")
    try:
        proc = subprocess.run([sys.executable, __file__, "--worker", engine, "--data", str(data), "--store", str(store),
                               "--result", str(result)], timeout=timeout, stderr=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    finally:
        shutil.rmtree(store, ignore_errors=True)
    if not result.exists():
        return {"error": f"exit code {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    return json.loads(result.read_text())


# -- the results ------------------------------------------------------------------------------------------------
def machine() -> dict:
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"cores": os.cpu_count(), "memory_gb": round(memory / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform(), "sqlite": sqlite3.sqlite_version,
            **{p: version_of(p) for p in ("pyarrow", "numpy", "rocksdict", "lmdb", "duckdb")}}


def summarize(runs: dict) -> tuple[dict, dict]:
    """The fastest (smallest) engine per operation and size, and each engine's figures over sqlite's."""
    fastest, ratios = {}, {}
    for op in OPS:
        for size in sorted({s for by_size in runs.values() for s in by_size}, key=int):
            if ok := {e: r[size][op] for e, r in runs.items() if op in r.get(size, {})}:
                fastest.setdefault(op, {})[size] = min(ok, key=ok.get)
    for engine, by_size in runs.items():
        for size, r in by_size.items():
            if "error" not in r and "error" not in (base := runs.get("sqlite", {}).get(size, {"error": "none"})):
                ratios.setdefault(engine, {})[size] = {op: r[op] / base[op] for op in OPS}
    return fastest, ratios


def print_table(runs: dict, ratios: dict) -> None:
    table = Table(title="one subtask's state: reload from a checkpoint, then epochs of touched keys")
    for col in ("engine", "keys", "reload s (load)", "1st epoch s", "median epoch s", "max epoch s",
                "median epoch CPU s", "MB on disk", "peak RSS MB", "median epoch / sqlite", "reload / sqlite"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    for size in sorted({s for by_size in runs.values() for s in by_size}, key=int):
        for engine in (e for e in ENGINES if size in runs.get(e, {})):
            r, ratio = runs[engine][size], ratios.get(engine, {}).get(size)
            cells = [r["error"][:100]] if "error" in r else [
                f"{r['reload_s']:.2f} ({r['reload_s'] - r['reload_read_sort_s']:.2f})",  # load: after the read and sort
                f"{r['first_epoch_after_reload_s']:.3f}", f"{r['median_epoch_s']:.3f}", f"{r['max_epoch_s']:.3f}",
                f"{r['median_epoch_cpu_s']:.3f}", f"{r['bytes_on_disk'] / 2**20:,.1f}", f"{r['peak_rss_mb']:,.0f}",
                *([f"{ratio['median_epoch_s']:.2f}", f"{ratio['reload_s']:.2f}"] if ratio else [])]
            table.add_row(engine, f"{int(size):,}", *cells)
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", default="1e5,1e6", help="state sizes, comma-separated (1e7 allowed)")
    ap.add_argument("--touched", type=float, default=1e4, help="keys per epoch: half held, half new")
    ap.add_argument("--epochs", type=int, default=10, help="measured epochs, after the first one after the reload")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one engine may take at one size")
    for hidden in ("--worker", "--data", "--store", "--result"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = options.parse(ap, "engine")
    if args.worker:  # a child: one engine at one size
        try:
            out = measure_engine(args.worker, Path(args.data), Path(args.store))
        except Exception as exc:
            traceback.print_exc()
            out = {"error": f"{type(exc).__name__}: {exc}"}
        Path(args.result).write_text(json.dumps(out))
        return
    sizes = [10_000, 100_000] if args.quick else [int(float(x)) for x in args.keys.split(",") if x]
    epochs, touched, engines = 3 if args.quick else args.epochs, int(args.touched), args.engines.split(",")
    assert set(engines) <= set(ENGINES), f"engines: {', '.join(ENGINES)}"
    results = json.loads(args.out.read_text()) if args.out.exists() else {"runs": {}}
    results.update(machine=machine(), notes=NOTES)
    wrong = []
    with tempfile.TemporaryDirectory(prefix="abs-engines-") as tmp:
        for size in sizes:
            (data := Path(tmp) / f"data-{size}").mkdir()
            console.print(f"[{size:,} keys] writing the checkpoint and {1 + epochs} epochs of {touched:,} keys")
            write_workload(data, size, touched, 1 + epochs, args.seed)
            for engine in engines:
                r = run_worker(engine, data, Path(tmp) / f"{engine}-{size}", args.timeout)
                if r.get("wrong_keys"):  # no figure for an engine that is wrong
                    r = {"error": f"WRONG: {r['wrong_keys']} of {r['checked_keys']} keys disagree with the reference"}
                    wrong.append(f"{engine} at {size:,} keys")
                r.update(keys=size, touched=touched, epochs=epochs, seed=args.seed)
                console.print(f"[{engine}, {size:,} keys] " + (r["error"] if "error" in r else
                              f"reload {r['reload_s']:.2f} s, median epoch {r['median_epoch_s']:.3f} s"))
                results["runs"].setdefault(engine, {})[str(size)] = r
                options.write(args.out, results)  # what is measured so far survives a crash
    results["fastest"], results["ratios_to_sqlite"] = summarize(results["runs"])
    options.write(args.out, results)
    print_table(results["runs"], results["ratios_to_sqlite"])
    console.print(f"written to {args.out}")
    if wrong:
        console.print("engines that disagree with the reference: " + ", ".join(wrong))
        sys.exit(1)


if __name__ == "__main__":
    main()
