"""A large tick in Spark tasks: the operators of :mod:`.arranged`, run where the data is.

A tick too large for the driver runs the same :class:`~.arranged.ArrangedTick` inside
Spark tasks, each over a part of the tick's rows. Most operators work on any part (a
Map, a Filter, a join probing the state by the delta's keys); some need every row of a
key in one task: a join whose state side also changes this tick (its delta and the
state side's delta by the join key), an aggregate or window (its touched groups), a
state node's delta (consolidated: equal rows together), a top-k or a temporal filter
over the whole input (everything in one task). :func:`layout` cuts the circuit into
stages there, and each cut is one exchange: the values crossing it are shipped as
Arrow IPC blobs hashed by the key (:func:`.kernels.key_hash`, the hash the arrangements
are sorted by), so a task reads the runs of the buckets its keys fall in.

One Spark job per tick: each source's DataFrame is stage 0 (a source already in Arrow
in the driver is split there), every later stage a ``mapInArrow`` after a
``repartition`` by the blobs' part. A Map or Filter that Arrow does not compute exactly
(:meth:`.Plan.by_spark`) is Spark's, between two stages: its input leaves a task as
typed rows (a struct column of the stage rows, ``in_<node>``), Spark's projection (or
filter) runs on them in the same task, and the next stage reads its value from the
result (``out_<node>``; a Filter's rows that passed), so the tick stays one job and
Spark decides those values as it does in batch. A window Arrow has no kernel for is
Spark's there too: the stage where its partitions are gathers the touched partitions'
rows (typed, ``in_<node>``) and the retraction of what it emitted for them (a blob),
Spark's window runs over those rows between that stage and the next (partitioned apart
from the other stage rows: :func:`_window_through_spark`) and the next stage consolidates
both. A Map, Filter, window, aggregate or partial sums Arrow computes but declines on
some rows (an overflow, a division by zero: :class:`.NeedsSpark`) is Spark's between
stages for that tick, the job run again (sums as window functions over their rows:
:func:`_sums_through_spark`). A data error (:func:`.ticks.data_error`) in Spark's
projection names its node (:func:`failing`), so only the views computing it are set
aside, as in the driver. A task writes its part of
every state delta its stage computes: a Parquet file in the tick's batch directory
(:mod:`.state`'s layout) and one run per touched bucket of each arrangement
(:mod:`.arrangement`), and returns their names. The driver commits the tick as any
other, so crash safety and exactly-once are the same: files of a tick that did not
commit are named by no manifest and removed.
"""
from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import AbstractSet, Any, Iterable, Iterator, Mapping, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import sqlglot
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType
from sqlglot import exp

from ...circuit.operators import (
    WEIGHT,
    Filter,
    Generate,
    GroupDiff,
    Input,
    Integral,
    Join,
    Map,
    Operator,
    Pad,
    Partials,
    Scale,
    Temporal,
    WindowDiff,
    quote,
    walk,
)
from ..arrow import kernels
from . import zsets
from ..arranged import ArrangedTick
from ..plan import DeclinedRows, NeedsSpark, NotArranged, Plan, group_keys, unquote
from ...sql.relations import DIALECT
from ..ticks import data_error
from ..storage.arrangement import Arrangement, RunStore
from ..expiry import kept
from ..storage.state import batch_column, write_batch_file

#: the rows stages hand on: a value's part for stage ``dest`` (an Arrow IPC stream in
#: ``data``), or with ``dest`` -1 a file a task wrote (described in ``node`` as JSON)
STAGE_DDL = "dest INT, part INT, node STRING, data BINARY"
STAGE = pa.schema([("dest", pa.int32()), ("part", pa.int32()), ("node", pa.string()), ("data", pa.binary())])
WROTE = -1
#: the ``node`` of the row that tells a task it gives a keyless aggregate's row over no rows
KEYLESS = "keyless"
#: rows per shipped blob: bounds the memory of one shuffled row
BLOB_ROWS = 1 << 16

#: where a task's time goes (:func:`run_stage`): reading its input (Spark's batches, or the
#: blobs shipped to it), computing the operators, shipping values on as blobs, writing the
#: state deltas' files. A tick sums them over its tasks (:attr:`.TickStats.in_tasks`; a
#: source held in Arrow has its stage 0 run in the driver, and counted with them)
PHASES = ("read", "compute", "ship", "write")

#: how a value is split among a stage's tasks: ("cols", columns) by :func:`kernels.key_hash`
#: of those columns, ("probe", join id) by the hash of that join's probe keys
Hash = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class Partition:
    """How a value is split among its stage's tasks: by ``hash``, a function of the
    values of columns ``by`` (equal rows in those columns are in one task)."""

    hash: Hash
    by: frozenset[str]


@dataclass(frozen=True)
class Need:
    """What an operator needs of an input's split: ``hash`` exactly (co-located with
    another value split the same way), or rows equal in ``within``'s columns together."""

    hash: Hash | None = None
    within: frozenset[str] | None = None

    def met(self, part: Partition | None) -> bool:
        if self.hash is not None:
            return part is not None and part.hash == self.hash
        if self.within is not None:
            return part is not None and part.by <= self.within
        return True


ANY = Need()


