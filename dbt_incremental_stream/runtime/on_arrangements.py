"""A tick on arrangements: the operators of :mod:`.arranged` in the driver over Arrow, or
the same operators in Spark tasks (:mod:`.tasks`) when the tick is too large for the driver.

Where a tick runs is decided by its size, not by its operators: the inputs are fetched
into the driver as Arrow up to :data:`ARRANGED_ROWS` rows in all (a DataFrame input sized
by its rows, :func:`collects_whole`); a tick within that runs in the driver, a larger one
is first rehearsed on a sample in the driver (an operator that needs Spark declines
there, before the job) and then runs as one Spark job. Either way the tick's state
batches and arrangement runs are written before the pipeline commits it
(:meth:`~.pipeline.Pipeline._commit`), so a tick that fails leaves files no manifest
names. The first tick of a pipeline builds its state the same way, with all input as the
delta, and so does a later tick for the state nodes of a view added or redefined since,
with all retained input and the tick's delta as theirs (:meth:`ArrangedTicks.missing`);
:meth:`ArrangedTicks.build` builds arrangements in bulk from batches the DataFrame
evaluator wrote.
"""
from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial, reduce
from typing import TYPE_CHECKING, AbstractSet, Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import inheritable_thread_target
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from ..circuit.operators import WEIGHT, GroupDiff, Integral, Operator, Partials, WindowDiff, walk
from ..process import fan_out, map_all, threads
from .arrow import kernels
from .spark import tasks, zsets
from .arranged import ArrangedTick
from .plan import NotArranged, Plan, Spec
from .storage.arrangement import BUILT_DDL, Arrangement, Run, buckets_for
from .storage.arrangement import build as build_runs
from .circuit import View
from .on_dataframes import change
from .storage.state import Batch, batch_column, batch_dir
from .ticks import Changes, NodeFailed, State, TickStats, data_error

if TYPE_CHECKING:
    from datetime import datetime

    from .pipeline import Pipeline

#: a tick takes the arranged path in the driver when its inputs have at most this many rows
#: in all, of at most :data:`DRIVER_BYTES` as Arrow: the kernels run at about 2M rows a
#: second there, while a Spark job costs most of a second before its tasks do any work
#: (a local session's two cores do a tick of 1M rows about 3x faster in the driver)
ARRANGED_ROWS = 1_000_000
DRIVER_BYTES = 256 << 20
#: a DataFrame input Spark estimates at most this large, or made of data from the driver's
#: memory, is collected whole; any other (a large table, an RDD over files) through a
#: limit, one row past the room left (a limit's exchange costs a stage)
ARRANGED_BYTES = 64 << 20
#: a DataFrame input Spark estimates larger than this (its files, as stored) goes to Spark
#: tasks without a fetch through a limit first: that fetch would scan it once more only to
#: find it too large for the driver
FETCH_BYTES = 4 * DRIVER_BYTES
#: rows of each input a tick for Spark tasks is first rehearsed on in the driver
REHEARSAL_ROWS = 1_000
#: batches of at most this many bytes in all are arranged in the driver, not by a Spark job
SMALL_BUILD_BYTES = 8 << 20


def merge_arrow(state: State, table: pa.Table) -> pa.Table:
    """:func:`.on_dataframes.merge` in Arrow: a state's batches as one."""
    if isinstance(state, Integral) and state.key is not None:
        return kernels.sum_by(table, state.key)
    return kernels.consolidate(table)


def estimated_bytes(df: DataFrame) -> int:
    """Spark's estimate of a DataFrame's size (exact for local data; a scan's files as
    stored; unbounded for an RDD)."""
    size = df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()
    return size if isinstance(size, int) else int(size.toString())


def collects_whole(df: DataFrame) -> bool:
    """Whether a DataFrame input may be collected into the driver without a limit: Spark
    estimates it at most :data:`ARRANGED_BYTES` (exact for local data), or each of its
    leaves is an RDD parallelized from the driver's memory, which is what
    ``spark.createDataFrame`` of Python rows makes (its estimate is unbounded)."""
    if estimated_bytes(df) <= ARRANGED_BYTES:
        return True
    leaves = df._jdf.queryExecution().optimizedPlan().collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        kind = leaf.getClass().getSimpleName()
        if kind == "LocalRelation":
            continue
        if kind != "LogicalRDD":
            return False
        lineage = [leaf.rdd()]
        while lineage:
            rdd = lineage.pop()
            deps = rdd.dependencies()
            if deps.size() == 0 and rdd.getClass().getSimpleName() != "ParallelCollectionRDD":
                return False
            lineage += [deps.apply(j).rdd() for j in range(deps.size())]
    return True


