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
delta; :meth:`ArrangedTicks.build` builds arrangements in bulk from batches the DataFrame
evaluator wrote.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, AbstractSet, Callable, Mapping, Sequence

import pyarrow as pa
from pyspark import inheritable_thread_target
from pyspark.sql import DataFrame

from ..circuit.operators import GroupDiff, walk
from ..sql.temporal import CLOCK
from . import tasks, zsets
from .arranged import ArrangedTick, NotArranged, Plan, Spec
from .arrangement import BUILT_DDL, Arrangement, Run, buckets_for
from .arrangement import build as build_runs
from .circuit import View
from .on_dataframes import change
from .state import Batch, batch_column, batch_dir
from .ticks import Changes, State, TickStats

if TYPE_CHECKING:
    from datetime import datetime

    from .pipeline import Pipeline

#: a tick takes the arranged path in the driver when its inputs have at most this many rows in all
ARRANGED_ROWS = 100_000
#: a DataFrame input Spark estimates at most this large, or made of data from the driver's
#: memory, is collected whole; any other (a large table, an RDD over files) through a
#: limit, one row past the room left (a limit's exchange costs a stage)
ARRANGED_BYTES = 64 << 20
#: rows of each input a tick for Spark tasks is first rehearsed on in the driver
REHEARSAL_ROWS = 1_000


def collects_whole(df: DataFrame) -> bool:
    """Whether a DataFrame input may be collected into the driver without a limit: Spark
    estimates it at most :data:`ARRANGED_BYTES` (exact for local data), or each of its
    leaves is an RDD parallelized from the driver's memory, which is what
    ``spark.createDataFrame`` of Python rows makes (its estimate is unbounded)."""
    plan = df._jdf.queryExecution().optimizedPlan()
    size = plan.stats().sizeInBytes()
    if (size if isinstance(size, int) else int(size.toString())) <= ARRANGED_BYTES:
        return True
    leaves = plan.collectLeaves()
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


