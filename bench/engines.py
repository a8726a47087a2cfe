"""The state engines ``bench/engine_bench.py`` compares, each one subtask's keyed aggregate store.

Each engine has ``reload(rows sorted by key)``, ``apply(contributions, version, prev)``, ``rows_of(keys)`` and
``close()``; every one folds with the framework's own fold (``spark_jobs.state.stores.fold``), so they differ only in
how they store: SQLite (today's ``spark_jobs.state.stores.store.SubtaskStore``), RocksDB (rocksdict), LMDB, DuckDB,
and sorted Arrow runs (LSM-like). Each keeps the undo of the last ``KEEP`` versions, as the framework's does.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import duckdb
import lmdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import rocksdict

from spark_jobs.state.stores.fold import fold
from spark_jobs.state.stores.store import KEEP, Layout, SubtaskStore

SCHEMA = pa.schema([("k", pa.string()), ("count", pa.int64()), ("total", pa.int64()), ("updated", pa.int64())])
#: as ``spark_jobs.state.stores.provider.layout_of`` builds it for ``count`` and ``sum(total)`` by ``k`` (``updated``: the epoch)
LAYOUT = Layout(SCHEMA, ("k",), (("count", "sum"), ("total", "sum")))
VALUES = SCHEMA.names[1:]
CHECKPOINT = 1  # the checkpoint's version; epoch i (0: the first after the reload) is version CHECKPOINT + 1 + i
UNTOUCHED, MAX_RUNS = 1_000, 8


# -- what the engines share ------------------------------------------------------------------------------------
def folded_epoch(stored: pa.Table, contributions: pa.Table, prev: int) -> tuple[pa.Table, pa.Table]:
    """The touched keys' new rows (sorted by key), and the undo: their rows before, ``present`` false if none."""
    folded = fold(SCHEMA, LAYOUT.keys, dict(LAYOUT.merges), {}, stored, contributions)
    undo, present, _ = folded.before(LAYOUT.keys, prev)
    return folded.final, undo.append_column("present", pa.array(present))


def raw_keys(keys: pa.Array | pa.ChunkedArray) -> list[bytes]:
    return pc.cast(keys, pa.binary()).to_pylist()


def packed(rows: pa.Table) -> list[bytes]:
    """Each row's values as three little-endian int64 (24 bytes); a NULL (an undo row's absence) as 0."""
    flat = np.column_stack([rows.column(c).fill_null(0).to_numpy() for c in VALUES]).astype("<i8").tobytes()
    return [flat[i:i + 24] for i in range(0, len(flat), 24)]


def unpacked(keys: pa.Array | pa.ChunkedArray, values: list[bytes | None]) -> pa.Table:
    """The rows of the keys whose value is not None."""
    numbers = np.frombuffer(b"".join(v for v in values if v is not None), "<i8").reshape(-1, 3)
    return pa.table([keys.filter(pa.array([v is not None for v in values], pa.bool_())), *numbers.T.copy()],
                    schema=SCHEMA)


def undo_entries(undo: pa.Table, version: int) -> zip:
    """(version + key, presence byte + pre-image) per undo row: a version's rows share a prefix."""
    tag = struct.pack(">q", version)
    return zip([tag + k for k in raw_keys(undo.column("k"))],
               [b"\x01" + v if p else b"\x00" for v, p in zip(packed(undo), undo.column("present").to_pylist())])