@dataclass
class Layout:
    """Where each node of a tick is computed (stage 0: the sources), which values each
    stage is shipped and split how, and which state deltas each stage writes."""

    stage: dict[str, int] = field(default_factory=dict)
    part: dict[str, Partition | None] = field(default_factory=dict)
    ships: dict[int, dict[str, Hash]] = field(default_factory=dict)
    writes: dict[int, list[str]] = field(default_factory=dict)
    #: a node Spark computes between stages (:meth:`.Plan.by_spark`) → how its input is
    #: split on its way there; the node's value is given in stage ``stage[node]``
    spark: dict[str, Hash] = field(default_factory=dict)
    #: a window among those: the stage that gathers its touched partitions' rows (and
    #: retracts what it emitted for them), one before the stage given its value
    gather: dict[str, int] = field(default_factory=dict)

    @property
    def stages(self) -> int:
        return 1 + max(self.stage.values(), default=0)


def _columns(op: Operator) -> frozenset[str]:
    return frozenset(op.columns)


def _shipped(op: Operator, h: Hash) -> Partition:
    return Partition(h, frozenset(h[1]) if h[0] == "cols" else _columns(op))


def _reads(plan: Plan, op: Operator) -> list[tuple[Operator, Need]]:
    """The values ``op`` reads this tick (its deltas), with what each needs of its split."""
    if isinstance(op, Input):
        return []
    if isinstance(op, Join) and not isinstance(op, Temporal):
        j = plan.joins[op.id]
        delta = op.left if j.state_right else op.right
        i = 0 if j.state_right else 1
        reads = [(delta, ANY)]
        if j.unkeyed is None and j.state.after:  # the state side's delta: co-located by the key
            own = tuple(unquote(p[i]) for p in op.keys)
            h: Hash = ("probe", (op.id,)) if j.computed or j.probe_as else ("cols", own)
            side_key = j.state.key([unquote(p[1 - i]) for p in op.keys])
            reads = [(delta, Need(h)), (j.state.integral.input, Need(("cols", side_key)))]
        return reads
    if isinstance(op, Temporal):
        found = plan.temporal.get(op.id)
        if found is None:
            return [(op.joined, ANY)]
        one = Need(("cols", ()))  # the state's rows read by range: in one task
        return [(op.right, one)] + ([(found.state.integral.input, one)] if found.state.after else [])
    if isinstance(op, GroupDiff) and op.linear:
        return [(op.delta, Need(("cols", op.keys)))]
    if isinstance(op, (GroupDiff, WindowDiff)):
        keys = () if op.id in plan.tops else tuple(group_keys(op))
        before = plan.before[op.id]
        reads = [(op.delta, Need(("cols", keys)))]
        if before.after:
            reads.append((before.integral.input, Need(("cols", before.key(keys)))))
        return reads
    if isinstance(op, Integral):  # a state node's delta: equal rows (or keys) in one task
        cols = frozenset(op.key) if op.key is not None else _columns(op.input)
        return [(op.input, Need(within=cols))]
    if isinstance(op, (Map, Filter, Scale, Pad, Partials, Generate)):
        return [(op.input, ANY)]  # type: ignore[attr-defined]
    return [(i, ANY) for i in op.inputs]


def _carried(op: Operator, part: Partition | None, plan: Plan) -> Partition | None:
    """The split of ``op``'s value computed from an input split by ``part``."""
    if part is None:
        return None
    if isinstance(op, (Filter, Scale, Pad, Generate)):  # the input's columns kept as they are
        return part
    if isinstance(op, Map):
        copies: dict[str, str] = {}
        for out, src in plan._copies(op).items():
            copies.setdefault(src, out)
        if not part.by <= copies.keys() or not (part.hash[0] != "cols" or set(part.hash[1]) <= copies.keys()):
            return None
        h = part.hash if part.hash[0] != "cols" else ("cols", tuple(copies[c] for c in part.hash[1]))
        return Partition(h, frozenset(copies[c] for c in part.by))
    if isinstance(op, Join) and not isinstance(op, Temporal):
        j = plan.joins[op.id]
        delta = op.left if j.state_right else op.right
        offset = 0 if j.state_right else len(op.left.columns)
        names = {c: op.columns[offset + n] for n, c in enumerate(delta.columns)}
        if not part.by <= names.keys() or part.hash[0] == "cols" and not set(part.hash[1]) <= names.keys():
            return None
        h = part.hash if part.hash[0] != "cols" else ("cols", tuple(names[c] for c in part.hash[1]))
        return Partition(h, frozenset(names[c] for c in part.by))
    if isinstance(op, (GroupDiff, WindowDiff, Partials)):
        cols = set(op.columns)
        return part if part.by <= cols and (part.hash[0] != "cols" or set(part.hash[1]) <= cols) else None
    return None


def _wishes(plan: Plan, states: Sequence[Operator]) -> dict[str, list[Hash]]:
    """Per node, the splits its consumers need exactly, and the splits of its input that
    carry over to them (through Filters and Maps that copy the key): a value shipped for a
    consumer that needs less is split so, and the others then find it split as they need."""
    wishes: dict[str, list[Hash]] = {}

    def wish(x: Operator, h: Hash) -> None:
        if h in wishes.setdefault(x.id, []):
            return
        wishes[x.id].append(h)
        if h[0] != "cols":
            return
        if isinstance(x, (Filter, Scale, Pad, Generate)):
            wish(x.input, h)
        elif isinstance(x, Map):
            copies = plan._copies(x)
            if all(c in copies for c in h[1]):
                wish(x.input, ("cols", tuple(copies[c] for c in h[1])))

    seen: set[str] = set()
    for op in walk(*states):
        if op.id not in seen:
            seen.add(op.id)
            for x, need in _reads(plan, op):
                if need.hash is not None:
                    wish(x, need.hash)
    return wishes


