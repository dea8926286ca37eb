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

The sources and views are one circuit (:mod:`.circuit`: the operators, the state nodes
and their types); the pipeline runs it. A step runs on arrangements when the circuit has
an arranged form and its state is built (:mod:`.on_arrangements`: in the driver, or in
Spark tasks for a large tick); otherwise, or when that path declines, the DataFrame
evaluator does (:mod:`.on_dataframes`). Either way the tick commits through
:meth:`Pipeline._commit`.

Rows that every reader sees only through temporal filters leave state once their last
window closes (:mod:`.expiry`). A source's retained input is such a state only when the
source is declared ``expire``: then a view added later that would still see a row gone
from it cannot be built there, and says so.
"""
from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from ..circuit.operators import Input, Integral, explain
from ..errors import StateError, StreamError
from ..sql.compile import parse
from ..sql.rewrites.clock import uses_clock
from ..sql.rewrites.constant import ONE, ONE_COLUMN, uses_one
from ..sql.temporal import CLOCK, CLOCK_COLUMN
from .arrow import kernels
from .plan import NotArranged
from .storage.contents import Contents
from .storage.arrangement import Arrangement
from .circuit import Circuit, Rows, parse_schema
from .expiry import Retention
from .on_arrangements import ArrangedTicks, merge_arrow
from .on_dataframes import DataFrameTicks, merge
from .storage.state import Batch, StateStore
from .ticks import Changes, Clock, NodeFailed, State, TickStats, ViewsFailed, data_error

PLACEMENTS = frozenset({"auto", "dataframe", "tasks"})


#: errors on which the arranged path hands a tick to the DataFrame path
_DECLINES = (NotArranged, kernels.UnsupportedKey, pa.ArrowInvalid, pa.ArrowNotImplementedError)


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
        #: the sources and views, their state nodes and the types of their rows
        self.circuit = Circuit(spark, self.store.meta)
        #: what the last committed tick holds, by view or source name
        self.contents = Contents(spark, self.circuit, self.store)
        self._arranged = ArrangedTicks(self)
        self._dataframes = DataFrameTicks(self, self._arranged)
        #: how the last tick ran and where its time went
        self.last_tick: TickStats | None = None
        #: the time views read, at the last committed tick
        self._clock = Clock(self.store.meta.get("now"))
        #: what a layer above keeps about this pipeline, committed with every tick
        self.notes: dict[str, Any] = dict(self.store.meta.get("notes", {}))
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
        """The time of the last committed tick, for views that read the time (in UTC)."""
        return self._clock.now

    def add_source(self, name: str, schema: str | StructType, *, replace: bool = False, expire: bool = False) -> bool:
        """Declare an input relation; ``schema`` is a StructType or DDL like ``"id INT, v STRING"``.

        If the state holds the source with other columns, that is an error, or with
        ``replace`` its retained input is dropped (and True returned): views reading it must
        then be :meth:`reset`. With ``expire``, rows that every view sees only through
        temporal filters whose windows they have left for good leave its retained input
        too (else it keeps every row, for views added later).
        """
        name = name.lower()
        self.circuit.check_new(name)
        if expire:
            self.circuit.expiring.add(name)
        st = parse_schema(name, schema)
        known = self.store.meta.get("sources", {}).get(name)
        replaced = known is not None and StructType.fromJson(known) != st
        if replaced and replace:
            self.store.forget({Integral(Input(name, tuple(StructType.fromJson(known).fieldNames()))).id})
        elif replaced:
            raise StateError(
                f"source {name!r} was {StructType.fromJson(known).simpleString()} in the state at "
                f"{self.store.fs.root}, now {st.simpleString()}; use a new state location to start over")
        self.circuit.add_source(name, st)
        self._arranged.circuit_changed()
        return replaced

    def index(self, source: str, key: Sequence[str]) -> None:
        """Keep ``source``'s rows arranged by ``key`` too, for :meth:`.Contents.by_key`."""
        self.circuit.indexes.add((source.lower(), tuple(key)))
        self._arranged.circuit_changed()

    def add_view(self, name: str, sql: str) -> None:
        """Declare a view over sources and earlier views, maintained incrementally."""
        name = name.lower()
        self.circuit.check_new(name)
        tree = parse(sql, name)
        if CLOCK not in self.circuit.sources and uses_clock(tree):
            self.add_source(CLOCK, f"{CLOCK_COLUMN} TIMESTAMP")  # the time, fed by step()
        if ONE not in self.circuit.sources and uses_one(tree):
            self.add_source(ONE, f"{ONE_COLUMN} INT")  # the one row of a SELECT without FROM, fed by step()
        self.circuit.add_view(name, sql, tree)
        self._arranged.circuit_changed()

    # --- running -----------------------------------------------------------------------

    def step(self, deltas: Mapping[str, DataFrame | pa.Table | Rows | None], now: datetime | None = None,
             before_commit: Callable[[int, Changes], None] | None = None) -> Changes:
        """Apply one tick of input changes, commit it, and return each view's change.

        ``now`` is the tick's time for views that read it (default: the clock); a naive
        datetime is UTC, not the process's local time (where Spark would take it as local).
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
        inputs, arrow = self.circuit.deltas(deltas, {CLOCK, ONE})

        clock = self._clock.now
        if CLOCK in self.circuit.sources:
            clock, moved = self._clock.advance(now)
            if moved:
                arrow[CLOCK] = self.circuit.rows_arrow(CLOCK, moved)

        if ONE in self.circuit.sources and not self.store.has(self.circuit.source_state(ONE).id):
            arrow[ONE] = self.circuit.rows_arrow(ONE, [((1,), 1)])  # once: it never changes after

        failed = {n: e for n, e in self.failed.items() if n in self.circuit.views}
        changed = {s for s, d in inputs.items() if d is not None} | {s for s, t in arrow.items() if t.num_rows}
        # the same input fails the same way: a failed view is retried (rebuilt from retained
        # input) once a source it reads changed or it was redefined, and set aside till then
        retry = {n for n in failed if changed & set(self.upstream(n))
                 or not all(self.store.has(s) for s in self.circuit.own_states({n}, keep=set()))}
        rebuilt = self.store.forget(self.circuit.own_states(retry))
        skip = {n: e for n, e in failed.items() if n not in retry}
        try:
            while True:
                try:
                    return self._run(dict(inputs), dict(arrow), clock, before_commit, started, skip)
                except ViewsFailed as e:
                    if set(e.failed) <= set(skip):
                        raise StreamError(f"views {sorted(e.failed)} failed on their input although they were "
                                          f"set aside: {e.failed}") from e
                    skip = self.circuit.with_readers({**skip, **e.failed})
                    # the failed views keep their last contents; the other retried ones are still rebuilt
                    aside = self.circuit.own_states(set(skip))
                    self.store.restore({n: rebuilt.pop(n) for n in list(rebuilt) if n in aside})
        except BaseException:
            self.store.restore(rebuilt)  # a tick that did not commit changes nothing
            raise

    def _run(self, inputs: dict[str, DataFrame | None], arrow: dict[str, pa.Table], clock: datetime | None,
             before_commit: Callable[[int, Changes], None] | None, started: float, skip: Mapping[str, str]
             ) -> Changes:
        """One attempt at a tick, the views in ``skip`` (view → error) set aside as they are."""
        plan = self._arranged.plan()
        why = self._arranged.unplanned if plan is None else None
        aside = self.circuit.own_states(set(skip))
        if plan is not None and self.placement == "dataframe":
            why = "placement 'dataframe'"
        elif plan is not None:
            fetched, whole, complete = (({}, False, set()) if self.placement == "tasks"
                                        else self._arranged.fetch(inputs, arrow))
            if not whole:  # what the driver holds whole goes to the tasks as Arrow, not evaluated again
                arrow |= {n: fetched[n] for n in complete}
                inputs |= {n: None for n in complete}
            try:
                arranged, built = self._arranged.missing(
                    plan, self._arranged.arrangements(plan, fetched if whole else None, inputs, arrow), aside,
                    inputs, arrow, fetched, whole, clock)
                if whole:
                    try:
                        return self._arranged.in_driver(plan, arranged, fetched, clock, before_commit, started,
                                                        aside, skip, built)
                    except NotArranged:  # more than the driver holds (a probe's matches): the same in tasks
                        arrow |= fetched
                        inputs = {n: None for n in inputs}
                return self._arranged.in_tasks(plan, arranged, inputs, arrow, fetched, clock, before_commit,
                                               started, aside, skip, built)
            except NodeFailed as e:  # the views computing that node fail (or read one that does)
                holding = [n for n in self.circuit.reading(e.node) if n not in skip]
                if not holding:
                    raise
                raise ViewsFailed(self.circuit.with_readers(
                    {n: e.why for n in holding if not set(self.circuit.upstream(n)) & set(holding)})) from e
            except Exception as e:  # the DataFrame path computes it, with Spark's own errors
                if not isinstance(e, _DECLINES) and data_error(e) is None and whole:
                    raise
                why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        return self._dataframes.run(plan, inputs, arrow, clock, before_commit, started, aside, skip, why)

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
        self.store.commit(tick, written, lambda node, df: merge(by_id[node], df), meta,
                          arrangements, lambda node, t: merge_arrow(by_id[node], t))
        self._clock = Clock(meta["now"])
        self._retention.expired, self.failed = meta["expired"], meta["failed"]
        return outputs, committing

    def _meta(self, now: datetime | None, expired: Mapping[str, int], failed: Mapping[str, str]) -> dict[str, Any]:
        return {
            "now": now.isoformat() if now else None,
            "expired": dict(expired),
            "failed": dict(failed),
            "sources": {n: json.loads(s.json()) for n, s in self.circuit.sources.items()},
            "views": {n: {"sql": v.sql, "state": v.state.id} for n, v in self.circuit.views.items()},
            "notes": self.notes,
            "types": self.circuit.types_to_record(),
        }

    # --- reading -----------------------------------------------------------------------

    def snapshot(self, name: str, *, weights: bool = False) -> DataFrame:
        """The view's contents at the last committed tick (or a source's retained input),
        as a bag of rows like the batch query returns (:meth:`.Contents.snapshot`)."""
        return self.contents.snapshot(name, weights=weights)

    def reset(self, name: str) -> None:
        """Forget the view's own state (not its inputs', not other views'): the next step
        rebuilds it from retained input."""
        name = name.lower()
        self.store.forget(self.circuit.own_states({name}, keep=set(self.upstream(name)) & set(self.circuit.views)))

    def upstream(self, name: str) -> list[str]:
        """Views and sources the view reads, directly or through other views."""
        return self.circuit.upstream(name)

    @property
    def reads_time(self) -> bool:
        """Whether a view reads the time: then every step may change it."""
        return CLOCK in self.circuit.sources

    @property
    def pending(self) -> bool:
        """Whether the next step has state to build (a view added or reset since the last commit)."""
        return any(not self.store.has(s.id) for s in self.circuit.states())

    def schema(self, name: str) -> StructType:
        """A view's or a source's columns."""
        return self.circuit.schema(name)

    def explain(self, name: str) -> str:
        """The view's logical plan, its incremental circuit, and how a small tick runs it:
        on arrangements (what each node reads and where it is computed) or not, and why."""
        view = self.circuit.views[name.lower()]
        plan = self._arranged.plan()
        arranged = (f"-- view {view.name}: on arrangements\n{explain(view.state, note=plan.note)}" if plan is not None
                    else f"-- view {view.name}: not on arrangements ({self._arranged.unplanned})")
        return (f"-- view {view.name}: plan\n{explain(view.logical)}\n"
                f"-- view {view.name}: incremental circuit\n{explain(view.state)}\n{arranged}")

    @property
    def views(self) -> list[str]:
        return list(self.circuit.views)

    def close(self) -> None:
        self.store.close()
