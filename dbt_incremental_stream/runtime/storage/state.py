"""Persisted integrals: a spine of Parquet batches per state node, and the manifest that
commits a tick atomically.

Layout under ``state_location`` (any Hadoop file system URI: file:, hdfs:, s3a:, ...)::

    _manifest/tick-000000000042.json        the committed tick: every state node's batches,
                                            the runs of its arrangements, and the pipeline's
                                            meta (sources' schemas, views, the node schemas
                                            and expression types its plan compiled against)
    _manifest/intent-000000000043.json      what the tick after it reads (Kafka offset
                                            ranges), written before it writes any output, so
                                            that a tick redone after a crash reads the same
                                            records (the project's; :meth:`Store.intend`)
    state/<tick>-<uuid>/_node=<node id>/    one Parquet batch (a delta, or a compacted run)
    arrangements/...                        indexed copies of probed integrals (.arrangement)
    _serve.json                             where a running ``dbt-stream serve`` answers, in
                                            a local location only (:func:`announce`)

A large tick writes all its batches by one Spark job (one struct column per node,
partitioned by node), because per-job overhead, not data, dominates; a small tick on
arrangements writes each batch as one Parquet file from the driver (pyarrow), in the same
layout, because a Spark job costs more than the writing; a tick in Spark tasks
(:mod:`.tasks`) writes a file per task the same way (:func:`write_batch_file`). A node whose delta is empty gets
no batch. A tick writes its batches and runs first and its manifest last (written aside,
then renamed), so a crash leaves the previous manifest in force; files no manifest names
are removed on open. Batches a compaction replaced stay for :data:`RETIRED_GRACE_SECONDS`
(and at least a tick), since a catalog query planned before the commit may still read them;
runs a merge replaced go (and are unmapped) with the commit, since only ticks and merges read
runs. Both are deleted beside the ticks, in the spines' merge thread; a close leaves what it
had not deleted yet to the next open.

Merges run beside the ticks: a commit starts the merges the committed state is due (a
spine's newest batches past its size-tiered bound, an arrangement bucket's runs), the
arrangements' in one thread and the spines' in another (a spine's merge may be a Spark job
of seconds, and a bucket whose runs pile up behind it stalls the commits), and a later
commit folds in those that finished, in place of their inputs (which
only a merge removes, so they are still there, newer batches after them). A merge writes
only new files, named by no manifest until a commit folds it in: a crash during one, or
a merge whose inputs went (a node dropped or rebuilt), leaves files the next open removes.
Spark reads every batch through the same file system, so executors on a cluster and any
client of the catalog see the same state as the driver.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Callable, cast

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructField, StructType

from ...errors import StateError
from ...process import threads
from .arrangement import MAX_RUNS, Arrangement, Merge, Part, Run, RunStore, position
from .location import local_directory
from ..spark.zsets import arrow_schema, pack

LOG = logging.getLogger(__name__)
MANIFEST_DIR = "_manifest"
SERVE_FILE = "_serve.json"
STATE_DIR = "state"
#: nodes written per Spark job: analysing the packed plan grows faster than linearly with
#: the number of frames (each union pads the others' columns), so beyond a few dozen
#: nodes several jobs cost less than one
PACK = 24
KEEP_MANIFESTS = 3
#: batches at least this large are kept in Spark's cache; smaller ones are cheaper to
#: re-read than to match against every cached plan while a tick's query is planned
CACHE_BYTES = 4 << 20
#: a compaction this small is merged in the driver (pyarrow) rather than by a Spark job
ARROW_MERGE_BYTES = 32 << 20
#: batches a compaction replaced stay this long (and at least one tick) for queries that
#: planned against the catalog before the commit and still read them
RETIRED_GRACE_SECONDS = 60.0
#: a spine or bucket this many times past its bound waits for the merge running aside
STALL = 3


def _yielding() -> None:
    """Lower a merge thread's priority (Linux: a thread's own nice value), so that where
    it and a tick want the same core, the tick gets it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


def _failed(future: Future[Any], what: str) -> bool:
    """Whether a merge beside the ticks failed: it is logged and dropped (its inputs stay
    as they are, and a later commit starts it again)."""
    error = future.exception()
    if error is not None:
        LOG.warning("%s failed, to be retried: %s", what, error)
    return error is not None


def batch_dir(tick: int) -> str:
    """A new batch directory of ``tick``, relative to the location (unique per write)."""
    return f"{STATE_DIR}/{tick:012d}-{uuid.uuid4().hex[:8]}"