def layout(plan: Plan, states: Sequence[Operator], by_spark: AbstractSet[str] = frozenset()) -> Layout:
    """Cut the circuit computing ``states``' deltas into stages (see the module's doc):
    each node as early as its inputs allow, one stage later where an input is not split
    as it needs (and then shipped to it split so). Spark computes between stages the Maps,
    Filters and windows Arrow does not compute (:meth:`.Plan.by_spark`) and those
    ``by_spark`` (Arrow declined them on this tick's rows: :class:`.NeedsSpark`); a
    window's rows are gathered where its partitions are, as Arrow's would be computed."""
    out = Layout()
    wishes = _wishes(plan, states)

    def split(s: int, x: Operator) -> Partition | None:
        if out.stage[x.id] == s:
            return out.part[x.id]
        h = out.ships.get(s, {}).get(x.id)
        return None if h is None else _shipped(x, h)

    def place(op: Operator) -> None:
        if op.id in out.stage:
            return
        spark = plan.by_spark(op) or op.id in by_spark
        if spark and not isinstance(op, (WindowDiff, GroupDiff)):
            place_by_spark(op)
            return
        reads = _reads(plan, op)
        for x, _ in reads:
            place(x)
        if isinstance(op, Input):
            out.stage[op.id], out.part[op.id] = 0, None
            return
        s = max([1] + [out.stage[x.id] for x, _ in reads])
        while not all(need.met(split(s, x)) if out.stage[x.id] == s or x.id in out.ships.get(s, {}) else True
                      for x, need in reads):
            s += 1
        for x, need in reads:
            if out.stage[x.id] != s and x.id not in out.ships.get(s, {}):
                h = need.hash or next((w for w in wishes.get(x.id, []) if need.met(_shipped(x, w))),
                                      ("cols", tuple(sorted(need.within)) if need.within is not None
                                       else tuple(x.columns)))
                out.ships.setdefault(s, {})[x.id] = h
        out.stage[op.id] = s
        first = reads[0][0] if reads else None
        out.part[op.id] = None if first is None else _carried(op, split(s, first), plan)
        if spark:  # a window or aggregate: its rows gathered here, computed by Spark before the next stage
            assert isinstance(op, (WindowDiff, GroupDiff))
            check_names(op, op.delta)
            keys = tuple(group_keys(op))  # a top-k's: none
            out.gather[op.id], out.stage[op.id], out.spark[op.id] = s, s + 1, ("cols", keys)
            out.part[op.id] = Partition(("cols", keys), frozenset(keys))

    def check_names(op: Operator, x: Operator) -> None:
        clash = sorted(set(x.columns) & set(STAGE.names))
        if clash:
            raise NotArranged(f"{op.label()} needs Spark between stages, and its input has columns named {clash}")

    def place_by_spark(op: Operator) -> None:
        x = op.input  # type: ignore[attr-defined]
        place(x)
        check_names(op, x)
        h = next(iter(wishes.get(x.id, [])), ("cols", tuple(x.columns)))
        out.stage[op.id], out.spark[op.id] = out.stage[x.id] + 1, h
        out.part[op.id] = _carried(op, _shipped(x, h), plan)

    for state in states:
        place(state)
        out.writes.setdefault(out.stage[state.id], []).append(state.id)
    return out


def frame_schema(plan: Plan, layout: Layout, ops: Mapping[str, Operator]) -> StructType:
    """The rows every stage gives: the stage rows, and the typed input of each node Spark
    computes between stages (NULL in the other rows)."""
    stage = StructType.fromDDL(STAGE_DDL)
    assert isinstance(stage, StructType)
    typed = {node: plan.schema(_spark_input(ops[node])) for node in layout.spark}
    return StructType(list(stage.fields) + [  # each field NULL where the whole struct is
        StructField(f"in_{node}", StructType([StructField(f.name, f.dataType, True) for f in schema.fields]))
        for node, schema in typed.items()])


@dataclass
class Context:
    """What every task of a tick needs (pickled into each)."""

    plan: Plan
    layout: Layout
    ops: dict[str, Operator]
    arrangements: dict[str, dict[tuple[str, ...], Arrangement]]
    root: str
    tick: int
    batch_dir: str  # the tick's batch directory, relative to the root
    schemas: dict[str, pa.Schema]  # Input node → its rows' Arrow types (with the weight)
    parts: list[int]  # per task, the ``part`` value Spark's hash partitioning sends to it
    ansi: bool
    frame: StructType  # the rows every stage gives (:func:`frame_schema`)
    first: bool = False  # the state nodes start empty (see :attr:`.ArrangedTick.first`)
    #: per state node rows leave as the time moves: (column, threshold) below which a row
    #: of its delta is not stored (:func:`.expiry.kept`)
    cuts: dict[str, tuple[str, pa.Scalar]] = field(default_factory=dict)
    legacy_stats: bool = False  # see :attr:`.ArrangedTick.legacy_stats`

    @cached_property
    def arrow_frame(self) -> pa.Schema:
        return zsets.arrow_schema(self.frame)


