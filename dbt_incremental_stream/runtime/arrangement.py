"""Arrangements: an integral indexed by the key an operator probes it by.

Layout under ``state_location`` (this module owns ``arrangements/``)::

    arrangements/<node id>/<key hash>/<bucket>/<tick>-<uuid>.arrow

An arrangement splits its rows into a fixed number of hash buckets, chosen when it is
created (not tied to the core count), and keeps each bucket as a spine: a list of
immutable runs, oldest and largest first. A run is one Arrow IPC file of weighted rows
sorted by the key hash ``_h`` (see :mod:`.kernels`), so a probe memory-maps it and binary
searches, without copying or scanning: its cost follows the probed keys, not the state.
An arrangement keyed ``(ORDERED, column)`` (a temporal filter's) sorts each run by that
column's values instead and is read by ranges of them.
Runs are written once and never changed; the tick manifest (:mod:`.state`) names the
runs of every arrangement, so a crash before the manifest leaves unnamed files, which
:meth:`RunStore.collect_garbage` removes. Size-tiered merging keeps the number of runs
per bucket bounded and consolidates weights.

Runs hold the engine's Arrow types (:func:`.zsets.arrow_schema`: an instant is a
timestamp in UTC), whatever time zone Spark hands a task's batches in (the session's):
runs built by Spark tasks and runs appended in the driver are read together.

Runs are read and written through ``pyarrow.fs``: a local or NFS path (``file:``), or an
object store pyarrow supports (``s3://``, ``gs://``); a Spark task on any executor finds
any bucket's runs there, and caches what it reads.
"""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from . import kernels
from .location import filesystem

ARRANGEMENT_DIR = "arrangements"
#: rows per bucket a new arrangement is sized for, and its most buckets: a probe reads
#: one run list per touched bucket, so few buckets keep a small tick's probes few, while
#: bounded buckets keep every merge and every bulk-build task bounded
BUCKET_ROWS = 1_000_000
MAX_BUCKETS = 64
#: runs a bucket may hold before its newest ones are merged
MAX_RUNS = 4