@dataclass
class Stored:
    """A tick's state deltas made in the driver and written (:meth:`ArrangedTicks._store`):
    not yet committed."""
    tables: dict[str, pa.Table | None]
    batches: dict[str, Batch]
    arrangements: dict[str, dict[tuple[str, ...], Arrangement]]
    computed: float  # perf_counter when the last delta was made: what is after is writing


@dataclass
class Built:
    """State nodes a tick built from all retained input (a view added or redefined since
    the last commit): their batches and arrangements, written but not committed, and
    their deltas as the driver holds them (when built there)."""

    written: dict[str, list[Batch]]
    arrangements: dict[str, dict[tuple[str, ...], Arrangement]]
    tables: dict[str, pa.Table | None]
    in_tasks: dict[str, float] = field(default_factory=dict)  # as :attr:`.TickStats.in_tasks`
    seconds: float = 0.0

    def into(self, written: dict[str, list[Batch]], arrangements: dict[str, dict[tuple[str, ...], Arrangement]],
             tables: dict[str, pa.Table | None]) -> None:
        """Add what was built to the rest of the tick's, before its commit."""
        written |= self.written
        arrangements |= self.arrangements
        tables |= self.tables


def _live(states: Sequence[State], aside: AbstractSet[str], built: Built | None) -> list[State]:
    """The state nodes a tick computes: not set ``aside``, not ``built`` already."""
    return [s for s in states if s.id not in aside and (built is None or s.id not in built.written)]


