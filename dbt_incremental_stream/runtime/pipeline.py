"""The engine's entry point: sources and views in, one consistent tick at a time.

    pipe = Pipeline(spark, state_location="/tmp/state")
    pipe.add_source("orders", "id INT, customer INT, amount DECIMAL(10,2)")
    pipe.add_view("revenue", "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer")
    out = pipe.step({"orders": delta_df})   # delta_df: the source columns plus _w
    pipe.snapshot("revenue").show()
    print(pipe.explain("revenue"))

Every source's integral is kept (retained input), so a view added to a pipeline that
already ran is backfilled from history, and a process that opens the same location with
the same sources and views resumes from the last committed tick.

A step runs on arrangements when the circuit has an arranged form and its state is built
(:mod:`.on_arrangements`: in the driver, or in Spark tasks for a large tick); otherwise,
or when that path declines, the DataFrame evaluator (:mod:`.evaluate`) computes it here.
Either way the tick commits through :meth:`Pipeline._commit`.

Rows that every reader sees only through temporal filters leave state once their last
window closes (:mod:`.expiry`). A source's retained input is such a state only when the
source is declared ``expire``: then a view added later that would still see a row gone
from it cannot be built there, and says so.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from functools import partial
from typing import AbstractSet, Any, Callable, Iterable, Mapping, Sequence, cast

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark.errors import AnalysisException, ParseException, PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, DecimalType, DoubleType, FloatType, StructField, StructType

from ..circuit.incremental import Incrementalizer
from ..circuit.operators import (WEIGHT, Delay, Input, Integral, Map, Operator, Partials, Recompute, explain,
                                 quote, walk)
from ..errors import CompileError, StateError, StreamError
from ..sql.compile import compile, parse
from ..sql.rewrites.clock import uses_clock
from ..sql.temporal import CLOCK, CLOCK_COLUMN
from . import kernels, zsets
from .arranged import NotArranged, Plan
from .arrangement import Arrangement
from .evaluate import Tick, empty_tick
from .on_arrangements import ArrangedTicks
from .ticks import Changes, State, TickStats
from .expiry import Retention
from .state import Batch, StateStore

Rows = Iterable[tuple[Sequence[Any], int]]
PLACEMENTS = frozenset({"auto", "dataframe", "tasks"})


def _merge_arrow(state: State, table: pa.Table) -> pa.Table:
    """:meth:`Pipeline._merge` in Arrow."""
    if isinstance(state, Integral) and state.key is not None:
        return kernels.sum_by(table, state.key)
    return kernels.consolidate(table)


def _scan_paths(batches: Sequence[Batch]) -> list[tuple[str, str]]:
    """(struct column, path) to scan for ``batches`` of one node: one glob over their
    tick directories where they share a parent and a leaf (a scan that SQL names costs a
    schema-inference job, so one scan instead of up to :data:`max_batches`)."""
    parts = [b.path.rsplit("/", 2) for b in batches]
    if len(batches) > 1 and len({(p[0], p[2], b.column) for p, b in zip(parts, batches)}) == 1 \
            and all(len(p) == 3 and not set(p[1]) & set("{},*?[]\\") for p in parts):
        return [(batches[0].column, f"{parts[0][0]}/{{{','.join(p[1] for p in parts)}}}/{parts[0][2]}")]
    return [(b.column, b.path) for b in batches]




def data_error(e: BaseException) -> str | None:
    """``e`` as "CONDITION: message" when it is an error of the data a view's SQL met (a
    division by zero, an overflow, a cast of a malformed value, an index out of range,
    ``assert_true``: SQLSTATE class 22 or P0001); None for any other error."""
    found = [(e.getSqlState(), e.getCondition(), str(e))] if isinstance(e, PySparkException) else []
    cause = getattr(e, "java_exception", None)  # an error Spark raised in another thread: its causes
    for _ in range(8):
        if cause is None:
            break
        try:
            found.append((cause.getSqlState(), cause.getCondition(), cause.getMessage()))
        except Py4JError:  # not a SparkThrowable
            pass
        cause = cause.getCause()
    for state, condition, message in found:
        if state and (state.startswith("22") or state == "P0001"):
            return f"{condition}: {str(message).splitlines()[0]}"
    return None


class _ViewsFailed(Exception):
    """Views whose change could not be computed on this tick's input: view → error."""

    def __init__(self, failed: dict[str, str]):
        super().__init__(failed)
        self.failed = failed


#: errors on which the arranged path hands a tick to the DataFrame path
_DECLINES = (NotArranged, kernels.UnsupportedKey, pa.ArrowInvalid, pa.ArrowNotImplementedError)


def _state_delta(tick: Tick, state: State) -> DataFrame | None:
    """What a state node adds this tick: its input's delta, or a recompute's own output."""
    return tick.value(state.input if isinstance(state, Integral) else state)