def fixed_width(strings: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Strings as numpy bytes ('S<longest>', NUL-padded): they sort and compare as the strings' bytes do."""
    a = pc.cast(strings, pa.binary())
    a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
    lens = pc.binary_length(a).to_numpy().astype(np.int64)
    starts = np.frombuffer(a.buffers()[1], np.int32, len(a), a.offset * 4).astype(np.int64)
    data = np.frombuffer(a.buffers()[2] or b"\0", np.uint8)
    out = np.zeros((len(a), max(1, lens.max(initial=1))), np.uint8)
    for j in range(out.shape[1]):  # a pass per byte position, not one per key
        out[lens > j, j] = data[starts[lens > j] + j]
    return out.view(f"S{out.shape[1]}").ravel()


def write_ipc(path: Path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as writer:
        writer.write_table(table.combine_chunks())


# -- the engines: reload(rows sorted by key), apply(contributions, version, prev), rows_of(keys), close() ---------
class Sqlite(SubtaskStore):
    """Today's store, used as the framework uses it (``apply`` and ``close`` are its own)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, LAYOUT)

    def reload(self, rows: pa.Table) -> None:
        self.load(rows.to_batches(), CHECKPOINT)
        self.open()

    def rows_of(self, keys: pa.Array) -> pa.Table:
        return self._stored(pa.table({"k": keys}))  # what its ``apply`` reads


class RocksDict:
    """Keys' bytes to packed values; undo rows in column family "undo" under a version prefix; the version in "meta"."""

    def __init__(self, directory: Path) -> None:
        self.dir, self.opts, table = directory, rocksdict.Options(raw_mode=True), rocksdict.BlockBasedOptions()
        self.opts.create_if_missing(True)
        table.set_bloom_filter(10, False)
        self.opts.set_block_based_table_factory(table)

    def reload(self, rows: pa.Table) -> None:
        sst, writer, ingest = self.dir / "load.sst", rocksdict.SstFileWriter(options=self.opts), \
            rocksdict.IngestExternalFileOptions()
        writer.open(str(sst))
        for k, v in zip(raw_keys(rows.column("k")), packed(rows)):  # sorted, as an SST file is written
            writer[k] = v
        writer.finish()
        self.db = rocksdict.Rdict(str(self.dir / "db"), self.opts)
        ingest.set_move_files(True)
        self.db.ingest_external_file([str(sst)], ingest)
        sst.unlink(missing_ok=True)
        self.db.create_column_family("undo", self.opts)
        self.db.create_column_family("meta", self.opts)[b"version"] = struct.pack("<q", CHECKPOINT)

    def apply(self, contributions: pa.Table, version: int, prev: int) -> None:
        undo_cf, meta_cf = (self.db.get_column_family_handle(n) for n in ("undo", "meta"))
        assert self.db.get_column_family("meta")[b"version"] == struct.pack("<q", prev), "not at the previous version"
        final, undo = folded_epoch(self.rows_of(contributions.column("k")), contributions, prev)
        batch = rocksdict.WriteBatch(raw_mode=True)
        for k, v in zip(raw_keys(final.column("k")), packed(final)):
            batch.put(k, v)
        for k, v in undo_entries(undo, version):
            batch.put(k, v, undo_cf)
        if (floor := version - KEEP + 1) > 0:  # the undo of versions up to the floor, as SubtaskStore drops it
            batch.delete_range(struct.pack(">q", 0), struct.pack(">q", floor + 1), undo_cf)
        batch.put(b"version", struct.pack("<q", version), meta_cf)
        self.db.write(batch)

    def rows_of(self, keys: pa.Array) -> pa.Table:
        return unpacked(keys, self.db.get(raw_keys(keys)))

    def close(self) -> None:
        self.db.close()


class Lmdb:
    """One env: the state in db "state", a version's undo in db "undo-<version>" (dropped whole)."""

    def __init__(self, directory: Path) -> None:
        self.env = lmdb.open(str(directory), map_size=1 << 37, max_dbs=KEEP + 8, sync=False)
        self.state, self.meta = self.env.open_db(b"state"), self.env.open_db(b"meta")

    def reload(self, rows: pa.Table) -> None:
        with self.env.begin(write=True) as txn:
            txn.cursor(self.state).putmulti(zip(raw_keys(rows.column("k")), packed(rows)), append=True)
            txn.put(b"version", struct.pack("<q", CHECKPOINT), db=self.meta)

    def apply(self, contributions: pa.Table, version: int, prev: int) -> None:
        with self.env.begin(write=True) as txn:
            assert txn.get(b"version", db=self.meta) == struct.pack("<q", prev), "not at the previous version"
            keys = contributions.column("k").combine_chunks()
            keys = keys.take(pc.sort_indices(keys))  # in key order: the B-tree's pages in turn
            stored = unpacked(keys, [txn.get(k, db=self.state) for k in raw_keys(keys)])
            final, undo = folded_epoch(stored, contributions, prev)
            txn.cursor(self.state).putmulti(zip(raw_keys(final.column("k")), packed(final)))
            txn.cursor(self.env.open_db(b"undo-%d" % version, txn=txn)).putmulti(undo_entries(undo, version))
            if (floor := version - KEEP + 1) > CHECKPOINT:
                txn.drop(self.env.open_db(b"undo-%d" % floor, txn=txn, create=False), delete=True)
            txn.put(b"version", struct.pack("<q", version), db=self.meta)

    def rows_of(self, keys: pa.Array) -> pa.Table:
        with self.env.begin() as txn:
            return unpacked(keys, [txn.get(k, db=self.state) for k in raw_keys(keys)])

    def close(self) -> None:
        self.env.close()


class DuckDb:
    """A table with a primary key, upserted from Arrow tables (DuckDB scans a local variable's); undo: a table."""

    def __init__(self, directory: Path) -> None:
        self.con = duckdb.connect(str(directory / "state.duckdb"), config={"threads": 1})

    def reload(self, rows: pa.Table) -> None:
        self.con.execute('CREATE TABLE state (k VARCHAR PRIMARY KEY, "count" BIGINT, total BIGINT, updated BIGINT);'
                         'CREATE TABLE undo (version BIGINT, k VARCHAR, "count" BIGINT, total BIGINT, updated BIGINT,'
                         ' present BOOLEAN); CREATE TABLE meta (version BIGINT); INSERT INTO state SELECT * FROM rows')
        self.con.execute(f"INSERT INTO meta VALUES ({CHECKPOINT}); CHECKPOINT")

    def apply(self, contributions: pa.Table, version: int, prev: int) -> None:
        con = self.con
        con.execute("BEGIN")
        try:
            assert con.execute("SELECT version FROM meta").fetchall() == [(prev,)], "not at the previous version"
            new_rows, pre_images = folded_epoch(self.rows_of(contributions.column("k")), contributions, prev)
            con.execute('INSERT INTO state SELECT * FROM new_rows ON CONFLICT (k) DO UPDATE SET "count" = '
                        'excluded."count", total = excluded.total, updated = excluded.updated')
            con.execute("INSERT INTO undo SELECT ?, * FROM pre_images", [version])
            con.execute("DELETE FROM undo WHERE version <= ?", [version - KEEP + 1])
            con.execute("UPDATE meta SET version = ?", [version])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def rows_of(self, keys: pa.Array | pa.ChunkedArray) -> pa.Table:
        wanted = pa.table({"k": keys})  # noqa: F841 (DuckDB scans it by its name)
        return self.con.sql("SELECT * FROM state WHERE k IN (SELECT k FROM wanted)").to_arrow_table().cast(SCHEMA)

    def close(self) -> None:
        self.con.close()


class ArrowRuns:
    """Sorted runs, uncompressed Arrow IPC files, memory-mapped, the newest last: a key's row is in the newest run
    holding it, found by ``np.searchsorted``. An epoch writes its rows as a run and its undo as a file, then
    MANIFEST (the commit); past ``MAX_RUNS`` runs, the newest are merged (size-tiered)."""

    def __init__(self, directory: Path) -> None:
        self.dir, self.runs, self.undo, self.seq, self.version = directory, [], [], 0, None

    def reload(self, rows: pa.Table) -> None:
        self.runs = [self.write_run(fixed_width(rows.column("k")), rows)]
        self.commit(CHECKPOINT)

    def write_run(self, keys: np.ndarray, rows: pa.Table) -> tuple[str, np.ndarray, pa.Table]:
        """A run of these sorted keys (numpy bytes) and the rows' values, opened: (file, keys, rows) mapped."""
        self.seq, keys = self.seq + 1, np.ascontiguousarray(keys)
        name, k = f"run-{self.seq:06d}.arrow", pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(keys.itemsize), len(keys), [None, pa.py_buffer(keys)])
        write_ipc(self.dir / name, pa.table([k, *(rows.column(c) for c in VALUES)], names=SCHEMA.names))
        table = pa.ipc.open_file(pa.memory_map(str(self.dir / name))).read_all()
        k = table.column("k").chunk(0)  # one batch: its buffer is the mapped file's
        return name, np.frombuffer(k.buffers()[1], keys.dtype, len(k), k.offset * keys.itemsize), table

    def rows_of(self, keys: pa.Array | pa.ChunkedArray) -> pa.Table:
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        want, lens = fixed_width(keys), pc.binary_length(keys).to_numpy()
        found, parts = np.zeros(len(want), bool), []
        for _, run_keys, table in reversed(self.runs):
            todo = np.flatnonzero(~found & (lens <= run_keys.itemsize))  # a longer key is in no run this narrow
            sought = want[todo].astype(run_keys.dtype)
            at = np.searchsorted(run_keys, sought)
            hit = at < len(run_keys)
            hit[hit] = run_keys[at[hit]] == sought[hit]
            found[todo[hit]] = True
            parts.append(pa.table([keys.take(todo[hit]), *(table.column(c).take(at[hit]) for c in VALUES)],
                                  schema=SCHEMA))
        return pa.concat_tables(parts)

    def apply(self, contributions: pa.Table, version: int, prev: int) -> None:
        assert self.version == prev, "not at the previous version"
        final, undo = folded_epoch(self.rows_of(contributions.column("k")), contributions, prev)
        self.runs.append(self.write_run(fixed_width(final.column("k")), final))  # fold sorts by the keys' bytes
        write_ipc(self.dir / f"undo-{version}.arrow", undo)
        self.undo = [v for v in (*self.undo, version) if v > version - KEEP + 1]
        if len(self.runs) > MAX_RUNS:
            self.merge()
        self.commit(version)

    def merge(self) -> None:
        """The newest runs into one: back to the first older run bigger than twice the rows taken so far."""
        take, rows = 1, len(self.runs[-1][1])
        while take < len(self.runs) and len(self.runs[-take - 1][1]) <= 2 * rows:
            take, rows = take + 1, rows + len(self.runs[-take - 1][1])
        newest_first = self.runs[:-take - 1:-1]
        keys = np.concatenate([r[1] for r in newest_first])
        order = np.argsort(keys, kind="stable")  # a key's newest row first
        first = np.ones(len(keys), bool)
        first[1:] = keys[order[1:]] != keys[order[:-1]]
        values = pa.concat_tables([r[2].select(VALUES) for r in newest_first]).take(order[first])
        self.runs[-take:] = [self.write_run(keys[order[first]], values)]

    def commit(self, version: int) -> None:
        """MANIFEST names the version, runs and undo files (written, then renamed); other files are deleted."""
        manifest = {"version": version, "runs": [r[0] for r in self.runs], "undo": self.undo}
        (self.dir / "MANIFEST.tmp").write_text(json.dumps(manifest))
        os.replace(self.dir / "MANIFEST.tmp", self.dir / "MANIFEST")
        self.version, keep = version, {"MANIFEST", *manifest["runs"], *(f"undo-{v}.arrow" for v in self.undo)}
        for f in self.dir.iterdir():
            if f.name not in keep:
                f.unlink()

    def close(self) -> None:
        self.runs = []


CLASSES = {"sqlite": Sqlite, "rocksdict": RocksDict, "lmdb": Lmdb, "duckdb": DuckDb, "arrow_runs": ArrowRuns}