class ArrangedTicks:
    """The ticks of a :class:`~.pipeline.Pipeline` that run on its arrangements."""

    def __init__(self, pipe: Pipeline):
        self.pipe = pipe  # the commit the ticks end with
        self.spark, self.store, self.circuit = pipe.spark, pipe.store, pipe.circuit
        self._task_parts: dict[int, list[int]] = {}  # per task count, the part values reaching each
        #: why an operator of the circuit cannot run in Spark tasks (found by a tick that tried)
        self._not_in_tasks: str | None = None

    def circuit_changed(self) -> None:
        self._not_in_tasks = None

    def ready(self, plan: Plan) -> bool:
        """Whether every state node exists and every arrangement the plan needs is built."""
        return self.store.tick > 0 and not self.pipe.pending and all(
            spec.key in self.store.arrangements.get(spec.node, {}) for spec in plan.specs.values())

    def first(self, skip: Mapping[str, str]) -> bool:
        """Whether this is the pipeline's first tick, none of its views reading the time:
        then the operators on arrangements build the state, with all input as the delta."""
        return self.store.tick == 0 and not skip and CLOCK not in self.circuit.sources

    def arrangements(self, plan: Plan, fetched: Mapping[str, pa.Table] | None,
                     frames: Mapping[str, DataFrame | None], arrow: Mapping[str, pa.Table]
                     ) -> dict[str, dict[tuple[str, ...], Arrangement]]:
        """The arrangements the tick reads and appends to: the committed ones, or on the
        first tick (:meth:`first`) every one the plan needs, empty, with buckets for the
        rows of the sources its node reads this tick (a DataFrame input counted by a job):
        a small dimension joined to a large fact keeps one bucket (a tick writes a run per
        touched bucket, so spare buckets cost files and merges)."""
        if self.store.tick > 0:
            return self.store.arrangements
        if fetched is not None:
            rows = {source: t.num_rows for source, t in fetched.items()}
        else:
            rows = {source: t.num_rows for source, t in arrow.items()}
            rows.update({source: df.count() for source, df in frames.items() if df is not None})
        given = {self.circuit.catalog[source].id: n for source, n in rows.items()}
        nodes = {op.id: op for op in walk(*self.circuit.roots())}
        out: dict[str, dict[tuple[str, ...], Arrangement]] = {}
        for spec in plan.specs.values():
            read = sum(given.get(op.id, 0) for op in walk(nodes[spec.node]))
            out.setdefault(spec.node, {})[spec.key] = Arrangement(spec.node, spec.key, spec.additive,
                                                                  buckets_for(read))
        return out

    def fetch(self, frames: Mapping[str, DataFrame | None], arrow: Mapping[str, pa.Table]
              ) -> tuple[dict[str, pa.Table], bool, set[str]]:
        """Every input as an Arrow table in the driver, and True; or, when the tick has more
        than :data:`ARRANGED_ROWS` rows in all, the first rows of the inputs fetched so far
        (a rehearsal's sample, :meth:`_rehearse`), and False. A DataFrame input is sized by
        its rows, not by Spark's size estimate (:func:`collects_whole`). Last, the
        DataFrame inputs fetched with all their rows."""
        out = dict(arrow)
        room = ARRANGED_ROWS - sum(t.num_rows for t in out.values())
        given = {source: df for source, df in frames.items() if df is not None}
        complete = [source for source, df in given.items() if collects_whole(df)]
        collect = inheritable_thread_target(self.spark)(lambda source: given[source].toArrow())
        # side by side: a small input's job is mostly the scheduler's latency, not work
        with ThreadPoolExecutor(max(1, len(complete))) as pool:
            for source, table in zip(complete, pool.map(collect, complete)):
                room -= table.num_rows
                out[source] = self.circuit.conform_arrow(source, table)
        for source, df in given.items():
            if room < 0:
                break
            if source not in out:
                table = df.limit(room + 1).toArrow()
                room -= table.num_rows
                out[source] = self.circuit.conform_arrow(source, table)
        return out, room >= 0, set(complete)

    def in_driver(self, plan: Plan, arranged: Mapping[str, dict[tuple[str, ...], Arrangement]],
                  inputs: dict[str, pa.Table], clock: datetime | None,
                  before_commit: Callable[[int, Changes], None] | None, started: float,
                  aside: AbstractSet[str], skip: Mapping[str, str]) -> Changes:
        """One tick on arrangements: kernels in the driver over the touched keys only. The
        state nodes ``aside`` (of the views in ``skip``) are left as they are."""
        fetched = time.perf_counter()
        states = self.circuit.states()
        live = [s for s in states if s.id not in aside]
        assert self.store.runs is not None
        run = ArrangedTick(plan, inputs, arranged, self.store.runs, self.spark, first=self.store.tick == 0)
        tables = {s.id: run.state_delta(s) for s in live}
        by_id = {s.id: s for s in live}
        stored = self.circuit.stored_schema
        expired = self.pipe._retention.cut_arrow(plan, tables, clock, list(by_id), self.store,
                                                 lambda node: zsets.arrow_schema(stored(by_id[node])))
        evaluated = time.perf_counter()
        tick = self.store.tick + 1
        batches = self.store.write_arrow(tick, tables, {s.id: stored(s) for s in states})
        written = {s.id: [batches[s.id]] if s.id in batches else [] for s in states}
        runs = self.store.runs
        arrangements = {node: {key: runs.append(arr, tick, tables.get(node)) for key, arr in arrs.items()}
                        for node, arrs in arranged.items() if node in tables}
        changes = Changes({v.name: partial(self._change, v, tables.get(v.state.id))
                           for v in self.circuit.views.values()},
                          {v.name: t for v in self.circuit.views.values() if (t := tables.get(v.state.id)) is not None})
        outputs, committing = self.pipe._commit(tick, states, written, arrangements, changes,
                                                self.pipe._meta(clock, expired, skip), before_commit)
        done = time.perf_counter()
        self.pipe.last_tick = TickStats("arranged", sum(t.num_rows for t in inputs.values()),
                                        {"spark": fetched - started + run.spark_seconds,
                                         "driver": evaluated - fetched - run.spark_seconds,
                                         "write": outputs - evaluated, "outputs": committing - outputs,
                                         "commit": done - committing}, rows_read=run.rows_read)
        return changes

    def _change(self, view: View, table: pa.Table | None) -> DataFrame:
        """A view's change from the Arrow table a tick in the driver made of it."""
        if table is None or table.num_rows == 0:
            return change(self.spark, view, [])
        return self.spark.createDataFrame(table)

    def in_tasks(self, plan: Plan, arrangements: Mapping[str, dict[tuple[str, ...], Arrangement]],
                 inputs: Mapping[str, DataFrame | None], arrow: Mapping[str, pa.Table],
                 fetched: Mapping[str, pa.Table], clock: datetime | None,
                 before_commit: Callable[[int, Changes], None] | None, started: float,
                 aside: AbstractSet[str], skip: Mapping[str, str]) -> Changes:
        """One tick on arrangements in Spark tasks (:mod:`.tasks`): a delta too large for
        the driver, one Spark job. A job that fails leaves files no manifest names."""
        if self._not_in_tasks is not None:
            raise NotArranged(self._not_in_tasks)
        if self.pipe._retention.thresholds(plan, clock):
            raise NotArranged("rows leave the state as the time moves")
        states = self.circuit.states()
        live = [s for s in states if s.id not in aside]
        if self.store.tick == 0 and any(isinstance(op, GroupDiff) and not op.keys for op in walk(*live)):
            raise NotArranged("a keyless aggregate's first row (of no rows, maybe) is Spark's to give")
        frames = {self.circuit.catalog[n].id: df for n, df in inputs.items() if df is not None}
        tables = {self.circuit.catalog[n].id: t for n, t in arrow.items() if t.num_rows}
        assert self.store.runs is not None
        self._rehearse(plan, arrangements, live, inputs, {**fetched, **arrow})
        tick = self.store.tick + 1
        directory = batch_dir(tick)
        ported, ops = tasks.portable(plan, live)
        width = self.spark.sparkContext.defaultParallelism
        if width not in self._task_parts:
            self._task_parts[width] = tasks.spark_parts(self.spark, width)
        arranged = {s.id: arrangements.get(s.id, {}) for s in live}
        ctx = tasks.Context(ported, tasks.layout(plan, live), ops, arranged, self.store.runs.root, tick, directory,
                            {self.circuit.catalog[n].id: zsets.arrow_schema(zsets.with_weight(self.circuit.sources[n]))
                             for n in self.circuit.sources},
                            self._task_parts[width], zsets.ansi(self.spark))
        try:
            files, task_seconds = tasks.run(ctx, self.spark, frames, tables, width)
        except BaseException as e:
            self.store.fs.delete(self.store.fs.path(directory))
            self.store.collect_garbage()
            why = tasks.declined(e)
            if why is not None:  # an operator a task cannot run: so for every later tick too
                if self.store.tick > 0:  # (a first tick declines for its own reasons too)
                    self._not_in_tasks = why
                raise NotArranged(why) from None
            raise
        computed = time.perf_counter()
        sizes: dict[str, int] = {}
        new: dict[str, dict[tuple[str, ...], dict[int, list[Run]]]] = {}
        for f in files:
            if "batch" in f:
                sizes[f["node"]] = sizes.get(f["node"], 0) + f["bytes"]
            else:
                new.setdefault(f["node"], {}).setdefault(tuple(f["key"]), {}).setdefault(
                    f["bucket"], []).append(Run(f["path"], f["rows"]))
        written = {s.id: [Batch(self.store.fs.path(directory, f"_node={s.id}"), sizes[s.id], batch_column(s.id),
                                self.circuit.stored_schema(s).json())] if s.id in sizes else [] for s in states}
        arrangements = {node: {key: arr.with_runs(new.get(node, {}).get(key, {})) for key, arr in arrs.items()}
                        for node, arrs in arranged.items()}
        changes = Changes({v.name: partial(change, self.spark, v, written.get(v.state.id, []))
                           for v in self.circuit.views.values()})
        outputs, committing = self.pipe._commit(tick, states, written, arrangements, changes,
                                                self.pipe._meta(clock, dict(self.pipe._retention.expired), skip),
                                                before_commit)
        done = time.perf_counter()
        self.pipe.last_tick = TickStats("tasks", sum(t.num_rows for t in arrow.values()),
                                        {"spark": computed - started, "outputs": committing - outputs,
                                         "commit": done - committing}, in_tasks=task_seconds)
        return changes

    def _rehearse(self, plan: Plan, arrangements: Mapping[str, dict[tuple[str, ...], Arrangement]],
                  live: Sequence[State], inputs: Mapping[str, DataFrame | None],
                  held: Mapping[str, pa.Table]) -> None:
        """Run the operators in the driver as a task would (no Spark) over the first
        :data:`REHEARSAL_ROWS` rows of each input (of those ``held`` in Arrow, or fetched
        now): an operator that needs Spark declines here, before the job moves the whole
        tick (a decline in the tasks costs the job)."""
        sample = {n: t.slice(0, REHEARSAL_ROWS) for n, t in held.items()}
        sample |= {n: self.circuit.conform_arrow(n, df.limit(REHEARSAL_ROWS).toArrow())
                   for n, df in inputs.items() if df is not None and n not in held}
        assert self.store.runs is not None
        run = ArrangedTick(plan, sample, arrangements, self.store.runs, None, ansi=zsets.ansi(self.spark),
                           probe_rows=None)
        for s in live:
            run.state_delta(s)

    def build(self, plan: Plan, written: dict[str, list[Batch]], tick: int
              ) -> dict[str, dict[tuple[str, ...], Arrangement]]:
        """The arrangements the plan needs, with this tick's batches appended by a bulk
        build; an arrangement not built yet is built from the node's whole spine. One
        Spark job per arrangement, all submitted at once (small ones finish in the
        shadow of the large one)."""
        def one(spec: Spec) -> Arrangement:
            arr = self.store.arrangements.get(spec.node, {}).get(spec.key)
            batches = list(written.get(spec.node, []))
            if arr is None:
                spine = self.store.spines.get(spec.node)
                batches = (list(spine.batches) if spine else []) + batches
                size = Batch.open_many(self.spark, batches).count() if batches else 0  # from Parquet footers
                arr = Arrangement(spec.node, spec.key, spec.additive, buckets_for(size))
            if not batches:
                return arr
            frame = Batch.open_many(self.spark, batches)
            task = partial(build_runs, self.store.fs.root, arr, tick, zsets.arrow_schema(frame.schema))
            rows = frame.mapInArrow(task, BUILT_DDL).collect()
            new: dict[int, list[Run]] = {}
            for r in rows:
                new.setdefault(r["bucket"], []).append(Run(r["path"], r["rows"]))
            return arr.with_runs(new)

        specs = list(plan.specs.values())
        with ThreadPoolExecutor(max_workers=max(1, len(specs))) as pool:
            built = list(pool.map(one, specs))
        out: dict[str, dict[tuple[str, ...], Arrangement]] = {}
        for spec, arr in zip(specs, built):
            out.setdefault(spec.node, {})[spec.key] = arr
        return out