class ArrangedTicks:
    """The ticks of a :class:`~.pipeline.Pipeline` that run on its arrangements."""

    def __init__(self, pipe: Pipeline):
        self.pipe = pipe  # the commit the ticks end with
        self.spark, self.store, self.circuit = pipe.spark, pipe.store, pipe.circuit
        self._task_parts: dict[int, list[int]] = {}  # per task count, the part values reaching each
        #: why an operator of the circuit cannot run in Spark tasks (found by a tick that tried)
        self._not_in_tasks: str | None = None
        self._plan: Plan | NotArranged | None = None  # see :meth:`plan`

    def circuit_changed(self) -> None:
        self._not_in_tasks = None
        self._plan = None

    def plan(self) -> Plan | None:
        """The circuit's arranged form, or None when an operator has none
        (:attr:`unplanned` says which; found once per circuit)."""
        if self._plan is None:
            try:
                if self.store.runs is None:
                    raise NotArranged(f"pyarrow has no file system for {self.store.fs.root}")
                c = self.circuit
                keep = {v.state.id for v in c.views.values()} | {
                    c.source_state(n).id for n in c.sources if n not in c.expiring}
                zone = self.spark.conf.get("spark.sql.session.timeZone") or "UTC"
                self._plan = Plan(c.states(), c.same_state(), c.schema_of, c.types_of, zone, keep,
                                  partial(zsets.midnights, self.spark, zone))
                for source, key in c.indexes:
                    if source in c.sources:
                        self._plan.need(c.source_state(source).id, key)
            except NotArranged as e:
                self._plan = e
        return self._plan if isinstance(self._plan, Plan) else None

    @property
    def unplanned(self) -> str | None:
        """Why the circuit has no arranged form (None: it has one, or it was not asked)."""
        return str(self._plan) if isinstance(self._plan, NotArranged) else None

    def arrangements(self, plan: Plan, fetched: Mapping[str, pa.Table] | None,
                     frames: Mapping[str, DataFrame | None], arrow: Mapping[str, pa.Table]
                     ) -> dict[str, dict[tuple[str, ...], Arrangement]]:
        """The arrangements the tick reads and appends to: the committed ones, or on the
        first tick every one the plan needs, empty (:meth:`_empty`), sized
        by this tick's input (a DataFrame input counted by a job)."""
        if self.store.tick > 0:
            return self.store.arrangements
        if fetched is not None:
            rows = {source: t.num_rows for source, t in fetched.items()}
        else:
            rows = {source: t.num_rows for source, t in arrow.items()}
            rows.update({source: df.count() for source, df in frames.items() if df is not None})
        return self._empty(plan, rows)

    def _empty(self, plan: Plan, rows: Mapping[str, int], nodes_rows: Mapping[str, int] | None = None
               ) -> dict[str, dict[tuple[str, ...], Arrangement]]:
        """Every arrangement the plan needs, empty, with buckets for the ``rows`` (per
        source, or per node: ``nodes_rows``) of the inputs its node reads: a small dimension
        joined to a large fact keeps one bucket (a tick writes a run per touched bucket, so
        spare buckets cost files and merges)."""
        given = {self.circuit.catalog[source].id: n for source, n in rows.items()} | dict(nodes_rows or {})
        nodes = {op.id: op for op in walk(*self.circuit.roots())}
        out: dict[str, dict[tuple[str, ...], Arrangement]] = {}
        for spec in plan.specs.values():
            read = sum(given.get(op.id, 0) for op in walk(nodes[spec.node]))
            out.setdefault(spec.node, {})[spec.key] = Arrangement(spec.node, spec.key, spec.additive,
                                                                  buckets_for(read))
        return out

    def missing(self, plan: Plan, arranged: Mapping[str, dict[tuple[str, ...], Arrangement]], aside: AbstractSet[str],
                frames: Mapping[str, DataFrame | None], arrow: Mapping[str, pa.Table],
                fetched: Mapping[str, pa.Table], whole: bool, clock: datetime | None
                ) -> tuple[dict[str, dict[tuple[str, ...], Arrangement]], Built | None]:
        """What the last commit lacks, built on arrangements after the first tick: an
        arrangement a new view needs of a node already kept (from that node's batches),
        and the state nodes of views added or redefined since (not ``aside``), from all
        the retained input and this tick's delta, as a pipeline's first tick builds its
        state (:meth:`backfill`). The arrangements the rest of the tick reads, and what
        was built."""
        if self.store.tick == 0:
            return dict(arranged), None
        started = time.perf_counter()
        tick = self.store.tick + 1
        new = [s for s in self.circuit.states() if s.id not in aside and not self.store.has(s.id)]
        fresh = {s.id for s in new}
        out = {node: dict(arrs) for node, arrs in arranged.items()}
        lacking = [spec for spec in plan.specs.values() if spec.node not in fresh and spec.node not in aside
                   and spec.key not in out.get(spec.node, {})]
        for spec, arr in zip(lacking, self._of_batches(lacking, {}, tick)):
            out.setdefault(spec.node, {})[spec.key] = arr
        built = self.backfill(plan, new, frames, arrow, fetched, whole, clock, tick) if new else None
        if built is not None:
            built.seconds = time.perf_counter() - started
        return out, built

    def backfill(self, plan: Plan, new: Sequence[State], frames: Mapping[str, DataFrame | None],
                 arrow: Mapping[str, pa.Table], fetched: Mapping[str, pa.Table], whole: bool,
                 clock: datetime | None, tick: int) -> Built:
        """The ``new`` state nodes seeded with all retained input and this tick's delta as
        one delta, from empty state (a row this tick deletes is never computed on): in the
        driver when that input is small and the tick's is held there whole (``whole``:
        ``fetched``), else in Spark tasks."""
        c = self.circuit
        unbuilt = [(v.name, v.state) for v in c.views.values() if not self.store.has(v.state.id)]
        self.pipe._retention.check(plan, unbuilt, {c.source_state(n).id: n for n in c.sources}, clock)
        by_input = {c.catalog[n].id: n for n in c.sources}

        def sources(stop: AbstractSet[str] = frozenset()) -> tuple[list[str], dict[str, list[Batch]]]:
            """The sources the new nodes read (not below ``stop``), and their batches."""
            read = sorted({by_input[op.id] for op in walk(*new, stop=stop) if op.id in by_input})
            return read, {n: list(s.batches) if (s := self.store.spines.get(c.source_state(n).id)) else []
                          for n in read}

        given: dict[str, DataFrame] = {}
        held: dict[str, pa.Table] | None = None  # the retained input in the driver, as Arrow
        if self.pipe.placement != "tasks" and whole:
            seeds = self._seeds(new, fetched)
            read, spines = sources(seeds.keys())
            if sum(b.bytes for n in read for b in spines[n]) <= ARRANGED_BYTES:
                held = {n: self._history(n, spines[n], fetched.get(n)) for n in read}
                if sum(t.num_rows for t in (*held.values(), *seeds.values())) <= ARRANGED_ROWS:
                    empty = self._empty(plan, {n: t.num_rows for n, t in held.items()},
                                        {node: t.num_rows for node, t in seeds.items()})
                    assert self.store.runs is not None
                    run = ArrangedTick(plan, held, empty, self.store.runs, self.spark, first=True)
                    run.given(seeds)
                    done = self._store(tick, run, new, {s.id: c.stored_schema(s) for s in new},
                                       {s.id: empty.get(s.id, {}) for s in new})
                    return Built({s.id: [done.batches[s.id]] if s.id in done.batches else [] for s in new},
                                 done.arrangements, done.tables)
            if seeds:  # too large for the driver after all: the tasks read the views' sources
                held = None
        if held is None:  # the retained input as Spark reads it, beside this tick's delta
            read, spines = sources()
            deltas = fetched if whole else arrow
            held = {n: deltas[n] for n in read if n in deltas and deltas[n].num_rows}
            for n in read:
                parts = ([Batch.open_many(self.spark, spines[n])] if spines[n] else []) + (
                    [df] if not whole and (df := frames.get(n)) is not None else [])
                # rows this tick deletes leave the retained input before it is computed on
                # (a view set aside on them is rebuilt as they go): consolidated by Spark
                deletes = bool(spines[n]) and n in held and bool(pc.any(pc.less(held[n].column(WEIGHT), 0)).as_py())
                if deletes:
                    parts.append(zsets.arrow_frame(self.spark, self.circuit.conform_arrow(n, held.pop(n))))
                if parts:
                    given[n] = reduce(DataFrame.unionByName, parts)
                    if deletes:
                        given[n] = zsets.consolidate(given[n])
        rows = {n: 0 for n in read}
        for n, t in held.items():
            rows[n] += t.num_rows
        for n, df in given.items():
            rows[n] += df.count()
        empty = self._empty(plan, rows)
        written, arrangements, seconds = self._job(plan, empty, list(new), given, held, tick, first=True)
        return Built(written, arrangements, {}, in_tasks=seconds)

    def _seeds(self, new: Sequence[State], fetched: Mapping[str, pa.Table]) -> dict[str, pa.Table]:
        """The delta of each view the ``new`` nodes read whose state is committed and whose
        sources have no change this tick, over all history: that state's rows. A new view
        over other views is then built from their contents, not by computing them again
        from their sources (their windows, joins and aggregates over all retained input)."""
        c = self.circuit
        fresh = {s.id for s in new}
        below = {op.id for op in walk(*new)}
        by_input = {c.catalog[n].id: n for n in c.sources}
        out: dict[str, pa.Table] = {}
        for view in c.views.values():
            delta, state = view.state.input, view.state
            if delta.id not in below or state.id in fresh or not self.store.has(state.id):
                continue
            under = list(walk(delta))
            changed = (fetched.get(by_input[op.id]) for op in under if op.id in by_input)
            if any(op.id in fresh for op in under) or any(t is not None and t.num_rows for t in changed):
                continue
            batches = list(self.store.spines[state.id].batches)
            stored = zsets.arrow_schema(zsets.with_weight(c.stored_schema(state)))
            out[delta.id] = self.store.read_arrow(batches) if batches else stored.empty_table()
        return out

    def _history(self, source: str, batches: list[Batch], delta: pa.Table | None) -> pa.Table:
        """A source's retained input (its batches) and this tick's ``delta`` as one table,
        consolidated with the delta: a row this tick deletes is not there to compute on
        (a view set aside on it is rebuilt as the row goes)."""
        parts = ([self.store.read_arrow(batches)] if batches else []) + ([delta] if delta is not None else [])
        if not parts:
            return zsets.arrow_schema(zsets.with_weight(self.circuit.sources[source])).empty_table()
        table = pa.concat_tables([self.circuit.conform_arrow(source, t) for t in parts])
        return kernels.consolidate(table) if len(parts) > 1 else table

    def fetch(self, frames: Mapping[str, DataFrame | None], arrow: Mapping[str, pa.Table]
              ) -> tuple[dict[str, pa.Table], bool, set[str]]:
        """Every input as an Arrow table in the driver, and True; or, when the tick has more
        than :data:`ARRANGED_ROWS` rows in all (or more than :data:`DRIVER_BYTES`, or an
        input Spark estimates past :data:`FETCH_BYTES`), the first rows of the inputs
        fetched so far (a rehearsal's sample, :meth:`_rehearse`), and False. A DataFrame input is sized by
        its rows, not by Spark's size estimate (:func:`collects_whole`). Last, the
        DataFrame inputs fetched with all their rows."""
        out = dict(arrow)
        room = ARRANGED_ROWS - sum(t.num_rows for t in out.values())
        given = {source: df for source, df in frames.items() if df is not None}
        complete = [source for source, df in given.items() if collects_whole(df)]
        collect = inheritable_thread_target(self.spark)(lambda source: zsets.collect_arrow(given[source]))
        # side by side: a small input's job is mostly the scheduler's latency, not work
        for source, table in zip(complete, map_all("collect", collect, complete)):
            room -= table.num_rows
            out[source] = self.circuit.conform_arrow(source, table)
        for source, df in given.items():
            if room < 0:
                break
            if source not in out:
                if estimated_bytes(df) > FETCH_BYTES:
                    room = -1
                    break
                table = zsets.collect_arrow(df.limit(room + 1))
                room -= table.num_rows
                out[source] = self.circuit.conform_arrow(source, table)
        return out, room >= 0 and sum(t.nbytes for t in out.values()) <= DRIVER_BYTES, set(complete)

    def in_driver(self, plan: Plan, arranged: Mapping[str, dict[tuple[str, ...], Arrangement]],
                  inputs: dict[str, pa.Table], clock: datetime | None,
                  before_commit: Callable[[int, Changes], None] | None, started: float,
                  aside: AbstractSet[str], skip: Mapping[str, str], built: Built | None = None) -> Changes:
        """One tick on arrangements: kernels in the driver over the touched keys only. The
        state nodes ``aside`` (of the views in ``skip``) are left as they are; those
        ``built`` this tick are committed as they were built."""
        fetched = time.perf_counter()
        states = self.circuit.states()
        live = _live(states, aside, built)
        assert self.store.runs is not None
        run = ArrangedTick(plan, inputs, arranged, self.store.runs, self.spark, first=self.store.tick == 0)
        by_id = {s.id: s for s in live}
        stored = self.circuit.stored_schema
        expired: dict[str, int] = {}

        def cut(tables: dict[str, pa.Table | None]) -> None:
            expired.update(self.pipe._retention.cut_arrow(plan, tables, clock, list(by_id), self.store,
                                                          lambda node: zsets.arrow_schema(stored(by_id[node]))))

        tick = self.store.tick + 1
        done = self._store(tick, run, live, {s.id: stored(s) for s in states}, arranged,
                           set(self.pipe._retention.thresholds(plan, clock)), cut)
        tables, evaluated = done.tables, done.computed
        written = {s.id: [done.batches[s.id]] if s.id in done.batches else [] for s in states}
        if built is not None:
            built.into(written, done.arrangements, tables)
        changes = self._changes(tables, written)
        outputs, committing = self.pipe._commit(tick, states, written, done.arrangements, changes,
                                                self.pipe._meta(clock, expired, skip), before_commit)
        finished = time.perf_counter()
        building = built.seconds if built is not None else 0.0
        self.pipe.last_tick = TickStats("arranged", sum(t.num_rows for t in inputs.values()),
                                        {"spark": fetched - started - building + run.spark_seconds,
                                         **({"build": building} if built is not None else {}),
                                         "driver": evaluated - fetched - run.spark_seconds,
                                         "write": outputs - evaluated, "outputs": committing - outputs,
                                         "commit": finished - committing}, rows_read=run.rows_read,
                                        in_tasks=built.in_tasks if built is not None else {})
        return changes

    def _store(self, tick: int, run: ArrangedTick, nodes: Sequence[State], schemas: Mapping[str, StructType],
               arranged: Mapping[str, Mapping[tuple[str, ...], Arrangement]],
               held: AbstractSet[str] = frozenset(),
               cut: Callable[[dict[str, pa.Table | None]], None] | None = None) -> Stored:
        """The deltas of the state ``nodes`` as ``run`` computes them, each written from the
        driver as soon as it is made: a batch per node (:meth:`.StateStore.write_arrow`)
        and new runs of each of its ``arranged`` arrangements, beside the kernels making
        the next node's (encoding Parquet, hashing and sorting release the GIL: most of a
        large tick's writing). ``cut`` changes the deltas of the ``held`` nodes (rows that
        leave the state as the time moves) once all are made; those are written after it.
        Nothing is committed."""
        runs = self.store.runs
        assert runs is not None
        tables: dict[str, pa.Table | None] = {}
        batches: dict[str, Future[dict[str, Batch]]] = {}
        appended: dict[str, dict[tuple[str, ...], Future[Arrangement]]] = {}
        with fan_out("write") as submit:
            def write(node: str) -> None:
                t = tables[node]
                batches[node] = submit(self.store.write_arrow, tick, {node: t}, {node: schemas[node]})
                if node in arranged:
                    appended[node] = {key: submit(runs.append, arr, tick, t)
                                      for key, arr in arranged[node].items()}

            for state in nodes:
                tables[state.id] = run.state_delta(state)
                if state.id not in held:
                    write(state.id)
            if cut is not None:
                cut(tables)
            for node in held & tables.keys():
                write(node)
            computed = time.perf_counter()
            return Stored(tables, {node: b for f in batches.values() for node, b in f.result().items()},
                          {node: {key: f.result() for key, f in keys.items()} for node, keys in appended.items()},
                          computed)

    def _changes(self, tables: Mapping[str, pa.Table | None], written: Mapping[str, list[Batch]]) -> Changes:
        """The views' changes: from the Arrow tables the driver made of their deltas, else
        from the batches the tick wrote of them."""
        def change_of(view: View) -> DataFrame:
            table = tables.get(view.state.id)
            if table is not None and table.num_rows:
                return zsets.arrow_frame(self.spark, table)
            return change(self.spark, view, written.get(view.state.id, []) if table is None else [])

        def in_driver(view: View) -> pa.Table | None:
            """A view's change as Arrow: None where the driver does not hold it (its state
            was set aside, or built in tasks); empty where its state had no delta."""
            if view.state.id not in tables:
                return None
            table = tables[view.state.id]
            return table if table is not None else zsets.arrow_schema(zsets.with_weight(view.schema)).empty_table()

        views = self.circuit.views.values()
        return Changes({v.name: partial(change_of, v) for v in views},
                       {v.name: t for v in views if (t := in_driver(v)) is not None})

    def in_tasks(self, plan: Plan, arrangements: Mapping[str, dict[tuple[str, ...], Arrangement]],
                 inputs: Mapping[str, DataFrame | None], arrow: Mapping[str, pa.Table],
                 fetched: Mapping[str, pa.Table], clock: datetime | None,
                 before_commit: Callable[[int, Changes], None] | None, started: float,
                 aside: AbstractSet[str], skip: Mapping[str, str], built: Built | None = None) -> Changes:
        """One tick on arrangements in Spark tasks (:mod:`.tasks`): a delta too large for
        the driver, one Spark job (:meth:`_job`). The state nodes ``aside`` are left as
        they are; those ``built`` this tick are committed as they were built."""
        if self._not_in_tasks is not None:
            raise NotArranged(self._not_in_tasks)
        states = self.circuit.states()
        live = _live(states, aside, built)
        tick = self.store.tick + 1
        retention = self.pipe._retention
        by_id = {s.id: s for s in live}
        thresholds = {node: cut for node, cut in retention.thresholds(plan, clock).items() if node in by_id}
        # rows that leave as the time moves: a task stores none of its delta's, and the
        # driver retracts the stored ones the window left since the last tick
        gone = {node: g for node, (t, _) in thresholds.items() if (g := retention.gone(
            plan, node, t, self.store, zsets.arrow_schema(self.circuit.stored_schema(by_id[node])))) is not None}
        written, arranged, task_seconds = self._job(
            plan, arrangements, live, inputs, arrow, tick, first=self.store.tick == 0, sampled=fetched,
            cuts={node: (plan.expiry[node].column, t) for node, (t, _) in thresholds.items()}, gone=gone)
        computed = time.perf_counter()
        written = {s.id: written.get(s.id, []) for s in states}
        tables: dict[str, pa.Table | None] = {}
        if built is not None:
            built.into(written, arranged, tables)
            task_seconds = {p: task_seconds.get(p, 0.0) + built.in_tasks.get(p, 0.0) for p in tasks.PHASES}
        changes = self._changes(tables, written)
        expired = retention.expired | {node: at for node, (_, at) in thresholds.items()}
        outputs, committing = self.pipe._commit(tick, states, written, arranged, changes,
                                                self.pipe._meta(clock, expired, skip), before_commit)
        done = time.perf_counter()
        self.pipe.last_tick = TickStats("tasks", sum(t.num_rows for t in arrow.values()),
                                        {"spark": computed - started, "outputs": committing - outputs,
                                         "commit": done - committing}, in_tasks=task_seconds)
        return changes

    def _job(self, plan: Plan, arrangements: Mapping[str, dict[tuple[str, ...], Arrangement]],
             live: Sequence[State], frames: Mapping[str, DataFrame | None], held: Mapping[str, pa.Table],
             tick: int, first: bool, sampled: Mapping[str, pa.Table] | None = None,
             cuts: Mapping[str, tuple[str, pa.Scalar]] | None = None, gone: Mapping[str, pa.Table] | None = None
             ) -> tuple[dict[str, list[Batch]], dict[str, dict[tuple[str, ...], Arrangement]], dict[str, float]]:
        """The deltas of the ``live`` state nodes over the sources' rows (by source: in
        ``frames`` for Spark, ``held`` in the driver, or both) as one Spark job
        (:mod:`.tasks`), first rehearsed (:meth:`_rehearse`, on ``sampled`` rows too): the
        batches and arrangement runs it wrote (not committed), and its tasks' seconds per
        phase. ``cuts``: per node, the rows of its delta not stored (:func:`.expiry.kept`);
        ``gone``: per node, rows the driver adds to its delta. A job that fails leaves
        files no manifest names; one that fails on a data error names the node that met it
        (:class:`.NodeFailed`). A Map or Filter that Arrow declines on the tick's rows
        (:class:`.NeedsSpark`) is Spark's between stages, and the job runs again."""
        given = {n: df for n, df in frames.items() if df is not None}
        assert self.store.runs is not None
        ported, ops = tasks.portable(plan, live)
        directory = batch_dir(tick)
        width = self.spark.sparkContext.defaultParallelism
        if width not in self._task_parts:
            self._task_parts[width] = tasks.spark_parts(self.spark, width)
        c = self.circuit
        sources = {c.catalog[n].id: df for n, df in given.items()}
        tables = {c.catalog[n].id: t for n, t in held.items() if t.num_rows}
        schemas = {c.catalog[n].id: zsets.arrow_schema(zsets.with_weight(c.sources[n])) for n in c.sources}
        ansi, legacy_stats = zsets.ansi(self.spark), zsets.legacy_stats(self.spark)
        sample = self._sample(given, {**(sampled or {}), **held})
        by_spark: set[str] = set()  # Maps and Filters Arrow declined on this tick's rows
        while True:
            layout = tasks.layout(plan, live, by_spark)
            ctx = tasks.Context(ported, layout, ops, dict(arrangements), self.store.runs.root, tick, directory,
                                schemas, self._task_parts[width], ansi, tasks.frame_schema(plan, layout, ops),
                                first, dict(cuts or {}), legacy_stats)
            try:
                self._rehearse(plan, arrangements, live, sample, [ops[n] for n in layout.spark], ctx)
                files, seconds = tasks.run(ctx, self.spark, sources, tables, width)
                for node, table in (gone or {}).items():
                    files += tasks.write(ctx, self.store.runs, node, table)
                break
            except BaseException as e:
                failure: BaseException = e
                if isinstance(e, Exception) and data_error(e) is not None and layout.spark:
                    try:  # which of the nodes Spark computes between stages met it
                        found = tasks.failing(ctx, self.spark, sources, tables, width)
                        if found is not None:
                            failure = NodeFailed(*found)
                    except Exception as probe:  # a node Arrow declines met first
                        failure = probe
                self.store.fs.delete(self.store.fs.path(directory))
                self.store.collect_garbage()
                rows_of = tasks.needs_spark(failure)  # a node Arrow declined on this tick's rows
                if rows_of is not None and rows_of not in by_spark:
                    by_spark.add(rows_of)
                    continue
                if failure is not e:
                    raise failure from e
                why = tasks.declined(e)
                if why is not None:  # an operator a task cannot run: so for every later tick too
                    if not first and not tasks.of_rows(e):  # (not a first tick's, nor one of its rows')
                        self._not_in_tasks = why
                    raise NotArranged(why) from None
                raise
        sizes: dict[str, int] = {}
        new: dict[str, dict[tuple[str, ...], dict[int, list[Run]]]] = {}
        for f in files:
            if "batch" in f:
                sizes[f["node"]] = sizes.get(f["node"], 0) + f["bytes"]
            else:
                new.setdefault(f["node"], {}).setdefault(tuple(f["key"]), {}).setdefault(
                    f["bucket"], []).append(Run(f["path"], f["rows"]))
        written = {s.id: [Batch(self.store.fs.path(directory, f"_node={s.id}"), sizes[s.id], batch_column(s.id),
                                c.stored_schema(s).json())] if s.id in sizes else [] for s in live}
        return written, {s.id: {key: arr.with_runs(new.get(s.id, {}).get(key, {}))
                                for key, arr in arrangements.get(s.id, {}).items()} for s in live}, seconds

    def _sample(self, frames: Mapping[str, DataFrame], held: Mapping[str, pa.Table]) -> dict[str, pa.Table]:
        """The first :data:`REHEARSAL_ROWS` rows of each source (of those ``held`` in
        Arrow, or of its DataFrame, fetched now), for :meth:`_rehearse`."""
        sample = {n: t.slice(0, REHEARSAL_ROWS) for n, t in held.items()}
        return sample | {n: self.circuit.conform_arrow(n, zsets.collect_arrow(df.limit(REHEARSAL_ROWS)))
                         for n, df in frames.items() if n not in held}

    def _rehearse(self, plan: Plan, arrangements: Mapping[str, dict[tuple[str, ...], Arrangement]],
                  live: Sequence[State], sample: Mapping[str, pa.Table], between: Sequence[Operator],
                  ctx: tasks.Context) -> None:
        """Run the operators in the driver as a task of ``ctx`` would (no Spark) over the
        ``sample`` of the sources (:meth:`_sample`): an operator that needs Spark declines
        here, before the job moves the whole tick (a decline in the tasks costs the job).
        The Maps, Filters and partial sums Spark computes ``between`` stages (in the order
        of the stages) are computed by Spark; of a window or aggregate Spark computes there,
        only the retraction of the touched groups' rows (its new rows would cost a Spark job
        here: the job gives them)."""
        assert self.store.runs is not None
        run = ArrangedTick(plan, sample, arrangements, self.store.runs, None, ansi=ctx.ansi, bounded=False,
                           legacy_stats=ctx.legacy_stats)
        spark = ArrangedTick(plan, {}, arrangements, self.store.runs, self.spark, ansi=ctx.ansi)
        for op in between:
            try:
                if isinstance(op, (WindowDiff, GroupDiff)):  # its rows gathered as a task would; its new
                    _, gone = run.gathered(op)  # rows are left to the job (a window over them is a Spark job)
                    run.given({op.id: gone})
                else:
                    value = run.value(op.input)  # type: ignore[attr-defined]
                    if value is not None:
                        value = spark.partials(op, value) if isinstance(op, Partials) else spark.row_wise(op, value)
                    run.given({op.id: value})
            except Exception as e:
                if (why := data_error(e)) is None:
                    raise
                raise NodeFailed(op.id, why) from e
        for s in live:
            run.state_delta(s)

    def build(self, plan: Plan, written: dict[str, list[Batch]], tick: int
              ) -> dict[str, dict[tuple[str, ...], Arrangement]]:
        """The arrangements the plan needs, with this tick's batches appended by a bulk
        build (:meth:`_of_batches`)."""
        specs = list(plan.specs.values())
        out: dict[str, dict[tuple[str, ...], Arrangement]] = {}
        for spec, arr in zip(specs, self._of_batches(specs, written, tick)):
            out.setdefault(spec.node, {})[spec.key] = arr
        return out

    def _of_batches(self, specs: Sequence[Spec], written: Mapping[str, list[Batch]], tick: int) -> list[Arrangement]:
        """The arrangements ``specs``, with the batches ``written`` this tick appended; one
        not built yet is built from the node's whole spine. In the driver when the batches
        are small, else one Spark job per arrangement, all submitted at once (small ones
        finish in the shadow of the large one)."""
        def one(spec: Spec) -> Arrangement:
            arr = self.store.arrangements.get(spec.node, {}).get(spec.key)
            batches = list(written.get(spec.node, []))
            if arr is None:
                spine = self.store.spines.get(spec.node)
                batches = (list(spine.batches) if spine else []) + batches
            if not batches:
                return arr if arr is not None else Arrangement(spec.node, spec.key, spec.additive, buckets_for(0))
            if self.store.runs is not None and sum(b.bytes for b in batches) <= SMALL_BUILD_BYTES:
                table = self.store.read_arrow(batches)
                if arr is None:
                    arr = Arrangement(spec.node, spec.key, spec.additive, buckets_for(table.num_rows))
                return self.store.runs.append(arr, tick, table)
            if arr is None:
                size = Batch.open_many(self.spark, batches).count()  # from Parquet footers
                arr = Arrangement(spec.node, spec.key, spec.additive, buckets_for(size))
            frame = Batch.open_many(self.spark, batches)
            task = partial(build_runs, self.store.fs.root, arr, tick, zsets.arrow_schema(frame.schema))
            rows = frame.mapInArrow(task, BUILT_DDL).collect()
            new: dict[int, list[Run]] = {}
            for r in rows:
                new.setdefault(r["bucket"], []).append(Run(r["path"], r["rows"]))
            return arr.with_runs(new)

        with threads(max(1, len(specs)), "dbt-stream-build") as pool:
            return list(pool.map(one, specs))
