"""Arrangements: an integral indexed by the key an operator probes it by.

Layout under ``state_location`` (this module owns ``arrangements/``)::

    arrangements/<node id>/<key hash>/<modulus>.<residue>/<tick>-<uuid>.arrow

An arrangement splits its rows into hash buckets: a bucket holds the rows whose key hash
``_h % modulus == residue``. It is created with ``B`` buckets (sized for the rows it starts
with, not tied to the core count), and a bucket whose merge finds it past
:data:`SPLIT_ROWS` splits by a multiple of its modulus (``_h % 2M`` refines ``_h % M``), so
an arrangement started empty that grows to millions of rows keeps buckets of about
:data:`BUCKET_ROWS` without ever rewriting the rest. Each bucket is a spine: a list of
immutable runs, oldest and largest first. A run is one Arrow IPC file of weighted rows
sorted by the key hash ``_h`` (see :mod:`.kernels`), so a probe memory-maps it and binary
searches, without copying or scanning: its cost follows the probed keys, not the state.
An arrangement keyed ``(ORDERED, column)`` (a temporal filter's) sorts each run by that
column's values instead and is read by ranges of them.
Runs are written once and never changed; the tick manifest (:mod:`.state`) names the
runs of every arrangement, so a crash before the manifest leaves unnamed files, which
:meth:`RunStore.collect_garbage` removes. Size-tiered merging keeps the number of runs
per bucket bounded and consolidates weights; a merge is planned (:meth:`RunStore.merges`),
done (:meth:`RunStore.merge`, a pure function of its runs: the state store runs it beside
the ticks) and folded into whatever the bucket holds by then (:meth:`RunStore.fold`).

Runs hold the engine's Arrow types (:func:`.zsets.arrow_schema`: an instant is a
timestamp in UTC), whatever time zone Spark hands a task's batches in (the session's):
runs built by Spark tasks and runs appended in the driver are read together.

Runs are read and written through ``pyarrow.fs``: a local or NFS path (``file:``), or an
object store pyarrow supports (``s3://``, ``gs://``); a Spark task on any executor finds
any bucket's runs there, and caches what it reads.
"""
from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from ..arrow import kernels
from .location import filesystem

ARRANGEMENT_DIR = "arrangements"
#: rows per bucket a new arrangement is sized for, and its most buckets: a probe reads
#: one run list per touched bucket, so few buckets keep a small tick's probes few, while
#: bounded buckets keep every merge and every bulk-build task bounded
BUCKET_ROWS = 1_000_000
MAX_BUCKETS = 64
#: rows of an arrangement probed as one run, however many runs it holds
SMALL_ROWS = 4096
#: runs a bucket may hold before its newest ones are merged
MAX_RUNS = 4
#: rows past which a bucket that is merged whole splits, into parts of BUCKET_ROWS or less
SPLIT_ROWS = 2 * BUCKET_ROWS


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


Part = tuple[int, int]  # a bucket's (modulus, residue)