@dataclass(frozen=True)
class View:
    name: str
    sql: str
    logical: Operator  # the batch query as a circuit over relations
    state: Integral  # I(Δview): the maintained contents
    schema: StructType  # what the same SQL returns in batch


def coerce_row(schema: StructType, row: Sequence[Any]) -> tuple[Any, ...]:
    """Python values as the columns' types want them (floats for DECIMAL, ints for DOUBLE)."""
    return tuple(_coerce(f.dataType, v) for f, v in zip(schema.fields, row))


def _coerce(dtype: DataType, v: Any) -> Any:
    if v is None:
        return v
    if isinstance(dtype, DecimalType) and not isinstance(v, Decimal):
        return Decimal(str(v))
    if isinstance(dtype, (DoubleType, FloatType)):
        return float(v)
    return v


class Pipeline:
    """A set of sources and views over them, advanced together one tick at a time."""

    def __init__(self, spark: SparkSession, state_location: str, *, max_batches: int = 8,
                 placement: str = "auto"):
        if placement not in PLACEMENTS:
            raise StreamError(f"placement {placement!r}: one of {sorted(PLACEMENTS)}")
        self.spark = spark
        #: where ticks run: "auto" (small ticks on arrangements in the driver, large ones
        #: in Spark tasks), "tasks" (every tick in Spark tasks) or "dataframe" (every tick
        #: by the DataFrame evaluator: the twin of the others in the tests)
        self.placement = placement
        self.store = StateStore(spark, state_location, max_batches=max_batches)
        self._analysis = spark.newSession()  # temp views for batch semantics, apart from the user's
        self._schemas: dict[str, StructType] = {}
        self._catalog: dict[str, Operator] = {}
        self._views: dict[str, View] = {}
        self._incremental = Incrementalizer()
        self._indexes: set[tuple[str, tuple[str, ...]]] = set()  # (source, key) arranged for current_rows
        self._arranged = ArrangedTicks(self)
        self._expiring: set[str] = set()  # sources whose retained input drops rows out of every window
        self._circuit_changed()
        #: how the last tick ran and where its time went
        self.last_tick: TickStats | None = None
        now = self.store.meta.get("now")
        self._now: datetime | None = datetime.fromisoformat(now) if now else None
        #: what a layer above keeps about this pipeline, committed with every tick
        self.notes: dict[str, Any] = dict(self.store.meta.get("notes", {}))
        #: node schemas and expression types the last commit recorded (``_meta``): a new
        #: instance's arranged plan reads them instead of building the circuit in Spark again
        self._recorded: dict[str, dict[str, str]] = self.store.meta.get("types", {})
        #: per state node, the value of the compared column below which its rows have left
        #: it (Arrow's integer form of a date, time or number)
        self._retention = Retention(self.store.meta.get("expired", {}))
        #: views whose SQL failed on their input, and the views reading them: view → error.
        #: They keep their contents of the last tick they computed; every step tries to
        #: rebuild them from retained input, and one that succeeds leaves this map
        self.failed: dict[str, str] = dict(self.store.meta.get("failed", {}))

    # --- definition --------------------------------------------------------------------

    @property
    def tick(self) -> int:
        """The last committed tick (0: none yet)."""
        return self.store.tick

    @property
    def now(self) -> datetime | None:
        """The time of the last committed tick, for views that read the time."""
        return self._now

    def add_source(self, name: str, schema: str | StructType, *, replace: bool = False, expire: bool = False) -> bool:
        """Declare an input relation; ``schema`` is a StructType or DDL like ``"id INT, v STRING"``.

        If the state holds the source with other columns, that is an error, or with
        ``replace`` its retained input is dropped (and True returned): views reading it must
        then be :meth:`reset`. With ``expire``, rows that every view sees only through
        temporal filters whose windows they have left for good leave its retained input
        too (else it keeps every row, for views added later).
        """
        name = name.lower()
        if expire:
            self._expiring.add(name)
        self._check_new(name)
        st = self._parse_schema(name, schema)
        known = self.store.meta.get("sources", {}).get(name)
        replaced = known is not None and StructType.fromJson(known) != st
        if replaced and replace:
            self.store.forget({Integral(Input(name, tuple(StructType.fromJson(known).fieldNames()))).id})
        elif replaced:
            raise StateError(
                f"source {name!r} was {StructType.fromJson(known).simpleString()} in the state at "
                f"{self.store.fs.root}, now {st.simpleString()}; use a new state location to start over")
        self._schemas[name] = st
        self._circuit_changed()
        self._catalog[name] = Input(name, tuple(st.fieldNames()))
        self._analysis.createDataFrame([], st).createOrReplaceTempView(name)
        return replaced

    def index(self, source: str, key: Sequence[str]) -> None:
        """Keep ``source``'s rows arranged by ``key`` too, for :meth:`current_rows`."""
        self._indexes.add((source.lower(), tuple(key)))
        self._circuit_changed()

    def current_rows(self, source: str, key: Sequence[str], keys: pa.Table) -> pa.Table | None:
        """``source``'s rows (with weights) whose ``key`` equals a row of ``keys`` (NULL
        matches NULL), from its arrangement by ``key`` (see :meth:`index`); None until that
        arrangement is built."""
        node = self._source_state(source.lower()).id
        arr = self.store.arrangements.get(node, {}).get(tuple(key))
        if arr is None or self.store.runs is None or self.pending:
            return None
        _, rows = self.store.runs.probe(arr, keys, list(key), [True] * len(key))
        schema = zsets.arrow_schema(zsets.with_weight(self._schemas[source.lower()]))
        return kernels.consolidate(rows.cast(schema)) if rows is not None else schema.empty_table()

    def add_view(self, name: str, sql: str) -> None:
        """Declare a view over sources and earlier views, maintained incrementally."""
        name = name.lower()
        self._check_new(name)
        tree = parse(sql, name)
        if CLOCK not in self._schemas and uses_clock(tree):
            self.add_source(CLOCK, f"{CLOCK_COLUMN} TIMESTAMP")  # the time, fed by step()
        try:
            schema = self._analysis.sql(sql).schema  # Spark's own verdict and output types
        except (AnalysisException, ParseException) as e:
            raise CompileError(f"Spark rejects the SQL: {e}", view=name) from e
        dupes = [c for c, n in Counter(f.name.lower() for f in schema).items() if n > 1]
        if dupes:
            raise CompileError(f"duplicate output column names {dupes}; alias them", view=name)
        logical = compile(tree, self._catalog, view=name)
        if len(logical.columns) != len(schema):
            raise CompileError(f"planned {len(logical.columns)} columns, Spark sees {len(schema)}", view=name)
        out = Map(logical, tuple((f.name, f"CAST({quote(c)} AS {f.dataType.simpleString()})")
                                 for f, c in zip(schema, logical.columns)))
        self._catalog[name] = out
        self._views[name] = View(name, sql, out, Integral(self._incremental(out)), schema)
        self._circuit_changed()
        self._analysis.createDataFrame([], schema).createOrReplaceTempView(name)

    def _circuit_changed(self) -> None:
        self._empty: Tick | None = None
        self._schema_tick: Tick | None = None
        self._schemas_by_node: dict[str, StructType] = {}
        self._types_by_exprs: dict[str, str] = {}  # node id and expressions → their types' StructType JSON
        self._recorded_valid: bool | None = None
        self._to_record: tuple[tuple[int, int], dict[str, dict[str, str]]] | None = None  # by what it was made of
        self._plan: Plan | NotArranged | None = None
        self._arranged.circuit_changed()

    def _recorded_types(self, kind: str) -> dict[str, str]:
        """What the last commit recorded of ``kind`` ("schemas", "exprs"), while every
        source it knew has the schema it had then (an operator's id names its SQL and its
        inputs' columns, not their types)."""
        if self._recorded_valid is None:
            sources = self.store.meta.get("sources", {})
            self._recorded_valid = all(json.loads(self._schemas[n].json()) == st
                                       for n, st in sources.items() if n in self._schemas)
        return self._recorded.get(kind, {}) if self._recorded_valid else {}

    def _check_new(self, name: str) -> None:
        if name in self._catalog:
            raise StreamError(f"{name!r} is already defined")

    def _parse_schema(self, name: str, schema: str | StructType) -> StructType:
        if isinstance(schema, str):
            try:
                schema = cast(StructType, StructType.fromDDL(schema))
            except Exception as e:  # Spark's parser raises several types here
                raise StreamError(f"bad schema for source {name!r}: {e}") from e
        fields = [StructField(f.name.lower(), f.dataType, True) for f in schema.fields]
        if WEIGHT in {f.name for f in fields}:
            raise StreamError(f"source {name!r} may not have a column named {WEIGHT}")
        return StructType(fields)

    # --- running -----------------------------------------------------------------------

    def delta(self, source: str, rows: Rows) -> DataFrame:
        """A delta DataFrame for ``source`` from ``(row, weight)`` pairs."""
        st = self._schemas[source.lower()]
        data = [coerce_row(st, r) + (int(w),) for r, w in rows]
        return self.spark.createDataFrame(data, zsets.with_weight(st))

    def step(self, deltas: Mapping[str, DataFrame | pa.Table | Rows | None], now: datetime | None = None,
             before_commit: Callable[[int, Changes], None] | None = None) -> Changes:
        """Apply one tick of input changes, commit it, and return each view's change.

        ``now`` is the tick's time for views that read it (default: the clock, in UTC).
        The returned DataFrames (consolidated, with ``_w``) stay readable until the next step.
        ``before_commit(tick, changes)`` runs once the tick's state is written and before it
        commits: outputs written there idempotently per tick are exactly-once.

        A view whose SQL fails on the input (:func:`data_error`) does not stop the others:
        it and the views reading it keep their last contents, with no change this tick, and
        are named in :attr:`failed`; the others commit. Every later step first tries to
        rebuild the failed views from retained input (a batch computation of them), and
        one that succeeds is exactly the batch answer again and leaves :attr:`failed`.
        """
        started = time.perf_counter()
        inputs: dict[str, DataFrame | None] = {}
        arrow: dict[str, pa.Table] = {}
        for source, d in deltas.items():
            source = source.lower()
            if source not in self._schemas or source == CLOCK:
                raise StreamError(f"no source named {source!r}")
            if isinstance(d, (pa.Table, pa.RecordBatch)):
                arrow[source] = self._conform_arrow(source, d)
                continue
            if d is not None and not isinstance(d, DataFrame):
                table = self._rows_arrow(source, d := list(d))
                if table is not None:
                    arrow[source] = table
                    continue
                d = self.delta(source, d)
            inputs[source] = None if d is None else self._conform(source, d)

        clock = self._now
        if CLOCK in self._schemas:
            if now is not None and self._now is not None and now < self._now:
                raise StreamError(f"the time {now} is before the last tick's {self._now}: the time views "
                                  f"read never goes back (rows outside every window for good leave the state)")
            wall = datetime.now(timezone.utc).replace(tzinfo=None)
            clock = now or (wall if self._now is None else max(wall, self._now))
            if clock != self._now:
                moved = [((clock,), 1)] + ([((self._now,), -1)] if self._now is not None else [])
                arrow[CLOCK] = self._rows_arrow(CLOCK, moved)

        failed = {n: e for n, e in self.failed.items() if n in self._views}
        changed = {s for s, d in inputs.items() if d is not None} | {s for s, t in arrow.items() if t.num_rows}
        # the same input fails the same way: a failed view is retried (rebuilt from retained
        # input) once a source it reads changed or it was redefined, and set aside till then
        retry = {n for n in failed if changed & set(self.upstream(n))
                 or not all(self.store.has(s) for s in self._own_states({n}, keep=set()))}
        rebuilt = self.store.forget(self._own_states(retry))
        skip = {n: e for n, e in failed.items() if n not in retry}
        try:
            while True:
                try:
                    return self._run(dict(inputs), dict(arrow), clock, before_commit, started, skip)
                except _ViewsFailed as e:
                    if set(e.failed) <= set(skip):
                        raise StreamError(f"views {sorted(e.failed)} failed on their input although they were "
                                          f"set aside: {e.failed}") from e
                    self.store.restore(rebuilt)  # the failed views keep their last contents
                    rebuilt = {}
                    skip = self._with_readers({**skip, **e.failed})
        except BaseException:
            self.store.restore(rebuilt)  # a tick that did not commit changes nothing
            raise

    def _run(self, inputs: dict[str, DataFrame | None], arrow: dict[str, pa.Table], clock: datetime | None,
             before_commit: Callable[[int, Changes], None] | None, started: float, skip: Mapping[str, str]
             ) -> Changes:
        """One attempt at a tick, the views in ``skip`` (view → error) set aside as they are."""
        plan = self._arranged_plan()
        why = str(self._plan) if plan is None else None
        aside = self._own_states(set(skip))
        if plan is not None and self.placement == "dataframe":
            why = "placement 'dataframe'"
        elif plan is not None and not self._arranged.ready(plan) and not self._arranged.first(skip):
            why = "state to build"
        elif plan is not None:
            fetched, whole, complete = (({}, False, set()) if self.placement == "tasks"
                                        else self._arranged.fetch(inputs, arrow))
            if not whole:  # what the driver holds whole goes to the tasks as Arrow, not evaluated again
                arrow |= {n: fetched[n] for n in complete}
                inputs |= {n: None for n in complete}
            try:
                arranged = self._arranged.arrangements(plan, fetched if whole else None, inputs, arrow)
                if whole:
                    return self._arranged.in_driver(plan, arranged, fetched, clock, before_commit, started, aside,
                                                    skip)
                return self._arranged.in_tasks(plan, arranged, inputs, arrow, fetched, clock, before_commit,
                                               started, aside, skip)
            except Exception as e:  # the DataFrame path computes it, with Spark's own errors
                if not isinstance(e, _DECLINES) and data_error(e) is None and whole:
                    raise
                why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        for source, table in arrow.items():
            inputs[source] = self._conform(source, self.spark.createDataFrame(table))

        every = self._states()
        states = [s for s in every if s.id not in aside]
        tick = self.store.tick + 1
        written: dict[str, list[Batch]] = {s.id: [] for s in every}  # the views set aside: as they are
        new = [s for s in states if not self.store.has(s.id)]
        built: set[str] = set()  # seeded with all input so far, this tick's included
        if new and self.store.tick > 0:
            unbuilt = [(v.name, v.state) for v in self._views.values() if not self.store.has(v.state.id)]
            self._retention.check(plan, unbuilt, {self._source_state(n).id: n for n in self._schemas}, clock)
            self._backfill(new, tick, written, skip, inputs)
            built = {s.id for s in new}

        # fixed before any batch of this tick is written: Delay reads the previous tick
        before = {s.id: zsets.union([self.store.before(s.id)] + [b.open(self.spark) for b in written[s.id]])
                  for s in states}
        first = {s.id for s in states if not self.store.has(s.id) and not written[s.id]}
        same = self._same_state()
        run = Tick(inputs, lambda node: before[same.get(node, node)], first.__contains__, self._shared(),
                   empty=self._typed_empty())
        try:
            frames = {s.id: self._fold(s, d) for s in states
                      if s.id not in built and (d := _state_delta(run, s)) is not None}
            by_id = {s.id: s for s in states}
            expired = self._retention.cut_frames(plan, frames, before, clock, list(by_id),
                                                 lambda node, df: self._merge(by_id[node], df))
            batches = self._write(tick, frames, skip)
            for node, batch in batches.items():
                written[node].append(batch)
            # a view built this tick changes by all of its contents (its backfill and this delta)
            frames = {v.name: self._change(v, written.get(v.state.id, [])) for v in self._views.values()}
            changes = Changes({name: partial(frames.__getitem__, name) for name in frames})
            arranging = time.perf_counter()
            arrangements = self._arranged.build(plan, written, tick) if plan is not None else {}
            outputs, computed = self._commit(tick, every, written, arrangements, changes,
                                             self._meta(clock, expired, skip), before_commit)
        finally:
            run.release()
        self.last_tick = TickStats("dataframe", sum(t.num_rows for t in arrow.values()),
                                   {"spark": arranging - started, "arrange": outputs - arranging,
                                    "outputs": computed - outputs, "commit": time.perf_counter() - computed}, why)
        return changes

    def _commit(self, tick: int, states: list[State], written: dict[str, list[Batch]],
                arrangements: dict[str, dict[tuple[str, ...], Arrangement]], changes: Changes,
                meta: dict[str, Any], before_commit: Callable[[int, Changes], None] | None
                ) -> tuple[float, float]:
        """Hand the tick's changes to ``before_commit``, then commit the tick with ``meta``
        (:meth:`_meta`); returns when ``before_commit`` started and when the commit did."""
        outputs = time.perf_counter()
        if before_commit is not None:
            before_commit(tick, changes)
        committing = time.perf_counter()
        by_id = {s.id: s for s in states}
        meta["expired"] = {n: at for n, at in meta["expired"].items() if n in written}
        self.store.commit(tick, written, lambda node, df: self._merge(by_id[node], df), meta,
                          arrangements, lambda node, t: _merge_arrow(by_id[node], t))
        self._now = datetime.fromisoformat(meta["now"]) if meta["now"] else None
        self._retention.expired, self.failed = meta["expired"], meta["failed"]
        return outputs, committing

    # --- the arranged path: small ticks on indexed state ---------------------------------

    def _arranged_plan(self) -> Plan | None:
        """The circuit's arranged form, or None when an operator has none (found once per circuit)."""
        if self._plan is None:
            try:
                if self.store.runs is None:
                    raise NotArranged(f"pyarrow has no file system for {self.store.fs.root}")
                keep = {v.state.id for v in self._views.values()} | {
                    self._source_state(n).id for n in self._schemas if n not in self._expiring}
                self._plan = Plan(self._states(), self._same_state(), self._schema_of, self._types_of,
                                  self.spark.conf.get("spark.sql.session.timeZone") or "UTC", keep)
                for source, key in self._indexes:
                    if source in self._schemas:
                        self._plan.need(self._source_state(source).id, key)
            except NotArranged as e:
                self._plan = e
        return self._plan if isinstance(self._plan, Plan) else None

    def _arrow_change(self, view: View, table: pa.Table | None) -> DataFrame:
        if table is None or table.num_rows == 0:
            return self._change(view, [])
        return self.spark.createDataFrame(table)

    def _schema_of(self, op: Operator) -> StructType:
        """The Spark types of a node's rows (from a plan over empty inputs, no job)."""
        found = self._schemas_by_node.get(op.id)
        recorded = self._recorded_types("schemas").get(op.id) if found is None else None
        if recorded is not None:
            found = self._schemas_by_node[op.id] = StructType.fromJson(json.loads(recorded))
        if found is None:
            if self._schema_tick is None:
                ops = {o.id: o for o in walk(*self._roots())}
                empty = self._typed_empty()

                def before(node: str) -> DataFrame | None:
                    o = ops.get(node)
                    return empty.value(o.input) if isinstance(o, Integral) else None

                self._schema_tick = Tick(empty._inputs, before, lambda _: True, set())
            if isinstance(op, Delay):
                return self._schema_of(op.input.input)
            value = self._schema_tick.value(op)
            if value is None:
                raise NotArranged(f"no type for {op.label()}")
            found = self._schemas_by_node[op.id] = value.schema
        return found

    def _types_of(self, op: Operator, exprs: list[str]) -> list[pa.DataType]:
        """Spark's types (in Arrow) of expressions over a node's columns (analysis only, no job)."""
        key = f"{op.id} {json.dumps(exprs)}"
        found = self._types_by_exprs.get(key) or self._recorded_types("exprs").get(key)
        if found is None:
            found = self.spark.createDataFrame([], self._schema_of(op)).selectExpr(*exprs).schema.json()
        self._types_by_exprs[key] = found
        return list(zsets.arrow_schema(StructType.fromJson(json.loads(found))).types)

    def _stored_schema(self, state: State) -> StructType:
        return self._schema_of(state if isinstance(state, Recompute) else state.input)

    def _rows_arrow(self, source: str, rows: Sequence[tuple[Sequence[Any], int]]) -> pa.Table | None:
        """``(row, weight)`` pairs as an Arrow table (None for nested column types)."""
        st = zsets.with_weight(self._schemas[source])
        return zsets.arrow_rows(st, [coerce_row(st, tuple(r) + (int(w),)) for r, w in rows])

    def _conform_arrow(self, source: str, table: pa.Table | pa.RecordBatch) -> pa.Table:
        """A source's delta as an Arrow table of its columns (by name, any case) and types."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        table = table.rename_columns([c.lower() for c in table.column_names])
        schema = zsets.arrow_schema(zsets.with_weight(self._schemas[source]))
        missing = [n for n in schema.names if n not in table.column_names]
        if missing:
            raise StreamError(f"delta for source {source!r} lacks columns {missing}")
        return table.select(schema.names).cast(schema)

    def _change(self, view: View, batches: list[Batch]) -> DataFrame:
        frames = [b.open(self.spark) for b in batches]
        if not frames:
            return self.spark.createDataFrame([], zsets.with_weight(view.schema))
        return frames[0] if len(frames) == 1 else zsets.consolidate(zsets.union(frames))  # type: ignore[arg-type]

    def _backfill(self, new: list[State], tick: int, written: dict[str, list[Batch]], skip: Mapping[str, str],
                  inputs: Mapping[str, DataFrame | None]) -> None:
        """Seed state nodes that did not exist at the last commit by replaying the
        retained input history and this tick's ``inputs`` through them as one delta, from
        empty state (a row that this tick deletes is never computed on)."""
        history: dict[str, DataFrame | None] = {}
        for name in self._schemas:
            before, delta = self.store.before(self._source_state(name).id), inputs.get(name)
            # consolidated with this tick's delta: a row deleted now is not there
            history[name] = (before if delta is None
                             else zsets.consolidate(cast(DataFrame, zsets.union([before, delta]))))
        replay = Tick(history, lambda _: None, lambda _: True, self._shared(),
                      empty=self._typed_empty())
        try:
            frames = {s.id: self._fold(s, d) for s in new if (d := _state_delta(replay, s)) is not None}
            for node, batch in self._write(tick, frames, skip).items():
                written[node].append(batch)
        finally:
            replay.release()

    def _write(self, tick: int, frames: dict[str, DataFrame], skip: Mapping[str, str]) -> dict[str, Batch]:
        """:meth:`StateStore.write`; when a view's SQL fails on the data, the views whose
        change fails, each computed alone (in the order they were added: a view reading a
        failed one is set aside with it, not computed), as :class:`_ViewsFailed`."""
        try:
            return self.store.write(tick, frames)
        except Exception as e:
            if data_error(e) is None:
                raise
            failed: dict[str, str] = {}
            same = self._same_state()
            for v in self._views.values():
                frame = frames.get(same.get(v.state.id, v.state.id))
                if frame is None or v.name in self._with_readers({**skip, **failed}):
                    continue
                try:
                    frame.write.format("noop").mode("overwrite").save()
                except Exception as probe:
                    if (why := data_error(probe)) is None:
                        raise
                    failed[v.name] = why
            if not failed:
                raise
            raise _ViewsFailed(failed) from e

    def _own_states(self, names: set[str], keep: AbstractSet[str] | None = None) -> set[str]:
        """State nodes that only the views ``names`` need: not the sources' retained input,
        nor those of the views in ``keep`` (default: every other view)."""
        if not names:
            return set()
        same = self._same_state()

        def states(roots: Sequence[Operator]) -> set[str]:
            return {same.get(op.id, op.id) for op in walk(*roots) if isinstance(op, (Integral, Recompute))}

        keep = set(self._views) - names if keep is None else keep
        others = states([self._views[n].state for n in keep] + [self._source_state(s) for s in self._schemas])
        return states([self._views[n].state for n in names]) - others

    def _with_readers(self, failed: Mapping[str, str]) -> dict[str, str]:
        """``failed`` and every view that reads one of them, directly or through others."""
        out = dict(failed)
        for v in self._views.values():  # in the order added: a view's inputs come first
            if v.name not in out:
                bad = [n for n in self.upstream(v.name) if n in out]
                if bad:
                    out[v.name] = f"reads {bad[0]}, which failed"
        return out

    def _fold(self, state: State, delta: DataFrame) -> DataFrame:
        """A tick's delta as stored. A recompute's output and per-group partial sums come
        out of a group-by already: no second shuffle."""
        if isinstance(state, Recompute) or isinstance(state.input, Partials):
            return delta
        return self._merge(state, delta)

    @staticmethod
    def _merge(state: State, batches: DataFrame) -> DataFrame:
        """Any union of batches of ``state`` as one: a consolidated Z-set, or sums per key."""
        if isinstance(state, Integral) and state.key is not None:
            return zsets.sum_by(batches, state.key)
        return zsets.consolidate(batches)

    def _conform(self, source: str, df: DataFrame) -> DataFrame:
        st = self._schemas[source]
        names = {c.lower(): c for c in df.columns}
        missing = [f.name for f in st.fields if f.name not in names] + ([WEIGHT] if WEIGHT not in names else [])
        if missing:
            raise StreamError(f"delta for source {source!r} lacks columns {missing}")
        return df.select(*(zsets.col(names[f.name]).cast(f.dataType).alias(f.name) for f in st.fields),
                         zsets.col(names[WEIGHT]).cast("bigint").alias(WEIGHT))

    def _source_state(self, name: str) -> Integral:
        return Integral(self._catalog[name])

    def _roots(self) -> Sequence[Operator]:
        return [self._source_state(n) for n in self._schemas] + [v.state for v in self._views.values()]

    def _states(self) -> list[State]:
        """Every node with persisted state, inputs before consumers."""
        same = self._same_state()
        return [op for op in walk(*self._roots()) if isinstance(op, (Integral, Recompute)) and op.id not in same]

    def _same_state(self) -> dict[str, str]:
        """Integrals of a recompute's output: the recompute's own state is that integral."""
        return {op.id: op.input.id for op in walk(*self._roots())
                if isinstance(op, Integral) and isinstance(op.input, Recompute)}

    def _shared(self) -> set[str]:
        """Nodes read by more than one consumer within a tick: persisted once computed."""
        uses: Counter[str] = Counter()
        for op in walk(*self._roots()):
            uses.update(i.id for i in op.inputs)
        return {node for node, n in uses.items() if n > 1}

    def _typed_empty(self) -> Tick:
        """A tick over empty inputs and state: typed empty values of every node (kept
        until the circuit changes, its values never do)."""
        if self._empty is None:
            self._empty = empty_tick({n: self.spark.createDataFrame([], zsets.with_weight(s))
                                      for n, s in self._schemas.items()})
        return self._empty

    def _meta(self, now: datetime | None, expired: Mapping[str, int], failed: Mapping[str, str]) -> dict[str, Any]:
        return {
            "now": now.isoformat() if now else None,
            "expired": dict(expired),
            "failed": dict(failed),
            "sources": {n: json.loads(s.json()) for n, s in self._schemas.items()},
            "views": {n: {"sql": v.sql, "state": v.state.id} for n, v in self._views.items()},
            "notes": self.notes,
            "types": self._types_to_record(),
        }

    def _types_to_record(self) -> dict[str, dict[str, str]]:
        """The schemas and expression types known of the circuit's nodes, for the next instance
        (made again only when this instance has learnt more: most commits learn nothing)."""
        known = (len(self._schemas_by_node), len(self._types_by_exprs))
        if self._to_record is not None and self._to_record[0] == known:
            return self._to_record[1]
        live = {o.id for o in walk(*self._roots())}
        schemas = {**self._recorded_types("schemas"), **{n: s.json() for n, s in self._schemas_by_node.items()}}
        exprs = {**self._recorded_types("exprs"), **self._types_by_exprs}
        recorded = {"schemas": {n: s for n, s in schemas.items() if n in live},
                    "exprs": {k: t for k, t in exprs.items() if k.split(" ", 1)[0] in live}}
        self._to_record = (known, recorded)
        return recorded

    # --- reading -----------------------------------------------------------------------

    def snapshot(self, name: str, *, weights: bool = False) -> DataFrame:
        """The view's contents at the last committed tick (or a source's retained input).

        As a bag of rows, like the batch query returns; ``weights=True`` gives one row per
        distinct tuple with its multiplicity in ``_w`` instead.
        """
        node, schema = self._contents(name)
        df = self.store.before(node)
        df = self.spark.createDataFrame([], zsets.with_weight(schema)) if df is None else zsets.consolidate(df)
        return df if weights else zsets.expand(df)

    def holds(self, name: str) -> bool:
        """Whether the last committed tick holds any batch of a view or a source (False:
        its contents are surely empty)."""
        spine = self.store.spines.get(self._contents(name)[0])
        return bool(spine and spine.batches)

    def integral(self, name: str) -> DataFrame | None:
        """A view's or a source's contents at the last committed tick as a Z-set not yet
        consolidated (a union of its batches, for a caller that consolidates anyway); None
        when it holds nothing."""
        return self.store.before(self._contents(name)[0])

    def _contents(self, name: str) -> tuple[str, StructType]:
        """The state node holding a view's contents or a source's retained input, and its columns."""
        name = name.lower()
        if name in self._views:
            view = self._views[name]
            return self._same_state().get(view.state.id, view.state.id), view.schema
        if name in self._schemas:
            return self._source_state(name).id, self._schemas[name]
        raise StreamError(f"no view or source named {name!r}")

    def relation_sql(self, name: str) -> str:
        """A Spark SQL query of a view's contents (or a source's retained input) at the last
        committed tick, reading the committed state files: a catalog view defined by it
        shows exactly that tick to any client of the same catalog, and is redefined after
        every commit."""
        node, schema = self._contents(name)
        spine = self.store.spines.get(node)
        columns = ", ".join(quote(f.name) for f in schema)
        if spine is None or not spine.batches:
            nulls = ", ".join(f"CAST(NULL AS {f.dataType.simpleString()}) AS {quote(f.name)}" for f in schema)
            return f"SELECT {nulls} WHERE 1 = 0"
        scans = " UNION ALL ".join(f"SELECT {quote(column)}.* FROM parquet.`{path}`"
                                   for column, path in _scan_paths(spine.batches))
        groups, out = zsets.identity_columns(schema)  # -0.0 stays -0.0, as the view holds it
        return (f"SELECT {columns} FROM (SELECT {', '.join(out)}, {WEIGHT} FROM (SELECT {', '.join(groups)}, "
                f"SUM({WEIGHT}) AS {WEIGHT} FROM ({scans}) GROUP BY ALL "
                f"HAVING SUM({WEIGHT}) > 0)) LATERAL VIEW explode(sequence(1, {WEIGHT})) AS __copy")

    def reset(self, name: str) -> None:
        """Forget the view's own state (not its inputs', not other views'): the next step
        rebuilds it from retained input."""
        name = name.lower()
        self.store.forget(self._own_states({name}, keep=set(self.upstream(name)) & set(self._views)))

    def upstream(self, name: str) -> list[str]:
        """Views and sources the view reads, directly or through other views."""
        ids = {op.id for op in walk(self._views[name.lower()].logical)}
        return [n for n, op in self._catalog.items() if n != name.lower() and op.id in ids]

    @property
    def reads_time(self) -> bool:
        """Whether a view reads the time: then every step may change it."""
        return CLOCK in self._schemas

    @property
    def pending(self) -> bool:
        """Whether the next step has state to build (a view added or reset since the last commit)."""
        return any(not self.store.has(s.id) for s in self._states())

    def schema(self, name: str) -> StructType:
        """A view's or a source's columns."""
        name = name.lower()
        return self._views[name].schema if name in self._views else self._schemas[name]

    def explain(self, name: str) -> str:
        """The view's logical plan, its incremental circuit, and how a small tick runs it:
        on arrangements (what each node reads and where it is computed) or not, and why."""
        view = self._views[name.lower()]
        plan = self._arranged_plan()
        arranged = (f"-- view {view.name}: on arrangements\n{explain(view.state, note=plan.note)}" if plan is not None
                    else f"-- view {view.name}: not on arrangements ({self._plan})")
        return (f"-- view {view.name}: plan\n{explain(view.logical)}\n"
                f"-- view {view.name}: incremental circuit\n{explain(view.state)}\n{arranged}")

    @property
    def views(self) -> list[str]:
        return list(self._views)

    def close(self) -> None:
        self.store.close()