def _blobs(ctx: Context, dest: int, node: str, table: pa.Table, hashes: np.ndarray) -> Iterator[pa.RecordBatch]:
    """``table``'s rows as blobs for stage ``dest``, each row to the task its hash picks."""
    parts = ctx.parts
    order, bounds = kernels.grouped((hashes % np.uint64(len(parts))).astype(np.int64), len(parts))
    ordered = table.take(pa.array(order))
    for t in range(len(parts)):
        for start in range(int(bounds[t]), int(bounds[t + 1]), BLOB_ROWS):
            piece = ordered.slice(start, min(BLOB_ROWS, int(bounds[t + 1]) - start))
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, piece.schema) as writer:
                writer.write_table(piece)
            yield _framed(ctx, pa.RecordBatch.from_pylist([{"dest": dest, "part": parts[t], "node": node,
                                                            "data": sink.getvalue().to_pybytes()}], schema=STAGE))


def _framed(ctx: Context, batch: pa.RecordBatch) -> pa.RecordBatch:
    """Stage rows as every stage gives them: NULL in each typed input column they lack."""
    schema = ctx.arrow_frame
    if batch.schema.names == schema.names:
        return batch
    return pa.RecordBatch.from_arrays([batch.column(f.name) if f.name in batch.schema.names
                                       else pa.nulls(batch.num_rows, f.type) for f in schema], schema=schema)


def _typed(ctx: Context, node: str, table: pa.Table, hashes: np.ndarray) -> Iterator[pa.RecordBatch]:
    """``table`` (the input of ``node``, which Spark computes between stages) as typed rows
    for the stage ``node`` is given in, each row to the task its hash picks."""
    column = f"in_{node}"
    table = table.cast(pa.schema(list(ctx.arrow_frame.field(column).type)))
    parts = np.asarray(ctx.parts, np.int32)[(hashes % np.uint64(len(ctx.parts))).astype(np.int64)]
    dest = ctx.layout.stage[node]
    for start in range(0, table.num_rows, BLOB_ROWS):
        piece = table.slice(start, BLOB_ROWS)
        n = piece.num_rows
        values = pa.StructArray.from_arrays([c.combine_chunks() for c in piece.columns], fields=list(piece.schema))
        yield _framed(ctx, pa.RecordBatch.from_pydict({
            "dest": pa.array(np.full(n, dest, np.int32)), "part": pa.array(parts[start:start + n]),
            "node": pa.array([node] * n, pa.string()), "data": pa.nulls(n, pa.binary()), column: values}))


def _hash(tick: ArrangedTick, ops: Mapping[str, Operator], h: Hash, table: pa.Table) -> np.ndarray:
    """Each row's hash as ``h`` splits it (a join's probe keys: as the join probes by them)."""
    if h[0] == "probe":
        join = ops[h[1][0]]
        assert isinstance(join, Join)
        probed, keys = tick.probe_keys(join, table, fits_only=False)
        return kernels.key_hash(probed, keys)
    return kernels.key_hash(table, h[1])


def _combined(op: Operator, parts: Sequence[pa.Table]) -> pa.Table | None:
    """A value from the parts several tasks shipped: a Z-set's parts as one; partial sums
    summed again per group (one row per group, as the operator gives them, or the rows a
    DECIMAL's sum past 38 digits takes: :func:`.kernels.fitted`)."""
    table = kernels.concat(parts)
    if table is None or len(parts) == 1 or not isinstance(op, Partials):
        return table
    return kernels.fitted(table, op.keys).select(table.column_names).cast(table.schema)


def _by_spark(ctx: Context, node: str, parts: Sequence[pa.Table]) -> pa.Table | None:
    """The value of a node Spark computed between stages, from its rows this task got, in
    the node's Arrow types: a window's, its rows Spark computed (weight 1 each) and the
    retraction of what it emitted, consolidated."""
    schema = zsets.arrow_schema(ctx.plan.schema(ctx.ops[node]))
    table = kernels.concat([p.cast(schema) for p in parts])
    if table is None or node not in ctx.layout.gather:
        return table
    return kernels.consolidate(table)


def _spark_input(op: Operator) -> Operator:
    """The node whose rows Spark computes ``op`` over between stages (a window's: its
    touched partitions' rows, of its delta's columns)."""
    return op.delta if isinstance(op, (WindowDiff, GroupDiff)) else op.input  # type: ignore[attr-defined]


def _keyless(ctx: Context) -> Iterator[pa.RecordBatch]:
    """On a first tick, a row for each stage computing a keyless aggregate, sent where its
    rows go (the hash of no keys): the task it reaches gives the aggregate's one row over
    no rows (:meth:`.ArrangedTick._no_rows`), and no other task does, rows or none."""
    if not ctx.first:
        return
    owner = ctx.parts[int(kernels.key_hash(pa.table({"x": [0]}), [])[0] % np.uint64(len(ctx.parts)))]
    for s in sorted({ctx.layout.stage[n] for n, op in ctx.ops.items()
                     if isinstance(op, GroupDiff) and not op.keys and n in ctx.layout.stage}):
        yield _framed(ctx, pa.RecordBatch.from_pylist([{"dest": s, "part": owner, "node": KEYLESS, "data": None}],
                                                      schema=STAGE))


def _wrote(ctx: Context, doc: dict[str, Any]) -> pa.RecordBatch:
    return _framed(ctx, pa.RecordBatch.from_pylist([{"dest": WROTE, "part": 0, "node": json.dumps(doc), "data": None}],
                                                   schema=STAGE))


T = TypeVar("T")


def _timed(items: Iterable[T], seconds: dict[str, float], phase: str) -> Iterator[T]:
    """``items``, the time spent making each (not the time its consumer holds it) added
    to ``seconds[phase]``."""
    it = iter(items)
    while True:
        start = time.perf_counter()
        item = next(it, None)
        seconds[phase] += time.perf_counter() - start
        if item is None:
            return
        yield item