@dataclass(frozen=True)
class Arrangement:
    """An integral's rows by ``key``: a spine of runs per bucket. ``additive``: the rows
    are partial sums per key (merged by summing), else a Z-set (merged by consolidating).
    ``buckets``: the count it was created with; ``parts``: each bucket's (modulus,
    residue), ``(buckets, i)`` until a bucket splits."""

    node: str
    key: tuple[str, ...]
    additive: bool
    buckets: int = 1
    runs: tuple[tuple[Run, ...], ...] = field(default=())
    parts: tuple[Part, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.parts:
            object.__setattr__(self, "parts", tuple((self.buckets, i) for i in range(self.buckets)))
        if not self.runs:
            object.__setattr__(self, "runs", tuple(() for _ in self.parts))

    @property
    def name(self) -> str:
        return key_name(self.key)

    @property
    def rows(self) -> int:
        return sum(r.rows for b in self.runs for r in b)

    def paths(self) -> set[str]:
        return {r.path for b in self.runs for r in b}

    @cached_property
    def _lookup(self) -> list[tuple[np.uint64, np.ndarray]]:
        """Per modulus, the bucket of each residue (-1: a bucket of another modulus)."""
        out = []
        for m in sorted({m for m, _ in self.parts}):
            table = np.full(m, -1, np.int64)
            for i, (mm, r) in enumerate(self.parts):
                if mm == m:
                    table[r] = i
            out.append((np.uint64(m), table))
        return out

    def bucket_of(self, hashes: np.ndarray) -> np.ndarray:
        """The bucket of each key hash (the buckets' parts cover every hash once)."""
        (m, table), *rest = self._lookup
        out = table[(hashes % m).astype(np.int64)]
        for m, table in rest:
            out = np.where(out < 0, table[(hashes % m).astype(np.int64)], out)
        return out

    def with_runs(self, new: dict[int, list[Run]]) -> Arrangement:
        """This arrangement with ``new`` runs appended to their buckets."""
        return replace(self, runs=tuple(tuple(b) + tuple(new.get(i, ())) for i, b in enumerate(self.runs)))

    def to_json(self) -> dict[str, Any]:
        doc = {"key": list(self.key), "additive": self.additive, "buckets": self.buckets,
               "runs": [[r.to_json() for r in b] for b in self.runs]}
        if self.parts != tuple((self.buckets, i) for i in range(self.buckets)):
            doc["parts"] = [list(p) for p in self.parts]
        return doc

    @staticmethod
    def from_json(node: str, doc: dict[str, Any]) -> Arrangement:
        return Arrangement(node, tuple(doc["key"]), bool(doc["additive"]), int(doc["buckets"]),
                           tuple(tuple(Run(p, int(n)) for p, n in b) for b in doc["runs"]),
                           tuple((int(m), int(r)) for m, r in doc.get("parts", ())))


@dataclass(frozen=True)
class Merge:
    """A merge of a bucket's newest runs ``inputs`` into ``outputs``: one run (or none, when
    the weights cancel), or, when the bucket splits, one per new part."""

    node: str
    key: tuple[str, ...]
    part: Part
    inputs: tuple[Run, ...]
    outputs: tuple[tuple[Part, Run | None], ...] = ()


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

    def write(self, arr: Arrangement, part: Part, tick: int, run: pa.Table) -> Run:
        rel = f"{ARRANGEMENT_DIR}/{arr.node}/{arr.name}/{part[0]}.{part[1]}/{tick:012d}-{uuid.uuid4().hex[:12]}.arrow"
        full = self._full(rel)
        for again in (False, True):
            self.fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
            try:
                with self.fs.open_output_stream(full) as out, pa.ipc.new_file(out, run.schema) as writer:
                    writer.write_table(run)
                break
            except FileNotFoundError:  # its new, empty directory was pruned (collect_garbage) in between
                if again:
                    raise
        return Run(rel, run.num_rows)

    def append(self, arr: Arrangement, tick: int, delta: pa.Table | None) -> Arrangement:
        """``arr`` with this tick's ``delta`` (rows of the integral's input) as new runs."""
        if delta is None or delta.num_rows == 0:
            return arr
        parts = kernels.sorted_parts(delta, arr.key, arr.bucket_of, len(arr.parts))
        return arr.with_runs({b: [self.write(arr, arr.parts[b], tick, part)] for b, part in parts.items()})

    def probe(self, arr: Arrangement, probe: pa.Table, keys: Sequence[str], null_safe: Sequence[bool],
              extra: pa.Table | None = None) -> tuple[Any, pa.Table | None]:
        """Rows of ``arr`` (and of ``extra``, a run not yet written) matching ``probe``'s
        ``keys``: (the probe row of each match, the matched rows). A bucket's runs are
        searched for the probe rows of that bucket only, so the cost follows the probe
        rows, not the number of buckets and runs."""
        hashes = kernels.key_hash(probe, keys)
        runs: list[pa.Table] = []
        subsets: list[np.ndarray | None] = []
        every = [r for bucket in arr.runs for r in bucket]
        if len(every) > 1 and arr.rows <= max(SMALL_ROWS, probe.num_rows // 4):
            # small beside the probe (a dimension's): one run of it, so each probe row is
            # looked up once (kernels.candidates), not once per run
            whole = pa.concat_tables([self.read(r) for r in every], promote_options="permissive")
            order = kernels.hash_order(whole.column(kernels.HASH).to_numpy())
            runs, subsets = [whole.take(pa.array(order))], [None]
        elif len(arr.runs) == 1:
            runs, subsets = [self.read(r) for r in arr.runs[0]], [None] * len(arr.runs[0])
        else:  # grouped by bucket (a radix sort of small ints)
            order, bounds = kernels.grouped(arr.bucket_of(hashes), len(arr.runs))
            for b, bucket in enumerate(arr.runs):
                if bounds[b] < bounds[b + 1]:
                    runs += [self.read(r) for r in bucket]
                    subsets += [order[bounds[b]:bounds[b + 1]]] * len(bucket)
        if extra is not None:
            runs.append(kernels.sort_run(extra, arr.key))
            subsets.append(None)
        return kernels.probe(runs, probe, keys, arr.key, null_safe, hashes, subsets)

    def ranges(self, arr: Arrangement, regions: Sequence[tuple[pa.Scalar, pa.Scalar]],
               extra: pa.Table | None = None) -> pa.Table | None:
        """Rows of an arrangement ordered by a column (key ``(ORDERED, column)``), and of
        ``extra``, whose column lies in one of the closed ``regions``; None when none do."""
        column = arr.key[1]
        parts = [kernels.in_ranges(self.read(r), column, regions) for b in arr.runs for r in b]
        if extra is not None:
            parts.append(kernels.in_ranges(extra, column, regions, ordered=False))
        return kernels.concat(p for p in parts if p.num_rows)

    def whole(self, arr: Arrangement, extra: pa.Table | None = None) -> pa.Table | None:
        """Every row of an arrangement, and of ``extra``, without ``_h``; None when none."""
        parts = [self.read(r) for b in arr.runs for r in b] + ([extra] if extra is not None else [])
        return kernels.concat(t.drop_columns([kernels.HASH]) if kernels.HASH in t.column_names else t
                              for t in parts if t.num_rows)

    def compact(self, arr: Arrangement, tick: int) -> tuple[Arrangement, list[Run]]:
        """Every merge :meth:`merges` plans, done and folded at once. Returns the
        arrangement and the runs it no longer names."""
        retired: list[Run] = []
        for planned in self.merges(arr):
            arr, gone = self.fold(arr, self.merge(arr, planned, tick), tick)
            retired.extend(gone)
        return arr, retired

    @staticmethod
    def merges(arr: Arrangement, busy: frozenset[Part] = frozenset()) -> list[Merge]:
        """The merges due in buckets holding more than :data:`MAX_RUNS` runs (but those in
        ``busy``), size-tiered: a run joins the merge while it is at most 4x what is merged
        so far, so every row is rewritten a logarithmic number of times overall."""
        out = []
        for part, bucket in zip(arr.parts, arr.runs):
            if len(bucket) <= MAX_RUNS or part in busy:
                continue
            start, total = len(bucket) - 2, bucket[-1].rows + bucket[-2].rows
            while start > 0 and bucket[start - 1].rows <= 4 * total:
                start -= 1
                total += bucket[start].rows
            out.append(Merge(arr.node, arr.key, part, bucket[start:]))
        return out

    def merge(self, arr: Arrangement, planned: Merge, tick: int) -> Merge:
        """``planned`` done: its runs consolidated (summed, for partial sums) into one run,
        or, when they are the whole bucket and more than :data:`SPLIT_ROWS`, into one run
        per part of a split into parts of :data:`BUCKET_ROWS` or less. Touches no state
        but new files: safe beside a tick."""
        tables = [self.read(r).drop_columns([kernels.HASH]) for r in planned.inputs]
        merged = pa.concat_tables(tables, promote_options="permissive")
        merged = kernels.sum_by(merged, arr.key) if arr.additive else kernels.consolidate(merged)
        run = kernels.sort_run(merged, arr.key)
        whole = arr.runs[arr.parts.index(planned.part)][0] == planned.inputs[0]
        factor = 1
        out: tuple[tuple[Part, Run | None], ...]
        while whole and run.num_rows > SPLIT_ROWS and run.num_rows > factor * BUCKET_ROWS:
            factor *= 2
        if factor == 1:
            out = ((planned.part, self.write(arr, planned.part, tick, run) if run.num_rows else None),)
        else:
            m, r = planned.part
            parts = [(m * factor, r + j * m) for j in range(factor)]
            pieces = kernels.split_by(run, _sub(run, m, factor), factor)
            out = tuple((p, self.write(arr, p, tick, pieces[j]) if j in pieces else None)
                        for j, p in enumerate(parts))
        return replace(planned, outputs=out)

    def fold(self, arr: Arrangement, done: Merge, tick: int) -> tuple[Arrangement, list[Run]]:
        """``arr`` with a finished merge in place of its inputs, which must still be the
        oldest of what the merge left in the bucket (runs appended since follow them; a
        split splits those too). Returns the arrangement and the runs it no longer names;
        a merge that no longer fits (its bucket went) is dropped, its files with it."""
        if done.part not in arr.parts:
            self.discard(done)
            return arr, []
        i = arr.parts.index(done.part)
        bucket = arr.runs[i]
        at = position(bucket, done.inputs)
        if at is None:
            self.discard(done)
            return arr, []
        before, after = bucket[:at], bucket[at + len(done.inputs):]
        outputs: list[tuple[Part, tuple[Run, ...]]] = [(p, (run,) if run else ()) for p, run in done.outputs]
        retired = list(done.inputs)
        if len(outputs) > 1:  # a split: the runs appended since are split the same way
            m, factor = done.part[0], len(outputs)
            for run in after:
                table = self.read(run)
                for j, piece in kernels.split_by(table, _sub(table, m, factor), factor).items():
                    outputs[j] = (outputs[j][0], outputs[j][1] + (self.write(arr, outputs[j][0], tick, piece),))
            retired.extend(after)
            after = ()
        parts = arr.parts[:i] + tuple(p for p, _ in outputs) + arr.parts[i + 1:]
        runs = arr.runs[:i] + tuple(before + new + after for _, new in outputs) + arr.runs[i + 1:]
        return replace(arr, parts=parts, runs=runs), retired

    def discard(self, done: Merge) -> None:
        """Remove what a merge that will not be folded wrote."""
        for _, run in done.outputs:
            if run is not None:
                self.remove(run.path)

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(self._full(path)).type != pafs.FileType.NotFound

    def close(self) -> None:
        """Unmap what was read (a table still held elsewhere keeps its own mapping)."""
        self._cache.clear()

    def remove(self, path: str) -> None:
        """Delete a run no manifest names any more."""
        self._cache.pop(path, None)
        try:
            self.fs.delete_file(self._full(path))
        except FileNotFoundError:
            pass

    def collect_garbage(self, live: set[str]) -> None:
        """Remove run files that ``live`` does not name (crashed ticks, merged runs, dropped
        nodes), then the directories left empty (a dropped node's, a split bucket's) on a
        local file system (on an object store a directory goes with its last object)."""
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
        if self._local:
            for directory, _, _ in os.walk(top, topdown=False):
                if directory != top:
                    try:
                        os.rmdir(directory)
                    except OSError:  # not empty
                        pass


def position(items: Sequence[Any], inputs: Sequence[Any]) -> int | None:
    """Where a merge's ``inputs`` stand, one after another, in a bucket's runs or a
    spine's batches (None: no longer there)."""
    n = len(inputs)
    return next((i for i in range(len(items) - n + 1) if tuple(items[i:i + n]) == tuple(inputs)), None)


def _sub(run: pa.Table, modulus: int, factor: int) -> np.ndarray:
    """Which of ``factor`` parts of a bucket of ``modulus`` each row of ``run`` falls in:
    ``_h % (modulus * factor) == residue + j * modulus`` for part j."""
    return ((run.column(kernels.HASH).to_numpy() % np.uint64(modulus * factor)) // np.uint64(modulus)).astype(np.int64)


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