def batch_column(node: str) -> str:
    """The struct column a node's rows are stored in, in its batch's Parquet files."""
    return f"n_{node}"


def write_batch_file(runs: RunStore, rel: str, name: str, column: str, table: pa.Table) -> int:
    """``table`` as the Parquet file ``name`` of the batch directory ``rel`` (one struct
    column ``column``), through pyarrow: from the driver or a Spark task. Its size in bytes."""
    packed = pa.table({column: pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns],
                                                          fields=list(table.schema))})
    full = f"{runs.base}/{rel}"
    runs.fs.create_dir(full, recursive=True)
    # LZ4 without dictionaries: as small as Parquet's default (Snappy, dictionaries) for a
    # tick's delta and 30% faster to write, which a large tick waits for
    pq.write_table(packed, f"{full}/{name}", filesystem=runs.fs, use_dictionary=False, compression="lz4")
    return int(runs.fs.get_file_info(f"{full}/{name}").size)


def announce(location: str, url: str | None) -> None:
    """Say where a running ``dbt-stream serve`` answers (None: that it stopped), in a local
    state location: ``dbt run`` finds it there (elsewhere it needs the server's URL)."""
    directory = local_directory(location)
    if directory is None:
        return
    path = os.path.join(directory, SERVE_FILE)
    if url is None:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path + ".tmp", "w") as f:
        json.dump({"url": url, "pid": os.getpid()}, f)
    os.replace(path + ".tmp", path)


def announced(location: str) -> str | None:
    """The URL a server announced at ``location`` (it may have crashed since), if any."""
    directory = local_directory(location)
    if directory is None:
        return None
    try:
        with open(os.path.join(directory, SERVE_FILE)) as f:
            return str(json.load(f)["url"])
    except (OSError, ValueError, KeyError):
        return None


@dataclass
class Batch:
    path: str
    bytes: int
    column: str  # the struct column holding this node's rows
    schema: str  # its StructType as JSON: reading with a known schema skips footer inference
    frame: DataFrame | None = None  # cached reader of a large batch, opened lazily

    def open(self, spark: SparkSession) -> DataFrame:
        return Batch.open_many(spark, [self])

    @staticmethod
    def open_many(spark: SparkSession, batches: list[Batch]) -> DataFrame:
        """Batches of one node (same column and schema) as one scan."""
        column, struct = batches[0].column, StructType.fromJson(json.loads(batches[0].schema))
        return (spark.read.schema(StructType([StructField(column, struct)]))
                .parquet(*(b.path for b in batches)).select(f"{column}.*"))

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.bytes, "column": self.column, "schema": self.schema}

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Batch:
        return Batch(doc["path"], int(doc["bytes"]), doc["column"], doc["schema"])


@dataclass
class Spine:
    """An integral as a list of batches, oldest (largest) first: LSM style."""

    batches: list[Batch] = field(default_factory=list)

    def frame(self, spark: SparkSession) -> DataFrame | None:
        """The integral as one (unconsolidated) DataFrame; None when empty.

        Large batches are cached one by one; the small ones are read by one scan of
        several paths, which Spark packs into few tasks (a union of scans would cost
        tasks per batch in every stage that reads the state).
        """
        frames = []
        small = [b for b in self.batches if b.bytes < CACHE_BYTES]
        for b in self.batches:
            if b.bytes >= CACHE_BYTES:
                if b.frame is None:
                    b.frame = b.open(spark).cache()
                frames.append(b.frame)
        if small:
            frames.append(Batch.open_many(spark, small))
        if not frames:
            return None
        return reduce(lambda x, y: x.unionByName(y), frames)

    def compaction(self, max_batches: int) -> int | None:
        """Index from which the newest batches should be merged, or None.

        Merges once there are more than ``max_batches``, taking the newest run whose
        older neighbour is at most 4x the run's size, so every row is rewritten a
        logarithmic number of times overall.
        """
        if len(self.batches) <= max_batches:
            return None
        start = len(self.batches) - 2
        total = self.batches[-1].bytes + self.batches[-2].bytes
        while start > 0 and self.batches[start - 1].bytes <= 4 * total:
            start -= 1
            total += self.batches[start].bytes
        return start

    def release(self) -> None:
        for b in self.batches:
            if b.frame is not None:
                b.frame.unpersist()
                b.frame = None