def run_stage(ctx: Context, s: int, source: str | None, batches: Iterator[pa.RecordBatch]
              ) -> Iterator[pa.RecordBatch]:
    """One task of stage ``s``: the nodes the stage computes over this task's part, shipped
    on or written. Stage 0 reads ``source``'s rows; a later stage reads the blobs shipped
    to it and hands on the rest. Its last row tells where its time went (:data:`PHASES`)."""
    seconds = dict.fromkeys(PHASES, 0.0)
    given: dict[str, list[pa.Table]] = {}
    keyless = False  # whether this task gives a keyless aggregate's row over no rows
    if s == 0:
        assert source is not None
        tables = [pa.Table.from_batches([b]) for b in _timed(batches, seconds, "read") if b.num_rows]
        given[source] = [t.cast(ctx.schemas[source]) for t in tables]
    else:
        for b in _timed(batches, seconds, "read"):
            start = time.perf_counter()
            dest, node, data = b.column("dest").to_pylist(), b.column("node").to_pylist(), b.column("data")
            forward = [i for i, d in enumerate(dest) if d != s]
            typed: dict[str, list[int]] = {}
            for i, d in enumerate(dest):
                if d == s and node[i] == KEYLESS:
                    keyless = True
                elif d == s and node[i] in ctx.layout.spark and ctx.layout.stage[node[i]] == s and not data[i].is_valid:
                    typed.setdefault(node[i], []).append(i)  # Spark's rows (its value shipped on, a retraction: blobs)
                elif d == s:
                    given.setdefault(node[i], []).append(pa.ipc.open_stream(data[i].as_buffer()).read_all())
            for n, rows in typed.items():
                values = b.column(_by_spark_column(ctx.ops[n])).take(pa.array(rows))
                given.setdefault(n, []).append(pa.Table.from_struct_array(values))
            seconds["read"] += time.perf_counter() - start
            if forward:
                yield b.select(ctx.arrow_frame.names).take(pa.array(forward))
    start = time.perf_counter()
    store = RunStore(ctx.root)
    tick = ArrangedTick(ctx.plan, {}, ctx.arrangements, store, None, ansi=ctx.ansi, first=keyless,
                        bounded=False, legacy_stats=ctx.legacy_stats)
    shipped = list(ctx.layout.ships.get(s, {})) if s else [source]
    tick.given({n: _combined(ctx.ops[n], given.get(n, [])) for n in shipped if n is not None})
    tick.given({n: _by_spark(ctx, n, given.get(n, [])) for n in ctx.layout.spark if ctx.layout.stage[n] == s})
    seconds["compute"] += time.perf_counter() - start
    for dest in range(s + 1, ctx.layout.stages):
        for node, h in ctx.layout.ships.get(dest, {}).items():
            if ctx.layout.stage[node] != s or (s == 0 and node != source):
                continue
            start = time.perf_counter()
            value = tick.value(ctx.ops[node])
            seconds["compute"] += time.perf_counter() - start
            if value is not None and value.num_rows:
                yield from _timed(_blobs(ctx, dest, node, value, _hash(tick, ctx.ops, h, value)), seconds, "ship")
    for node, h in ctx.layout.spark.items():  # typed rows for Spark before the stage that gets them
        op = ctx.ops[node]
        if node in ctx.layout.gather:  # a window's or aggregate's rows, and the retraction of its rows
            if ctx.layout.gather[node] != s:
                continue
            assert isinstance(op, (WindowDiff, GroupDiff))
            start = time.perf_counter()
            value, gone = tick.gathered(op)
            seconds["compute"] += time.perf_counter() - start
            if gone is not None and gone.num_rows:
                yield from _timed(_blobs(ctx, ctx.layout.stage[node], node, gone, _hash(tick, ctx.ops, h, gone)),
                                  seconds, "ship")
        else:
            x = _spark_input(op)
            if ctx.layout.stage[x.id] != s or (s == 0 and x.id != source):
                continue
            start = time.perf_counter()
            value = tick.value(x)
            seconds["compute"] += time.perf_counter() - start
        if value is not None and value.num_rows:
            yield from _timed(_typed(ctx, node, value, _hash(tick, ctx.ops, h, value)), seconds, "ship")
    for node in ctx.layout.writes.get(s, []):
        start = time.perf_counter()
        delta = tick.state_delta(ctx.ops[node])
        if delta is not None and node in ctx.cuts:
            delta = kept(delta, *ctx.cuts[node])
        seconds["compute"] += time.perf_counter() - start
        if delta is not None and delta.num_rows:
            yield from (_wrote(ctx, d) for d in _timed(write(ctx, store, node, delta), seconds, "write"))
    yield _wrote(ctx, {"task": seconds})


def write(ctx: Context, store: RunStore, node: str, delta: pa.Table) -> Iterator[dict[str, Any]]:
    """A part of a state node's delta (a task's, or one the driver adds): a Parquet file of
    the tick's batch and a run per touched bucket of each arrangement, described as the
    job returns them."""
    name = f"part-{uuid.uuid4().hex[:12]}.parquet"
    rel = f"{ctx.batch_dir}/_node={node}"
    written = write_batch_file(store, rel, name, batch_column(node), delta)
    yield {"node": node, "batch": rel, "bytes": written, "rows": delta.num_rows}
    for key, arr in ctx.arrangements.get(node, {}).items():
        done = store.append(replace(arr, runs=()), ctx.tick, delta)
        for bucket, runs in enumerate(done.runs):
            for r in runs:
                yield {"node": node, "key": list(key), "bucket": bucket, "path": r.path, "rows": r.rows}