def buckets_for(rows: int) -> int:
    """The bucket count of an arrangement created over ``rows`` rows."""
    return max(1, min(MAX_BUCKETS, -(-rows // BUCKET_ROWS)))
#: rows a bulk build sorts at once (bounds a builder task's memory)
BUILD_ROWS = 2_000_000


def key_name(key: Sequence[str]) -> str:
    """A directory name for an arrangement's key."""
    return hashlib.sha1(repr(tuple(key)).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Run:
    path: str  # relative to the state location
    rows: int

    def to_json(self) -> list[Any]:
        return [self.path, self.rows]


@dataclass(frozen=True)
class Arrangement:
    """An integral's rows by ``key``: a spine of runs per bucket. ``additive``: the rows
    are partial sums per key (merged by summing), else a Z-set (merged by consolidating)."""

    node: str
    key: tuple[str, ...]
    additive: bool
    buckets: int = 1
    runs: tuple[tuple[Run, ...], ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.runs:
            object.__setattr__(self, "runs", tuple(() for _ in range(self.buckets)))

    @property
    def name(self) -> str:
        return key_name(self.key)

    @property
    def rows(self) -> int:
        return sum(r.rows for b in self.runs for r in b)

    def paths(self) -> set[str]:
        return {r.path for b in self.runs for r in b}

    def with_runs(self, new: dict[int, list[Run]]) -> Arrangement:
        """This arrangement with ``new`` runs appended to their buckets."""
        return replace(self, runs=tuple(tuple(b) + tuple(new.get(i, ())) for i, b in enumerate(self.runs)))

    def to_json(self) -> dict[str, Any]:
        return {"key": list(self.key), "additive": self.additive, "buckets": self.buckets,
                "runs": [[r.to_json() for r in b] for b in self.runs]}

    @staticmethod
    def from_json(node: str, doc: dict[str, Any]) -> Arrangement:
        return Arrangement(node, tuple(doc["key"]), bool(doc["additive"]), int(doc["buckets"]),
                           tuple(tuple(Run(p, int(n)) for p, n in b) for b in doc["runs"]))


class RunStore:
    """Reads and writes the runs under one state location; keeps what it read mapped."""

    def __init__(self, root: str):
        self.root = root
        self.fs, self.base = filesystem(root)
        self._local = isinstance(self.fs, pafs.LocalFileSystem)
        self._cache: dict[str, pa.Table] = {}

    @staticmethod
    def open(root: str) -> RunStore | None:
        """The run store of a location, or None when pyarrow has no file system for it."""
        try:
            return RunStore(root)
        except (OSError, ValueError, ImportError):
            return None

    def _full(self, path: str) -> str:
        return f"{self.base}/{path}"

    def read(self, run: Run) -> pa.Table:
        table = self._cache.get(run.path)
        if table is None:
            full = self._full(run.path)
            source = pa.memory_map(full) if self._local else self.fs.open_input_file(full)
            table = self._cache[run.path] = pa.ipc.open_file(source).read_all()
        return table

    def write(self, arr: Arrangement, bucket: int, tick: int, run: pa.Table) -> Run:
        rel = f"{ARRANGEMENT_DIR}/{arr.node}/{arr.name}/{bucket:04d}/{tick:012d}-{uuid.uuid4().hex[:12]}.arrow"
        full = self._full(rel)
        self.fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(full) as out, pa.ipc.new_file(out, run.schema) as writer:
            writer.write_table(run)
        return Run(rel, run.num_rows)

    def append(self, arr: Arrangement, tick: int, delta: pa.Table | None) -> Arrangement:
        """``arr`` with this tick's ``delta`` (rows of the integral's input) as new runs."""
        if delta is None or delta.num_rows == 0:
            return arr
        parts = kernels.split_buckets(kernels.sort_run(delta, arr.key), arr.buckets)
        return arr.with_runs({b: [self.write(arr, b, tick, part)] for b, part in parts.items()})

    def probe(self, arr: Arrangement, probe: pa.Table, keys: Sequence[str], null_safe: Sequence[bool],
              extra: pa.Table | None = None) -> tuple[Any, pa.Table | None]:
        """Rows of ``arr`` (and of ``extra``, a run not yet written) matching ``probe``'s
        ``keys``: (the probe row of each match, the matched rows)."""
        hashes = kernels.key_hash(probe, keys)
        touched = set(int(b) for b in set((hashes % arr.buckets).tolist()))
        runs = [self.read(r) for b in sorted(touched) for r in arr.runs[b]]
        if extra is not None:
            runs.append(kernels.sort_run(extra, arr.key))
        return kernels.probe(runs, probe, keys, arr.key, null_safe, hashes)

    def ranges(self, arr: Arrangement, regions: Sequence[tuple[pa.Scalar, pa.Scalar]],
               extra: pa.Table | None = None) -> pa.Table | None:
        """Rows of an arrangement ordered by a column (key ``(ORDERED, column)``), and of
        ``extra``, whose column lies in one of the closed ``regions``; None when none do."""
        column = arr.key[1]
        parts = [kernels.in_ranges(self.read(r), column, regions) for b in arr.runs for r in b]
        if extra is not None:
            parts.append(kernels.in_ranges(extra, column, regions, ordered=False))
        return kernels.concat(p for p in parts if p.num_rows)

    def compact(self, arr: Arrangement, tick: int) -> tuple[Arrangement, list[Run]]:
        """Merge the newest runs of buckets holding more than :data:`MAX_RUNS` (size-tiered:
        a run joins the merge while it is at most 4x what is merged so far). Returns the
        arrangement and the runs it no longer names."""
        runs = [list(b) for b in arr.runs]
        retired: list[Run] = []
        for i, bucket in enumerate(runs):
            if len(bucket) <= MAX_RUNS:
                continue
            start, total = len(bucket) - 2, bucket[-1].rows + bucket[-2].rows
            while start > 0 and bucket[start - 1].rows <= 4 * total:
                start -= 1
                total += bucket[start].rows
            tables = [self.read(r).drop_columns([kernels.HASH]) for r in bucket[start:]]
            merged = pa.concat_tables(tables, promote_options="permissive")
            merged = kernels.sum_by(merged, arr.key) if arr.additive else kernels.consolidate(merged)
            retired.extend(bucket[start:])
            bucket[start:] = [self.write(arr, i, tick, kernels.sort_run(merged, arr.key))] if merged.num_rows else []
        return replace(arr, runs=tuple(tuple(b) for b in runs)), retired

    def remove(self, path: str) -> None:
        """Delete a run no manifest names any more."""
        self._cache.pop(path, None)
        try:
            self.fs.delete_file(self._full(path))
        except FileNotFoundError:
            pass

    def collect_garbage(self, live: set[str]) -> None:
        """Remove run files that ``live`` does not name (crashed ticks, merged runs)."""
        top = self._full(ARRANGEMENT_DIR)
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(top, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return
        for info in infos:
            if info.type == pafs.FileType.File:
                rel = info.path[len(self.base) + 1:]
                if rel not in live:
                    self.fs.delete_file(info.path)
                    self._cache.pop(rel, None)


def build(root: str, arr: Arrangement, tick: int, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
          ) -> Iterator[pa.RecordBatch]:
    """A Spark task's part of a bulk build: its rows sorted into runs, at most
    :data:`BUILD_ROWS` at a time, one run per bucket each time; yields (bucket, path,
    rows) of every run written (``mapInArrow`` over the integral's rows). ``schema``: the
    rows' Arrow types as the engine holds them (Spark's batches carry timestamps in the
    session's time zone)."""
    store = RunStore(root)
    pending: list[pa.RecordBatch] = []
    size = 0

    def flush() -> pa.RecordBatch:
        table = pa.Table.from_batches(pending).cast(schema)
        done = store.append(replace(arr, runs=()), tick, table)
        rows = [(b, r.path, r.rows) for b, runs in enumerate(done.runs) for r in runs]
        return pa.RecordBatch.from_pylist([{"bucket": b, "path": p, "rows": n} for b, p, n in rows],
                                          schema=BUILT)

    for batch in batches:
        pending.append(batch)
        size += batch.num_rows
        if size >= BUILD_ROWS:
            yield flush()
            pending, size = [], 0
    if size:
        yield flush()


BUILT = pa.schema([("bucket", pa.int32()), ("path", pa.string()), ("rows", pa.int64())])
BUILT_DDL = "bucket INT, path STRING, rows BIGINT"