class FileSystem:
    """The few file system calls the store needs: through Spark's JVM (any Hadoop file
    system), or directly when the location is local (a JVM round trip per call costs
    more than the call)."""

    def __init__(self, spark: SparkSession, root: str):
        jvm = spark._jvm
        assert jvm is not None  # a classic SparkSession always has one
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._IOUtils = jvm.org.apache.commons.io.IOUtils
        root_path = self._Path(root)
        self._fs = root_path.getFileSystem(spark._jsc.hadoopConfiguration())
        self.root = str(self._fs.makeQualified(root_path).toString()).rstrip("/")
        self._local = self.root.startswith("file:")

    def path(self, *parts: str) -> str:
        return "/".join((self.root,) + parts)

    @staticmethod
    def _os(path: str) -> str:
        return cast(str, local_directory(path))

    def list(self, path: str) -> list[str]:
        if self._local:
            return os.listdir(self._os(path)) if os.path.isdir(self._os(path)) else []
        if not self.exists(path):
            return []
        return [str(s.getPath().getName()) for s in self._fs.listStatus(self._Path(path))]

    def exists(self, path: str) -> bool:
        if self._local:
            return os.path.exists(self._os(path))
        return bool(self._fs.exists(self._Path(path)))

    def size(self, path: str) -> int:
        return int(self._fs.getContentSummary(self._Path(path)).getLength())

    def read_text(self, path: str) -> str:
        if self._local:
            with open(self._os(path), encoding="utf-8") as f:
                return f.read()
        stream = self._fs.open(self._Path(path))
        try:
            return str(self._IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_atomic(self, path: str, text: str) -> None:
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        if self._local:
            os.makedirs(os.path.dirname(self._os(path)), exist_ok=True)
            with open(self._os(tmp), "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(self._os(tmp), self._os(path))
            return
        out = self._fs.create(self._Path(tmp), True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        if not self._fs.rename(self._Path(tmp), self._Path(path)):
            self._fs.delete(self._Path(tmp), False)
            raise StateError(f"could not commit {path}")

    def delete(self, path: str) -> None:
        if self._local:
            local = self._os(path)
            if os.path.isdir(local):
                shutil.rmtree(local, ignore_errors=True)
            elif os.path.exists(local):
                os.remove(local)
            return
        self._fs.delete(self._Path(path), True)

    def delete_batch(self, path: str) -> None:
        """Delete a batch (``state/<tick>-<id>/_node=<node>``), and its tick's directory
        once no other node's batch is in it: a long run otherwise leaves a directory a tick
        per node (40,000 in ``state/`` after 3,000 ticks of three views)."""
        self.delete(path)
        parent = path.rsplit("/", 1)[0]
        if self._local:
            try:
                os.rmdir(self._os(parent))
            except OSError:  # another node's batch is still in it (or it is gone)
                pass
        elif not self.list(parent):  # (a listing is empty for a directory that is gone too)
            self._fs.delete(self._Path(parent), False)


class StateStore:
    """Spines of every state node plus the committed tick, read from and written to
    ``location``."""

    def __init__(self, spark: SparkSession, location: str, *, max_batches: int = 8):
        self.spark = spark
        self.fs = FileSystem(spark, location)
        self.max_batches = max_batches
        self.tick = 0
        self.spines: dict[str, Spine] = {}
        #: each node's arrangements by key
        self.arrangements: dict[str, dict[tuple[str, ...], Arrangement]] = {}
        #: arrangement runs, where pyarrow reaches the location (None: it does not, e.g. hdfs:)
        self.runs: RunStore | None = RunStore.open(self.fs.root)
        self.meta: dict[str, Any] = {}
        #: compacted-away batches, with the tick and time they were retired, kept for readers
        self._retired: dict[str, tuple[int, float]] = {}
        #: merges running beside the ticks (pyarrow works outside the GIL): of arrangements'
        #: runs by (node, key, bucket part) in one thread, of spines by node (with inputs)
        #: in another
        self._aside = threads(1, "merge", initializer=_yielding)
        self._run_lane = threads(1, "merge-runs", initializer=_yielding)
        self._merge_group = f"merge-{uuid.uuid4().hex[:8]}"
        self._run_merges: dict[tuple[str, tuple[str, ...], Part], Future[Merge]] = {}
        self._spine_merges: dict[str, tuple[tuple[Batch, ...], Future[Batch | None]]] = {}
        #: deletions of what commits retired, in the spines' thread (their order kept)
        self._deletions: list[Future[None]] = []
        self._load()

    def _manifests(self) -> list[str]:
        return sorted(n for n in self.fs.list(self.fs.path(MANIFEST_DIR))
                      if n.startswith("tick-") and n.endswith(".json"))

    def _load(self) -> None:
        names = self._manifests()
        if not names:
            return
        doc = json.loads(self.fs.read_text(self.fs.path(MANIFEST_DIR, names[-1])))
        self.tick = int(doc["tick"])
        self.meta = doc.get("meta", {})
        self.spines = {
            node: Spine([Batch.from_json(b) for b in entry["batches"]])
            for node, entry in doc["nodes"].items()
        }
        self.arrangements = {
            node: {a.key: a for a in (Arrangement.from_json(node, d) for d in entry.get("arrangements", []))}
            for node, entry in doc["nodes"].items() if entry.get("arrangements")
        }
        self.collect_garbage()

    def collect_garbage(self) -> None:
        """Remove batches of crashed or failed ticks, compacted-away runs and dropped nodes
        (after the merges running aside: what they wrote is live until folded or dropped)."""
        self.settle()
        merged_runs, merged = self._merged()
        live = {b.path for s in self.spines.values() for b in s.batches} | self._retired.keys() | merged
        for tick in self.fs.list(self.fs.path(STATE_DIR)):
            base = self.fs.path(STATE_DIR, tick)
            parts = [n for n in self.fs.list(base) if n.startswith("_node=")]
            dead = [n for n in parts if self.fs.path(STATE_DIR, tick, n) not in live]
            if len(dead) == len(parts):
                self.fs.delete(base)
            else:
                for name in dead:
                    self.fs.delete(self.fs.path(STATE_DIR, tick, name))
        if self.runs is not None:
            self.runs.collect_garbage({p for arrs in self.arrangements.values() for a in arrs.values()
                                       for p in a.paths()} | merged_runs)
        manifests = self._manifests()
        for name in manifests[:-KEEP_MANIFESTS]:
            self.fs.delete(self.fs.path(MANIFEST_DIR, name))
        for name in self.fs.list(self.fs.path(MANIFEST_DIR)):
            if name.endswith(".tmp"):
                self.fs.delete(self.fs.path(MANIFEST_DIR, name))

    def _merged(self) -> tuple[set[str], set[str]]:
        """The runs and the batches the finished merges wrote (the next commit folds them in)."""
        runs = {r.path for f in self._run_merges.values() if f.done() and f.exception() is None
                for _, r in f.result().outputs if r is not None}
        batches = {b.path for _, f in self._spine_merges.values() if f.done() and f.exception() is None
                   and (b := f.result())}
        return runs, batches

    def footprint(self) -> tuple[str, ...]:
        """What this open store counts on finding at its location, once the merges running
        beside the ticks are done: the manifests and intents, and the files those merges
        wrote (no manifest names them yet, so another process's open removes them). The same
        footprint later: no other process committed, redid a tick or collected garbage here
        in between, and this store is still the location's state."""
        self.settle()
        runs, batches = self._merged()
        here = [f"run:{p}" for p in runs if self.runs is not None and self.runs.exists(p)]
        here += [f"batch:{p}" for p in batches if self.fs.exists(p)]
        names = sorted(self.fs.list(self.fs.path(MANIFEST_DIR)))
        ticks = [n for n in names if n.startswith("tick-") and n.endswith(".json")]
        latest = self.fs.read_text(self.fs.path(MANIFEST_DIR, ticks[-1])) if ticks else ""
        return (hashlib.sha256(latest.encode()).hexdigest(), *names, *sorted(here))

    def has(self, node: str) -> bool:
        return node in self.spines

    # --- intents: what an uncommitted tick reads --------------------------------------

    def _intent_path(self, tick: int) -> str:
        return self.fs.path(MANIFEST_DIR, f"intent-{tick:012d}.json")

    def intend(self, tick: int, doc: dict[str, Any]) -> None:
        """Record what ``tick`` reads before it writes any output (replacing one a failed
        attempt in this process left)."""
        path = self._intent_path(tick)
        self.fs.delete(path)
        self.fs.write_atomic(path, json.dumps({"tick": tick, **doc}))

    def intent(self) -> dict[str, Any] | None:
        """The intent of the tick after the committed one, if a crash cut it short. Intents
        of committed ticks (a crash between the commit and the intent's removal) go."""
        for name in self.fs.list(self.fs.path(MANIFEST_DIR)):
            done = re.fullmatch(r"intent-(\d+)\.json", name)
            if done and int(done.group(1)) <= self.tick:
                self.fs.delete(self.fs.path(MANIFEST_DIR, name))
        path = self._intent_path(self.tick + 1)
        return json.loads(self.fs.read_text(path)) if self.fs.exists(path) else None

    def drop_intent(self, tick: int) -> None:
        self.fs.delete(self._intent_path(tick))

    def before(self, node: str) -> DataFrame | None:
        spine = self.spines.get(node)
        return spine.frame(self.spark) if spine else None

    def forget(self, nodes: set[str]) -> dict[str, tuple[Spine | None, dict[tuple[str, ...], Arrangement] | None]]:
        """Drop nodes' state from the open store: the next commit holds them anew. Returns
        what was dropped, for :meth:`restore` (nothing is deleted before a commit)."""
        gone = {n: (self.spines.pop(n, None), self.arrangements.pop(n, None)) for n in nodes}
        for spine, _ in gone.values():
            if spine is not None:
                spine.release()
        return gone

    def restore(self, gone: dict[str, tuple[Spine | None, dict[tuple[str, ...], Arrangement] | None]]) -> None:
        """Undo a :meth:`forget` before the next commit."""
        for node, (spine, arrangements) in gone.items():
            if spine is not None:
                self.spines[node] = spine
            if arrangements is not None:
                self.arrangements[node] = arrangements

    def write(self, tick: int, frames: dict[str, DataFrame]) -> dict[str, Batch]:
        """Write one batch per node (not yet committed), :data:`PACK` nodes per Spark job;
        nodes whose frame has no rows get none."""
        written: dict[str, Batch] = {}
        nodes = list(frames)
        for start in range(0, len(nodes), PACK):
            chunk = {n: frames[n] for n in nodes[start:start + PACK]}
            columns = {node: batch_column(node) for node in chunk}
            base = self.fs.path(batch_dir(tick))
            # few files per batch: every file is a task for each later tick that reads it
            files = self.spark.sparkContext.defaultParallelism
            pack(chunk, columns, "_node").coalesce(files).write.partitionBy("_node").parquet(base)
            for name in self.fs.list(base):
                if name.startswith("_node="):
                    node, path = name[len("_node="):], f"{base}/{name}"
                    written[node] = Batch(path, self.fs.size(path), columns[node], chunk[node].schema.json())
        return written

    def write_arrow(self, tick: int, tables: dict[str, pa.Table | None], schemas: dict[str, StructType]
                    ) -> dict[str, Batch]:
        """One batch per node (not yet committed) written from the driver as one Parquet
        file each, in the layout :meth:`write` gives them; nodes whose table has no rows
        get none. ``schemas`` are the nodes' rows as Spark types them."""
        written: dict[str, Batch] = {}
        base = batch_dir(tick)
        for node, table in tables.items():
            if table is None or table.num_rows == 0:
                continue
            rel, column = f"{base}/_node={node}", batch_column(node)
            size = write_batch_file(self._arrow_runs(), rel, "part-00000.parquet", column, table)
            written[node] = Batch(self.fs.path(rel), size, column, schemas[node].json())
        return written

    def _arrow_runs(self) -> RunStore:
        """The location as pyarrow reaches it (the driver's own reads and writes)."""
        if self.runs is None:
            raise StateError(f"pyarrow cannot reach {self.fs.root}")
        return self.runs

    def _arrow_fs(self, rel: str) -> tuple[Any, str]:
        """The pyarrow file system and path of ``rel`` under the location."""
        runs = self._arrow_runs()
        return runs.fs, f"{runs.base}/{rel}"

    def read_arrow(self, batches: list[Batch]) -> pa.Table:
        """Batches of one node as one Arrow table, read in the driver."""
        schema = arrow_schema(StructType.fromJson(json.loads(batches[0].schema)))
        tables = []
        for b in batches:
            fs, path = self._arrow_fs(b.path[len(self.fs.root) + 1:])
            # Spark writes INT96 timestamps, which pyarrow reads as nanoseconds unless told
            column = pq.read_table(path, filesystem=fs, columns=[b.column],
                                   coerce_int96_timestamp_unit="us").column(b.column)
            children = column.combine_chunks().flatten() if column.num_chunks else []
            tables.append(pa.Table.from_arrays(children, schema=schema) if children else schema.empty_table())
        return pa.concat_tables(t.cast(schema) for t in tables)

    def commit(self, tick: int, appended: dict[str, list[Batch]], merge: Callable[[str, DataFrame], DataFrame],
               meta: dict[str, Any], arrangements: dict[str, dict[tuple[str, ...], Arrangement]] | None = None,
               merge_arrow: Callable[[str, pa.Table], pa.Table] | None = None) -> None:
        """Make ``tick`` durable: ``appended`` names every live node with its new batches,
        ``arrangements`` the arrangements of those nodes that have them (default: as they are).

        Nodes not named are dropped. Merges that finished beside the ticks are folded in
        first; then the spines and arrangements' buckets over their bounds get their next
        merge, beside the next ticks (:meth:`_start_merges`).
        """
        arranged: dict[str, dict[tuple[str, ...], Arrangement]] = {
            node: dict(arrs) for node, arrs in (self.arrangements if arrangements is None else arrangements).items()
            if node in appended}
        retired_runs = self._fold_runs(arranged, tick)
        spines = {node: Spine(list(self.spines[node].batches) if node in self.spines else []) for node in appended}
        retired = self._fold_spines(spines)
        for node, batches in appended.items():
            spines[node].batches.extend(batches)
        doc = {
            "tick": tick,
            "committed_at": time.time(),
            "meta": meta,
            "nodes": {n: {"batches": [b.to_json() for b in s.batches]}
                      | ({"arrangements": [a.to_json() for a in arranged[n].values()]} if arranged.get(n) else {})
                      for n, s in spines.items()},
        }
        # compact: json's C encoder (with an indent it encodes in Python: 10 ms a tick for a
        # project of 25 state nodes)
        self.fs.write_atomic(self.fs.path(MANIFEST_DIR, f"tick-{tick:012d}.json"),
                             json.dumps(doc, separators=(",", ":")))
        if tick > KEEP_MANIFESTS:  # a long run keeps the last few, as a reopen does
            self.fs.delete(self.fs.path(MANIFEST_DIR, f"tick-{tick - KEEP_MANIFESTS:012d}.json"))
        dropped = [s for n, s in self.spines.items() if n not in spines]
        self.tick, self.meta, self.spines, self.arrangements = tick, meta, spines, arranged
        self._start_merges(tick, merge, merge_arrow)
        for b in retired:
            if b.frame is not None:
                b.frame.unpersist()
        for s in dropped:
            s.release()
        now = time.monotonic()
        self._retired |= {b.path: (tick, now) for b in retired}
        stale = [path for path, (at, since) in self._retired.items()
                 if at < tick and now - since >= RETIRED_GRACE_SECONDS]
        for path in stale:
            del self._retired[path]
        if dropped:  # (retired runs and stale batches are no longer live: it removes them too)
            self.collect_garbage()
        elif retired_runs or stale:  # runs at once (only ticks and merges read them, never a
            # catalog query), batches retired long enough ago that no query still reads them:
            # aside, not in the tick (about 30 files a tick for 25 state nodes)
            for done in [f for f in self._deletions if f.done()]:
                _failed(done, "deleting retired files")  # (the next open removes what is left)
                self._deletions.remove(done)
            self._deletions.append(self._aside.submit(self._delete, [r.path for r in retired_runs], stale))

    def _delete(self, runs: list[str], batches: list[str]) -> None:
        for path in runs:
            self._arrow_runs().remove(path)
        for path in batches:
            self.fs.delete_batch(path)

    # --- merges beside the ticks ---------------------------------------------------------

    def _fold_runs(self, arranged: dict[str, dict[tuple[str, ...], Arrangement]], tick: int) -> list[Run]:
        """Fold the finished merges of arrangements' runs into ``arranged`` (and those whose
        bucket has grown :data:`STALL` times past its bound, waiting for them); the runs
        no longer named."""
        retired: list[Run] = []
        for (node, key, part), future in list(self._run_merges.items()):
            arr = arranged.get(node, {}).get(key)
            if not future.done() and arr is not None and part in arr.parts \
                    and len(arr.runs[arr.parts.index(part)]) <= STALL * MAX_RUNS:
                continue
            del self._run_merges[node, key, part]
            if _failed(future, f"a merge of {node}'s runs"):
                continue
            done = future.result()
            assert self.runs is not None
            if arr is None:
                self.runs.discard(done)
                continue
            arranged[node][key], gone = self.runs.fold(arr, done, tick)
            retired.extend(gone)
        return retired

    def _fold_spines(self, spines: dict[str, Spine]) -> list[Batch]:
        """Fold the finished merges of spines into ``spines`` (waiting for those of a spine
        :data:`STALL` times past its bound); the batches no longer named. A merge whose
        batches are no longer in its spine is dropped."""
        retired: list[Batch] = []
        for node, (inputs, future) in list(self._spine_merges.items()):
            spine = spines.get(node)
            if not future.done() and spine is not None and len(spine.batches) <= STALL * self.max_batches:
                continue
            del self._spine_merges[node]
            if _failed(future, f"a merge of {node}'s batches"):
                continue
            out = future.result()
            at = None if spine is None else position(spine.batches, inputs)
            if spine is None or at is None:
                if out is not None:
                    self.fs.delete_batch(out.path)
                continue
            retired.extend(inputs)
            spine.batches[at:at + len(inputs)] = [out] if out is not None else []
        return retired

    def _start_merges(self, tick: int, merge: Callable[[str, DataFrame], DataFrame],
                      merge_arrow: Callable[[str, pa.Table], pa.Table] | None) -> None:
        """Start the merges the committed state is due, where none is running: every
        arrangement bucket's (:meth:`.RunStore.merge`), and each spine's: in Arrow in the
        driver (``merge_arrow``) for a run under :data:`ARROW_MERGE_BYTES`, else by a Spark
        job (``merge`` consolidates a union of batches)."""
        if self.runs is not None:
            runs = self.runs
            for node, arrs in self.arrangements.items():
                for key, arr in arrs.items():
                    busy = frozenset(p for n, k, p in self._run_merges if (n, k) == (node, key))
                    for planned in runs.merges(arr, busy):
                        self._run_merges[node, key, planned.part] = self._run_lane.submit(runs.merge, arr, planned,
                                                                                          tick)
        for node, spine in self.spines.items():
            start = spine.compaction(self.max_batches)
            if start is None or node in self._spine_merges:
                continue
            inputs = tuple(spine.batches[start:])
            if merge_arrow is not None and self.runs is not None and sum(b.bytes for b in inputs) <= ARROW_MERGE_BYTES:
                future = self._aside.submit(self._merge_spine, tick, node, inputs, merge_arrow)
            else:
                future = self._aside.submit(self._merge_spine_spark, tick, node, inputs, merge)
            self._spine_merges[node] = (inputs, future)

    def _merge_spine(self, tick: int, node: str, inputs: tuple[Batch, ...],
                     merge_arrow: Callable[[str, pa.Table], pa.Table]) -> Batch | None:
        """A spine's run merged into one batch in Arrow (None: the weights cancelled)."""
        schema = StructType.fromJson(json.loads(inputs[-1].schema))
        merged = merge_arrow(node, self.read_arrow(list(inputs)))
        return self.write_arrow(tick, {node: merged}, {node: schema}).get(node)

    def _merge_spine_spark(self, tick: int, node: str, inputs: tuple[Batch, ...],
                           merge: Callable[[str, DataFrame], DataFrame]) -> Batch | None:
        """A spine's run merged into one batch by a Spark job of its own job group (which
        a tick's count of its jobs leaves out)."""
        self.spark.sparkContext.setJobGroup(self._merge_group, f"merge of {node}")
        return self.write(tick, {node: merge(node, Batch.open_many(self.spark, list(inputs)))}).get(node)

    def settle(self) -> None:
        """Wait for the merges and deletions running beside the ticks (the next commit
        folds the merges in)."""
        futures: list[Future[Any]] = [*self._run_merges.values(), *(f for _, f in self._spine_merges.values()),
                                      *self._deletions]
        for future in futures:
            future.exception()

    def close(self) -> None:
        """Release the cached batches and unmap the runs read; merges not yet started are
        dropped, the running one is waited for, and what it writes no manifest names (the
        next open removes it). Cancelling a merge's Spark job instead would leave its tasks
        running past the close and have Spark log the abort as errors."""
        self._run_lane.shutdown(wait=True, cancel_futures=True)
        self._aside.shutdown(wait=True, cancel_futures=True)
        for s in self.spines.values():
            s.release()
        if self.runs is not None:
            self.runs.close()