def spark_parts(spark: Any, tasks: int) -> list[int]:
    """Per task, a ``part`` value that ``repartition(tasks, "part")`` sends to that task
    (Spark hashes the value: asked of Spark once, by a query over a few hundred ints)."""
    rows = spark.range(64 * tasks).selectExpr("CAST(id AS INT) AS v",
                                              f"pmod(hash(CAST(id AS INT)), {tasks}) AS t").collect()
    found: dict[int, int] = {}
    for r in rows:
        found.setdefault(r["t"], r["v"])
    if len(found) < tasks:
        raise NotArranged(f"no part value reaches each of {tasks} tasks")
    return [found[t] for t in range(tasks)]


def run(ctx: Context, spark: SparkSession, sources: Mapping[str, DataFrame], tables: Mapping[str, pa.Table],
        tasks: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The tick as one Spark job: the files its tasks wrote, and the seconds its tasks
    spent per phase (:data:`PHASES`, summed over the tasks). Stage 0 of a source held in
    Arrow (``tables``) runs here in the driver: its rows are split into blobs at once
    (through Spark, 1M rows cost seconds of conversion to rows and back to Arrow), and
    the blobs are the job's input beside the DataFrame sources' stage 0 tasks."""
    frame = _sources(ctx, spark, sources, tables)
    for s in range(1, ctx.layout.stages):
        for node in _between(ctx, s):
            frame = _through_spark(frame, node, ctx.ops[node], ctx.plan)
        frame = _stage(ctx, frame, s, tasks)
    docs = [json.loads(r["node"]) for r in frame.where(f"dest = {WROTE}").select("node").collect()]
    seconds = {phase: sum(d["task"][phase] for d in docs if "task" in d) for phase in PHASES}
    return [d for d in docs if "task" not in d], seconds


def failing(ctx: Context, spark: SparkSession, sources: Mapping[str, DataFrame], tables: Mapping[str, pa.Table],
            tasks: int) -> tuple[str, str] | None:
    """After the tick's job failed on a data error (:func:`.ticks.data_error`): the first
    node Spark computes between stages whose projection fails on its own rows, with the
    error; None when none does. Each such node, in the order of the stages, is its own
    job over the stages before it (writing nothing): a tick's work again per node, paid
    only when a tick fails."""
    quiet = replace(ctx, layout=replace(ctx.layout, writes={}))
    frame = _sources(quiet, spark, sources, tables)
    for s in range(1, ctx.layout.stages):
        for node in _between(ctx, s):
            try:
                _through_spark(frame.where(F.col("node") == F.lit(node)), node, ctx.ops[node], ctx.plan
                               ).write.format("noop").mode("overwrite").save()
            except Exception as e:
                if (why := data_error(e)) is None:
                    raise
                return node, why
            frame = _through_spark(frame, node, ctx.ops[node], ctx.plan)
        frame = _stage(quiet, frame, s, tasks)
    return None


def _sources(ctx: Context, spark: SparkSession, sources: Mapping[str, DataFrame], tables: Mapping[str, pa.Table]
             ) -> DataFrame:
    """Stage 0's rows: the DataFrame sources' tasks, and the blobs of those held in Arrow."""
    frames = [df.mapInArrow(partial(run_stage, ctx, 0, node), ctx.frame) for node, df in sources.items()]
    blobs = [b for node, t in tables.items() for b in run_stage(ctx, 0, node, iter(t.to_batches()))]
    blobs += _keyless(ctx)
    if blobs or not frames:
        frames.append(zsets.arrow_frame(spark, pa.Table.from_batches(blobs, ctx.arrow_frame), ctx.frame))
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


def _between(ctx: Context, s: int) -> list[str]:
    """The nodes Spark computes before stage ``s``, in the order it computes them."""
    return sorted(n for n in ctx.layout.spark if ctx.layout.stage[n] == s)


def _stage(ctx: Context, frame: DataFrame, s: int, tasks: int) -> DataFrame:
    return frame.repartition(tasks, "part").mapInArrow(partial(run_stage, ctx, s, None), ctx.frame)


def _through_spark(frame: DataFrame, node: str, op: Operator, plan: Plan) -> DataFrame:
    """``frame`` with Spark's ``op`` over its typed input rows (``in_<node>``): a Map's
    columns as ``out_<node>`` (NULL in the other rows; the expressions are not evaluated
    there), a Filter's rows that fail its predicate dropped. A projection: it runs in the
    task that gave the rows. A window: :func:`_window_through_spark`; an aggregate or
    partial sums: :func:`_group_through_spark`, :func:`_sums_through_spark`."""
    if isinstance(op, WindowDiff):
        return _window_through_spark(frame, node, op)
    if isinstance(op, GroupDiff) and not op.linear:
        return _group_through_spark(frame, node, op, plan.schema(op.delta))
    if isinstance(op, (GroupDiff, Partials)):
        return _sums_through_spark(frame, node, op, plan)
    columns = [quote(c) for c in frame.columns]
    mine = F.col("node") == F.lit(node)
    wide = frame.select(*columns, F.col(f"in_{node}.*"))
    if isinstance(op, Filter):
        return wide.where(~mine | F.coalesce(F.expr(op.predicate), F.lit(False))).select(*columns)
    assert isinstance(op, Map)
    values = F.struct(*(F.expr(e).alias(n) for n, e in op.exprs), F.col(quote(WEIGHT)))
    return wide.select(*columns, F.when(mine, values).alias(_by_spark_column(op)))


#: the column that keeps the other stage rows out of a window's partitions
APART = "_apart"


def _apart(frame: DataFrame, node: str, bag: bool = True) -> tuple[DataFrame, Column]:
    """``frame`` with the typed rows of ``node`` (``in_<node>``, a Z-set) beside the stage
    rows' columns, and :data:`APART`: NULL for these rows and a hash of the row for the
    others. A window partitioned by it first holds these rows alone, as in batch (Spark
    exchanges the rows by the partition, and the next stage by ``part`` again). ``bag``:
    each row as many times as its weight (a row of weight 0 or less gone); else each once,
    with its weight. And whether a row is one of these."""
    columns = [quote(c) for c in frame.columns]
    mine = (F.col("node") == F.lit(node)) & F.col(f"in_{node}").isNotNull()
    one = F.lit(1).cast("long")
    data = frame.schema[f"in_{node}"].dataType.names  # type: ignore[attr-defined]
    copies = ([F.explode(F.when(mine, F.array_repeat(one, F.col(f"in_{node}.{quote(WEIGHT)}").cast("int")))
                         .otherwise(F.array(one))).alias(f"{APART}_copy")] if bag else [])
    hashed = [quote(f.name) for f in frame.schema.fields if _hashable(f.dataType)]
    return frame.select(*columns, *(F.col(f"in_{node}.{quote(c)}").alias(c) for c in data),
                        F.when(mine, F.lit(None).cast("long")).otherwise(F.xxhash64(*hashed)).alias(APART),
                        *copies), mine


def _window_through_spark(frame: DataFrame, node: str, op: WindowDiff) -> DataFrame:
    """``frame`` with Spark's window functions over the typed rows of the touched
    partitions (``in_<node>``), each computed row in ``out_<node>`` (weight 1; the rows
    the window's predicate drops gone), each window partitioned by :data:`APART` first
    (:func:`_apart`). Every other stage row passes through."""
    columns = [quote(c) for c in frame.columns]
    data = list(op.delta.columns)
    wide, mine = _apart(frame, node)
    out = wide.selectExpr(*columns, *map(quote, data), *(f"{apart(e, APART)} AS {quote(n)}" for n, e in op.funcs))
    if op.keep:
        out = out.where(~mine | F.coalesce(F.expr(op.keep), F.lit(False)))
    values = F.struct(*(F.col(quote(c)) for c in op.columns), F.lit(1).cast("long").alias(WEIGHT))
    return out.select(*columns, F.when(mine, values).alias(_by_spark_column(op)))


def _group_through_spark(frame: DataFrame, node: str, op: GroupDiff, schema: StructType) -> DataFrame:
    """``frame`` with Spark's aggregates over the typed rows of the touched groups
    (``in_<node>``), one row per group in ``out_<node>`` (weight 1): each aggregate as a
    window function over the group (partitioned by :data:`APART` first, :func:`_apart`),
    a DISTINCT one over the first row of each of its values (Spark's window takes no
    DISTINCT; its partition makes values distinct as Spark's grouping does), and the
    group's first row kept, its floating-point keys' -0.0 as Spark's grouping gives it,
    0.0. Every other stage row passes through."""
    columns = [quote(c) for c in frame.columns]
    wide, mine = _apart(frame, node)
    group = [F.col(APART), *(F.col(quote(k)) for k in op.keys)]
    once: dict[str, Column] = {}
    for a in op.aggs:
        if a.distinct and a.arg is not None and a.arg not in once:
            first = F.row_number().over(Window.partitionBy(*group, F.col(quote(a.arg))).orderBy(F.lit(0))) == 1
            name = f"{APART}_once{len(once)}"
            wide = wide.withColumn(name, F.when(first, F.col(quote(a.arg))))
            once[a.arg] = F.col(name)
    by = Window.partitionBy(*group)
    w, types = F.when(mine, F.lit(1).cast("long")), zsets.arg_types(schema, op.aggs)
    values = F.struct(*_group_keys(op, schema), *(zsets.weighted(a, w, types, by, once.get(a.arg or "")).alias(a.name)
                                                  for a in op.aggs), F.lit(1).cast("long").alias(WEIGHT))
    return _one_per_group(wide, columns, mine, by, values, _by_spark_column(op))


def _sums_through_spark(frame: DataFrame, node: str, op: GroupDiff | Partials, plan: Plan) -> DataFrame:
    """``frame`` with Spark's sums over the typed rows ``in_<node>``, one row per group in
    ``out_<node>``, each sum a window function over the group (partitioned by
    :data:`APART` first, :func:`_apart`): a Partials node's partial sums of the tick's rows
    (:func:`.zsets.partial_sums`), or a linear aggregate's rows from its touched groups'
    partial sums, stored and this tick's, summed and finished (weight 1; a group of
    weight 0 gone, but a keyless aggregate's one row, of COUNT 0 over no rows, kept). A
    sum past its type is Spark's: its error, or NULL."""
    columns = [quote(c) for c in frame.columns]
    by = Window.partitionBy(F.col(APART), *(F.col(quote(k)) for k in op.keys))
    if isinstance(op, Partials):
        schema = plan.schema(op.input)
        types = zsets.arg_types(schema, op.aggs)
        signed = zsets.unit_weights_needed(op.aggs, types)
        wide, mine = _apart(frame, node, bag=False)
        if signed:  # each row as |w| rows of weight ±1, as Spark's own partial sums take them
            w = F.col(quote(WEIGHT))
            wide = wide.withColumn(WEIGHT, F.explode(F.when(mine, F.array_repeat(
                F.signum(w).cast("long"), F.abs(w).cast("int"))).otherwise(F.array(F.lit(None).cast("long")))))
        sums = zsets.partial_sums(op.aggs, types, F.col(quote(WEIGHT)))
        values = F.struct(*_group_keys(op, schema), *(v.over(by).alias(n) for n, v in sums.items()))
        return _one_per_group(wide, columns, mine, by, values, _by_spark_column(op))
    wide, mine = _apart(frame, node, bag=False)
    names = [c for c in plan.schema(op.delta).names if c not in op.keys]
    count, results = zsets.finalize({c: F.sum(F.col(quote(c))).over(by) for c in names}, op.aggs,
                                    zsets.arg_types(plan.schema(op.delta.input), op.aggs))  # type: ignore[attr-defined]
    values = F.struct(*(F.col(quote(k)) for k in op.keys), *(v.alias(a.name) for v, a in zip(results, op.aggs)),
                      F.lit(1).cast("long").alias(WEIGHT))
    return _one_per_group(wide, columns, mine, by, values, _by_spark_column(op), (count != 0) if op.keys else None)


def _group_keys(op: GroupDiff | Partials, schema: StructType) -> list[Column]:
    """A group's keys as Spark's grouping gives them, from the group's first row: a
    floating-point key's -0.0 as 0.0 (a key with floating-point values in a nested type
    declines the tick's rows)."""
    keys = []
    for k in op.keys:
        kind = schema[k].dataType
        if _nested_float(kind):
            raise DeclinedRows(f"{op.label()}: the key {k} holds floating-point values in a nested type")
        c = F.col(quote(k))
        keys.append(F.when(c == 0, F.lit(0).cast(kind)).otherwise(c).alias(k) if zsets.floating(kind) else c)
    return keys


def _one_per_group(wide: DataFrame, columns: Sequence[str], mine: Column, by: Any, values: Column, out: str,
                   keep: Column | None = None) -> DataFrame:
    """The stage rows ``columns`` of ``wide`` and, of a node's rows (``mine``), the first
    of each group ``by`` (where ``keep`` holds), with ``values`` in ``out``."""
    first = F.row_number().over(by.orderBy(F.lit(0))) == 1
    kept = wide.select(*columns, F.when(mine, values).alias(out),
                       (~mine | (first if keep is None else first & keep)).alias(f"{APART}_kept"))
    return kept.where(F.col(f"{APART}_kept")).select(*columns, out)


def _nested_float(kind: DataType) -> bool:
    """Whether values of ``kind`` hold floating-point values within a struct, array or map."""
    inner: list[DataType] = ([f.dataType for f in kind.fields] if isinstance(kind, StructType)
                             else [kind.elementType] if isinstance(kind, ArrayType)
                             else [kind.keyType, kind.valueType] if isinstance(kind, MapType) else [])
    return any(zsets.floating(t) or _nested_float(t) for t in inner)


def _hashable(kind: DataType) -> bool:
    """Whether Spark's ``xxhash64`` takes values of ``kind`` (not a map, at any depth)."""
    if isinstance(kind, MapType):
        return False
    if isinstance(kind, StructType):
        return all(_hashable(f.dataType) for f in kind.fields)
    return not isinstance(kind, ArrayType) or _hashable(kind.elementType)


def apart(sql: str, column: str) -> str:
    """A window function's SQL partitioned by ``column`` before its own PARTITION BY."""
    tree = sqlglot.parse_one(sql, read=DIALECT)
    for w in tree.find_all(exp.Window):
        w.set("partition_by", [exp.column(column, quoted=True), *(w.args.get("partition_by") or [])])
    return tree.sql(dialect=DIALECT)


def _by_spark_column(op: Operator) -> str:
    """The column of the stage rows holding the value of ``op`` after :func:`_through_spark`."""
    return f"out_{op.id}" if isinstance(op, (Map, WindowDiff, GroupDiff, Partials)) else f"in_{op.id}"


def declined(e: BaseException) -> str | None:
    """Why a task declined the tick (:class:`NotArranged` raised in it), if it did."""
    found = re.search(r"(?:NotArranged|DeclinedRows|NeedsSpark): (.+)", str(e))
    return found.group(1).strip() if found else None


def of_rows(e: BaseException) -> bool:
    """Whether a task (or the rehearsal) declined the tick's rows, not its operators
    (:class:`.DeclinedRows`): then a later tick is tried in tasks again."""
    return isinstance(e, DeclinedRows) or re.search(r"(?:DeclinedRows|NeedsSpark): ", str(e)) is not None


def needs_spark(e: BaseException) -> str | None:
    """The node a task (or the rehearsal) declined for Spark to compute between stages
    (:class:`.NeedsSpark`), if it did."""
    if isinstance(e, NeedsSpark):
        return e.node
    found = re.search(r"NeedsSpark: .*\[node ([^\]\s]+)\]", str(e))
    return found.group(1) if found else None


def portable(plan: Plan, states: Sequence[Operator]) -> tuple[Plan, dict[str, Operator]]:
    """The plan and the circuit's nodes by id, as tasks take them."""
    return plan.portable(states), {op.id: op for op in walk(*states)}
