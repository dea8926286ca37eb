"""A tick on arrangements: node deltas as Arrow tables, probes into indexed state.

For a small tick a Spark job costs more than the work, so the stateful operators run as
:mod:`.kernels` over the arrangements their integrals are kept in: a join probes the other
side's arrangement with the delta's keys, a linear aggregate probes its partial sums and
its own emitted rows for the touched groups only, a temporal filter reads its state by
ranges of the compared column when the time moves, and a global top-k reads the end of
its input ordered by the first sort term. Projections, renames and casts to the
type a column already has are done on the Arrow columns; every other expression (a
filter, a computed column, an aggregate's finishing where Spark's decimal arithmetic
decides) is handed to Spark on the delta itself (a local relation: no state is read), so
Spark's semantics stay exact.

:class:`.plan.Plan` decides once per circuit whether every operator can run this way and
which integrals must be arranged by which key; :class:`ArrangedTick` evaluates one tick
over it.
"""
from __future__ import annotations

import time
from functools import partial, singledispatchmethod
from typing import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..circuit.operators import (
    WEIGHT,
    Delay,
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
    Plus,
    Recompute,
    Scale,
    Temporal,
    WindowDiff,
    is_identifier,
    passthrough,
    quote,
)
from .arrow import expressions, kernels, windows
from .spark import zsets
from .storage.arrangement import Arrangement, RunStore
from .ticks import NodeFailed, data_error
from .plan import (DeclinedRows, Extreme, NeedsSpark, NotArranged, Plan, Ranking, Side, TemporalPlan, TopPlan, Totals,
                   Windows, group_keys, unquote)

_ARROW_DECLINES = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)  # Spark decides instead
ROW = "__row"  # the probe row of each matched state row, carried through a side's chain
NUMBER = "__number"  # each row's place among a window's rows, where several specifications compute on them
PROBE_ROWS = 2_000_000  # more state rows than this in one probe (a cross join, the time moving): Spark's job


class ArrangedTick:
    """Evaluates node deltas of one tick as Arrow tables (None: statically empty)."""

    def __init__(self, plan: Plan, inputs: Mapping[str, pa.Table | None],
                 arrangements: Mapping[str, dict[tuple[str, ...], Arrangement]],
                 runs: RunStore, spark: SparkSession | None, ansi: bool | None = None, first: bool = False,
                 bounded: bool = True, legacy_stats: bool | None = None):
        self.plan = plan
        #: the most state rows one probe may match (bounds the driver's memory: past it the
        #: tick runs in tasks; unbounded in a task, whose delta is a part of a large one and
        #: matches in proportion)
        self.probe_rows = PROBE_ROWS if bounded else None
        #: the state nodes start empty (a pipeline's first tick, a new view's build): a keyless
        #: aggregate over no rows gives its one row (in tasks, only the task its rows go to)
        self.first = first
        self._inputs = inputs
        self._arr = arrangements
        self._runs = runs
        self._spark = spark  # None inside a Spark task: what needs Spark declines the tick
        #: the session's ``spark.sql.ansi.enabled``, which decides what an overflow gives
        self.ansi = ansi if ansi is not None else spark is None or zsets.ansi(spark)
        #: the session's ``spark.sql.legacy.statisticalAggregate``: a sample's variance or
        #: deviation of one value NaN, not NULL
        self.legacy_stats = legacy_stats if legacy_stats is not None else (
            spark is not None and zsets.legacy_stats(spark))
        self._memo: dict[str, pa.Table | None] = {}
        self.spark_seconds = 0.0  # spent in Spark passes
        self.rows_read = 0  # rows of state that joins and temporal filters read

    def arrow_schema(self, op: Operator) -> pa.Schema:
        return zsets.arrow_schema(self.plan.schema(op))

    def given(self, values: Mapping[str, pa.Table | None]) -> None:
        """Take node values computed elsewhere (another stage's tasks) as they are."""
        self._memo.update(values)

    def value(self, op: Operator) -> pa.Table | None:
        """A node's delta; a data error met computing it (a Spark pass's, a kernel's) is
        raised as :class:`.NodeFailed`, naming the node."""
        if op.id not in self._memo:
            try:
                self._memo[op.id] = self._eval(op)
            except NodeFailed:
                raise
            except Exception as e:
                if (why := data_error(e)) is None:
                    raise
                raise NodeFailed(op.id, why) from e
        return self._memo[op.id]

    def _conform(self, op: Operator, table: pa.Table) -> pa.Table:
        """``table`` with ``op``'s column names and types (a carried ``ROW`` stays last)."""
        schema = self.arrow_schema(op)
        row = table.column(ROW) if ROW in table.column_names else None
        if row is not None:
            table = table.drop_columns([ROW])
        if table.schema.names != schema.names:
            table = table.rename_columns(schema.names)
        if table.schema != schema:
            table = kernels.spark_cast(table, schema)
        return table if row is None else table.append_column(ROW, row)

    def _spark_pass(self, table: pa.Table, f: Callable[[DataFrame], DataFrame], what: str = "an expression",
                    node: str | None = None, rows: bool = False) -> pa.Table:
        """``f`` applied by Spark to ``table`` (a local relation: the delta only), timed.
        ``what`` needs it (named when a tick without Spark declines; ``node``: a Map or
        Filter that Spark can compute between stages instead, :class:`.NeedsSpark`;
        ``rows``: Arrow declined these rows, not the operator, :class:`.DeclinedRows`)."""
        if self._spark is None:
            why = f"{what} needs Spark: Arrow does not compute it exactly"
            if node is not None:
                raise NeedsSpark(node, why)
            raise DeclinedRows(why) if rows else NotArranged(why)
        started = time.perf_counter()
        out = zsets.collect_arrow(f(zsets.arrow_frame(self._spark, table)))
        self.spark_seconds += time.perf_counter() - started
        return out

    def _in_spark(self, op: Operator, table: pa.Table, f: Callable[[DataFrame], DataFrame], rows: bool = False
                  ) -> pa.Table:
        """``op``'s rows from ``f`` applied by Spark to ``table`` (``rows``: Arrow computes
        ``op`` but declined these rows)."""
        return self._conform(op, self._spark_pass(table, f, op.label(), op.id if self._between(op, rows) else None,
                                                  rows))

    def _between(self, op: Operator, rows: bool) -> bool:
        """Whether Spark can compute ``op`` between two stages of a tick in tasks, where
        Arrow declines it (:class:`.NeedsSpark`): a Map or Filter; partial sums; a window,
        not a top-k over the whole input; an aggregate on the tick's rows, with keys (its
        touched groups) or linear (its partial sums: not a keyless one's whole input or
        ordered ends)."""
        if isinstance(op, (Map, Filter, Partials)):
            return True
        if isinstance(op, WindowDiff):
            return op.id not in self.plan.tops
        return isinstance(op, GroupDiff) and rows and (bool(op.keys) or op.linear)

    def row_wise(self, op: Operator, t: pa.Table) -> pa.Table:
        """A Map or Filter applied to ``t``, keeping a carried ``ROW`` column."""
        if isinstance(op, Filter):
            return self._where(op, t, op.predicate)
        assert isinstance(op, Map)
        extra = [c for c in t.column_names if c == ROW]
        pairs = self.plan.renames.get(op.id)
        if pairs is None:
            computed = self._computed(op, t)
            if computed is not None:
                return computed
            return self._in_spark(op, t, lambda df: zsets.project(df, op.exprs + passthrough(extra)).select(
                *[quote(n) for n, _ in op.exprs], quote(WEIGHT), *map(quote, extra)))
        cols = {n: t.column(c) for n, c in pairs} | {WEIGHT: t.column(WEIGHT)} | {c: t.column(c) for c in extra}
        return self._conform(op, pa.Table.from_arrays(list(cols.values()), names=list(cols)))

    def _computed(self, op: Map, t: pa.Table) -> pa.Table | None:
        """A Map's columns computed by Arrow, or None when Spark must compute them."""
        values = self.plan.values.get(op.id)
        if values is None:
            return None
        try:
            cols = [expressions.as_column(f(t), t.num_rows) for _, f in values]
        except _ARROW_DECLINES:
            return None
        extra = [c for c in t.column_names if c == ROW]
        return self._conform(op, pa.Table.from_arrays(cols + [t.column(WEIGHT)] + [t.column(c) for c in extra],
                                                      names=[n for n, _ in values] + [WEIGHT] + extra))

    def _where(self, op: Operator, t: pa.Table, predicate: str) -> pa.Table:
        """The rows of ``t`` for which ``predicate`` is true: by Arrow when it compiles
        (and its exact decimals fit the types Spark gives them)."""
        compiled = self.plan.predicates.get(op.id)
        if compiled is not None:
            try:
                return t.filter(expressions.as_column(compiled(t), t.num_rows))
            except _ARROW_DECLINES:
                pass
        return self._in_spark(op, t, lambda df: df.where(predicate))

    def _read(self, side: Side, probe: pa.Table, probe_keys: Sequence[str], side_keys: Sequence[str],
              null_safe: Sequence[bool]) -> tuple[np.ndarray, pa.Table | None]:
        """The rows of ``side`` whose ``side_keys`` equal a ``probe`` row's ``probe_keys``:
        (the probe row of each match, the matched rows in the side's columns)."""
        key = side.key(side_keys)
        arr = self._arr[self.plan.state_of(side.integral)][key]
        extra = self.value(side.integral.input) if side.after else None
        rows, matched = self._runs.probe(arr, probe, probe_keys, null_safe, extra)
        self.rows_read += 0 if matched is None else matched.num_rows
        if matched is not None and self.probe_rows is not None and matched.num_rows > self.probe_rows:
            raise NotArranged(f"a probe of {side.integral.label()} matches {matched.num_rows:,} rows of state")
        if matched is None or not side.chain:
            return rows, matched
        t = matched.append_column(ROW, pa.array(rows, pa.int64()))
        for op in side.chain:
            t = self.row_wise(op, t)
        if t.num_rows == 0:
            return np.zeros(0, np.int64), None
        return t.column(ROW).to_numpy(), t.drop_columns([ROW])

    @singledispatchmethod
    def _eval(self, op: Operator) -> pa.Table | None:
        raise NotArranged(f"{op.label()} has no arranged form yet")

    @_eval.register
    def _(self, op: Input) -> pa.Table | None:
        t = self._inputs.get(op.name)
        return None if t is None else t.select(list(op.columns) + [WEIGHT])

    @_eval.register
    def _(self, op: Map) -> pa.Table | None:
        t = self.value(op.input)
        return None if t is None else self.row_wise(op, t)

    @_eval.register
    def _(self, op: Filter) -> pa.Table | None:
        t = self.value(op.input)
        return None if t is None else self.row_wise(op, t)

    @_eval.register
    def _(self, op: Generate) -> pa.Table | None:
        t = self.value(op.input)
        return None if t is None else self._conform(op, kernels.generate(t, op.column, op.kind, op.outer))

    @_eval.register
    def _(self, op: Scale) -> pa.Table | None:
        t = self.value(op.input)
        if t is None:
            return None
        if op.factor.strip() == "-1":
            return kernels.negate(t)
        return self._in_spark(op, t, lambda df: zsets.scale(df, op.factor))

    @_eval.register
    def _(self, op: Plus) -> pa.Table | None:
        return kernels.concat(self._conform(op, t) for i in op.inputs if (t := self.value(i)) is not None)

    @_eval.register
    def _(self, op: Pad) -> pa.Table | None:
        t = self.value(op.input)
        if t is None:
            return None
        schema = self.arrow_schema(op)
        cols = [t.column(c) for c in op.input.columns]
        cols += [pa.nulls(t.num_rows, schema.field(i).type) for i in range(len(cols), len(op.columns))]
        return pa.Table.from_arrays(cols + [t.column(WEIGHT)], schema=schema)

    @_eval.register
    def _(self, op: Partials) -> pa.Table | None:
        t = self.value(op.input)
        return None if t is None else self.partials(op, t)

    def partials(self, op: Partials, t: pa.Table) -> pa.Table:
        """The partial sums of ``t`` per group (a DECIMAL's past 38 digits in several rows:
        :func:`.kernels.fitted`); Spark's where Arrow declines them."""
        try:
            return kernels.partials(t, op.keys, op.aggs, self.arrow_schema(op))
        except _ARROW_DECLINES:
            return self._in_spark(op, t, lambda df: zsets.partials(df, op.keys, op.aggs), rows=True)

    @_eval.register
    def _(self, op: Temporal) -> pa.Table | None:
        found = self.plan.temporal.get(op.id)
        out = self.value(op.joined) if found is None else self._moved(op, found)
        return None if out is None else self._conform(op, out.select(list(op.columns) + [WEIGHT]))

    def _moved(self, op: Temporal, plan: TemporalPlan) -> pa.Table | None:
        """The rows of a temporal filter's state whose truth changes as the time moves: read
        by ranges of the ordered column, then the condition at the old and the new time
        (rows in both windows cancel). A time that is new, not moved (the first tick, or
        the first view to read the time), reads every row."""
        clock = self.value(op.right)
        if clock is None or clock.num_rows == 0:
            return None
        extra = self.value(plan.state.integral.input) if plan.state.after else None
        arr = self._arr[self.plan.state_of(plan.state.integral)][(kernels.ORDERED, plan.column)]
        if pc.sum(clock.column(WEIGHT)).as_py() != 0:  # the time is new, not moved: every row
            matched = self._runs.whole(arr, extra)
        else:
            matched = self._runs.ranges(arr, self._regions(op, plan, clock), extra)
        if matched is None:
            return None
        self.rows_read += matched.num_rows
        if self.probe_rows is not None and matched.num_rows > self.probe_rows:
            raise NotArranged(f"the time moving reaches {matched.num_rows:,} rows of {plan.state.integral.label()}")
        for step in plan.state.chain:
            matched = self.row_wise(step, matched)
        n, m = matched.num_rows, clock.num_rows
        mine, theirs = matched.take(np.repeat(np.arange(n), m)), clock.take(np.tile(np.arange(m), n))
        w = pc.multiply_checked(mine.column(WEIGHT), theirs.column(WEIGHT))
        cols = ([mine.column(c) for c in kernels.data_columns(mine)]
                + [theirs.column(c) for c in kernels.data_columns(theirs)])
        full = self._conform(op.joined, pa.Table.from_arrays(cols + [w], names=list(op.joined.columns) + [WEIGHT]))
        return self._where(op.joined, full, op.on)

    @staticmethod
    def _regions(op: Temporal, plan: TemporalPlan, clock: pa.Table) -> list[tuple[pa.Scalar, pa.Scalar]]:
        """The ranges of the ordered column between each bound's value at the old and at
        the new time (the ``clock``'s two rows)."""
        regions = []
        try:
            for f in plan.bounds:
                v = expressions.as_column(f(clock), clock.num_rows)
                if v.null_count == len(v):
                    continue  # NULL at every time: never true
                if v.null_count:
                    raise NotArranged(f"{op.label()}: a bound is NULL at one time only")
                bounds = pc.min_max(v)
                regions.append((bounds["min"], bounds["max"]))
        except _ARROW_DECLINES as e:
            raise NotArranged(f"{op.label()}: {e}") from None
        return regions

    @_eval.register
    def _(self, op: Join) -> pa.Table | None:
        j = self.plan.joins[op.id]
        delta = self.value(op.left if j.state_right else op.right)
        if delta is None:
            return None
        if j.unkeyed is not None:
            if delta.num_rows == 0:
                return None
            raise NotArranged(j.unkeyed)
        i = 0 if j.state_right else 1
        delta, keys = self.probe_keys(op, delta)
        rows, matched = self._read(j.state, delta, keys, [unquote(p[1 - i]) for p in op.keys], j.null_safe)
        if matched is None:
            return None
        mine = kernels.gather(delta, rows)
        if j.computed or j.probe_as:
            mine = mine.select(list(op.left.columns if j.state_right else op.right.columns) + [WEIGHT])
        w = pc.multiply_checked(mine.column(WEIGHT), matched.column(WEIGHT))
        theirs = [matched.column(c) for c in kernels.data_columns(matched)]
        ours = [mine.column(c) for c in kernels.data_columns(mine)]
        out = self._conform(op, pa.Table.from_arrays((ours + theirs if j.state_right else theirs + ours) + [w],
                                                     names=list(op.columns) + [WEIGHT]))
        return self._where(op, out, op.on) if j.residual else out

    def probe_keys(self, op: Join, delta: pa.Table, fits_only: bool = True) -> tuple[pa.Table, list[str]]:
        """A join's delta with the columns it probes the state by (computed keys appended,
        keys of another type than the state's converted), and their names. ``fits_only``:
        without the rows whose key equals no value of the state key's type."""
        j = self.plan.joins[op.id]
        i = 0 if j.state_right else 1
        keys = [unquote(p[i]) if is_identifier(p[i]) else f"__k{n}" for n, p in enumerate(op.keys)]
        if j.computed:
            delta = self._keyed(op, delta, [(k, p[i]) for k, p in zip(keys, op.keys) if not is_identifier(p[i])])
        if j.probe_as:
            delta, keys = self._probe_as(delta, keys, j.probe_as, fits_only)
        return delta, keys

    def _probe_as(self, delta: pa.Table, keys: list[str], types: Sequence[pa.DataType | None],
                  fits_only: bool = True) -> tuple[pa.Table, list[str]]:
        """``delta`` with its keys of another type than the state's as the state's, in
        columns ``__p<n>``, less the rows whose key equals no value of that type."""
        ok = np.ones(delta.num_rows, bool)
        out = list(keys)
        midnights = partial(self._midnights, self.plan.zone)
        for n, (key, kind) in enumerate(zip(keys, types)):
            if kind is not None:
                values, fits = kernels.as_probe(delta.column(key), kind, midnights)
                delta = delta.append_column(f"__p{n}", values)
                out[n] = f"__p{n}"
                ok &= fits
        return (delta if ok.all() or not fits_only else delta.filter(pa.array(ok))), out

    def _midnights(self, zone: str) -> kernels.Midnights:
        if self._spark is None:
            raise NotArranged("a DATE compared with a TIMESTAMP key needs Spark's calendar")
        return zsets.midnights(self._spark, zone)

    def _keyed(self, op: Join, delta: pa.Table, exprs: list[tuple[str, str]]) -> pa.Table:
        """``delta`` with computed key columns ``(name, Spark SQL)`` appended: by Arrow
        where the plan compiled them, else by a Spark pass."""
        compiled = self.plan.join_keys.get(op.id)
        if compiled is not None:
            try:
                columns = [expressions.as_column(f(delta), delta.num_rows) for f in compiled]
                return pa.Table.from_arrays([*delta.columns, *columns],
                                            names=[*delta.column_names, *(n for n, _ in exprs)])
            except _ARROW_DECLINES:
                pass
        out = self._spark_pass(delta, lambda df: df.selectExpr(*map(quote, df.columns),
                                                               *(f"{e} AS {quote(n)}" for n, e in exprs)))
        return out.cast(pa.schema(list(delta.schema) + list(out.schema)[delta.num_columns:]))

    @_eval.register
    def _(self, op: GroupDiff) -> pa.Table | None:
        if not op.linear:
            extremes = self.plan.extremes.get(op.id)
            if extremes is not None:
                return self._extremes(op, extremes)
            return self._recompute(op, partial(self._regroup, op))
        found = self._sums(op)
        if found is None:
            return self._no_rows(op)
        touched, groups = found
        return self._retract(op, touched, self._finished(op, groups))

    def _sums(self, op: GroupDiff) -> tuple[pa.Table, pa.Table] | None:
        """A linear aggregate's touched groups (:meth:`_partial_rows`) and their partial
        sums in all, one row per group (Spark's where Arrow's leave their type, a DECIMAL's
        38 digits); None when its input did not change."""
        found = self._partial_rows(op)
        if found is None:
            return None
        touched, rows = found
        keys = list(op.keys)
        try:
            return touched, kernels.group_sums(rows, keys)
        except _ARROW_DECLINES:
            sums = [c for c in rows.column_names if c not in keys]
            out = self._spark_pass(rows, lambda df: df.groupBy(*map(quote, keys)).agg(
                *(F.sum(quote(c)).alias(c) for c in sums)), op.label(), op.id if self._between(op, True) else None,
                rows=True)
            return touched, out.select(rows.column_names).cast(rows.schema)

    def _partial_rows(self, op: GroupDiff) -> tuple[pa.Table, pa.Table] | None:
        """A linear aggregate's touched groups (this tick's partial sums, or their keys
        where a group's sum is in several rows: :func:`.kernels.fitted`), and their partial
        sums stored and this tick's, to be summed per group."""
        dp = self.value(op.delta)
        if dp is None or dp.num_rows == 0:
            return None
        before = op.before
        assert isinstance(before, Delay)
        keys = list(op.keys)
        touched = kernels.distinct_keys(dp, keys) if kernels.split(dp) else dp
        _, old = self._runs.probe(self._arr[before.input.id][op.keys], touched, keys, [True] * len(keys))
        rows = dp if old is None else pa.concat_tables([old, dp.cast(old.schema)], promote_options="permissive")
        return touched, rows.select([c for c in rows.column_names if c != kernels.HASH])

    def _finished(self, op: GroupDiff, groups: pa.Table) -> pa.Table:
        """A linear aggregate's rows from its groups' partial sums."""
        keys = list(op.keys)
        rows = self.plan.schema(op.delta.input)  # type: ignore[attr-defined]
        new = kernels.finish(groups, keys, op.aggs, zsets.arrow_schema(rows), ansi=self.ansi)
        if new is not None:
            try:
                return self._conform(op, new)
            except _ARROW_DECLINES:  # an integer sum out of its type's range: Spark decides (ANSI on)
                new = None
        if new is None:
            types = zsets.arg_types(rows, op.aggs)
            new = self._in_spark(op, groups, lambda df: zsets.finish(df, keys, op.aggs, types), rows=True).select(
                list(op.columns) + [WEIGHT])
        return self._conform(op, new)

    @_eval.register
    def _(self, op: WindowDiff) -> pa.Table | None:
        top = self.plan.tops.get(op.id)
        if top is not None:
            return self._top(op, top)
        return self._recompute(op, partial(self._window, op))

    def _top(self, op: WindowDiff, top: TopPlan) -> pa.Table | None:
        """A top-k over the whole input from the end of its ordered arrangement: the rows
        at or beyond a cut, widened until k of them survive this tick's change (every row
        ranked above the k-th is then among them), recomputed, minus what was emitted."""
        delta = self.value(op.delta)
        if delta is None:
            return None
        rows = self._end(self.plan.before[op.id], delta, top.column, top.stored, top.desc, top.k, every=False)
        if rows is None:  # every row with a value: NULLs may rank in too
            return self._recompute(op, partial(self._window, op))
        return self._retract(op, pa.table({ROW: [0]}), self._window(op, rows))

    def _extremes(self, op: GroupDiff, extremes: Sequence[Extreme]) -> pa.Table | None:
        """A keyless MIN/MAX from the ends of its input's ordered arrangements: per
        aggregate the rows at or beyond a cut with this tick's rows there (:meth:`_end`),
        aggregated together (each one's extreme is among its rows, and the others' rows are
        rows of the input too), minus the row emitted before."""
        delta = self.value(op.delta)
        if delta is None or delta.num_rows == 0:
            return self._no_rows(op)
        side = self.plan.before[op.id]
        ends = [self._end(side, delta, e.column, e.stored, e.desc, 1, every=True) for e in extremes]
        return self._retract(op, pa.table({ROW: [0]}), self._regroup(op, kernels.consolidate(kernels.concat(ends))))

    def _end(self, side: Side, delta: pa.Table, column: str, stored: str, desc: bool, k: int, *,
             every: bool) -> pa.Table | None:
        """The input's rows whose ``column`` (the integral's ``stored``, kept ordered) is at
        or beyond a cut (the smallest values, or the largest when ``desc``), with the
        delta's rows there, consolidated: the cut widened until ``k`` of them survive this
        tick's change. When no run has that many rows, every row with a value if
        ``every``, else None."""
        arr = self._arr[self.plan.state_of(side.integral)][(kernels.ORDERED, stored)]
        runs = [self._runs.read(r) for b in arr.runs for r in b]
        want = k + delta.num_rows
        while True:
            parts, cut = kernels.beyond(runs, stored, desc, want)
            if cut is None and not every:
                return None
            near = delta if cut is None else delta.filter(
                (pc.greater_equal if desc else pc.less_equal)(delta.column(column), cut))
            kept = kernels.concat(parts)
            self.rows_read += 0 if kept is None else kept.num_rows
            if kept is not None:
                for step in side.chain:
                    kept = self.row_wise(step, kept)
            rows = kernels.consolidate(kernels.concat([kept.cast(delta.schema) if kept is not None else None, near]))
            if cut is None or (pc.sum(pc.max_element_wise(rows.column(WEIGHT), 0)).as_py() or 0) >= k:
                return rows
            want *= 4

    def _window(self, op: WindowDiff, rows: pa.Table) -> pa.Table | None:
        """The window's rows over the touched partitions' ``rows``, as a consolidated Z-set."""
        if rows.num_rows == 0:
            return None
        spec = self.plan.windows.get(op.id)
        out = None
        if isinstance(spec, Windows):
            out = self._parts(op, spec.parts, rows)
        elif spec is not None:
            out = self._part(op, spec, rows)
        if spec is None or out is None:  # no Arrow form, or Spark's semantics decide on these rows
            return self._in_spark(op, rows,
                                  lambda df: zsets.window_diff(None, df, None, op.partition, op.funcs, op.keep),
                                  rows=spec is not None)
        if spec.keep is not None:
            out = out.filter(expressions.as_column(spec.keep(out), out.num_rows))
        return self._conform(op, kernels.consolidate(out))

    def gathered(self, op: GroupDiff | WindowDiff) -> tuple[pa.Table | None, pa.Table | None]:
        """What a window or an aggregate Spark computes between two stages of a tick in
        tasks needs of the state: the rows it computes over (a window's touched partitions'
        rows, stored and this tick's; an aggregate's touched groups' rows, or partial sums
        if linear, stored and this tick's), and the retraction of the rows emitted for them
        before (None: no change)."""
        found = self._partial_rows(op) if isinstance(op, GroupDiff) and op.linear else self._touched(op)
        if found is None:
            return None, None
        touched, rows = found
        return rows, self._retract(op, touched, None)

    def _part(self, op: WindowDiff, spec: Ranking | Totals, rows: pa.Table) -> pa.Table | None:
        """The rows of the Z-set ``rows`` with the columns of one window specification's
        functions (None: Spark's semantics decide)."""
        if isinstance(spec, Ranking):
            ranked = windows.ranks(kernels.expand(rows), spec.partition, spec.order, spec.funcs, ansi=self.ansi,
                                   legacy_stats=self.legacy_stats)
            return None if ranked is None else kernels.inserted(ranked)
        return windows.totals(rows, spec.partition, spec.aggs, self.arrow_schema(op), ansi=self.ansi,
                              legacy_stats=self.legacy_stats)

    def _parts(self, op: WindowDiff, parts: Sequence[Ranking | Totals], rows: pa.Table) -> pa.Table | None:
        """The rows of ``rows`` with the columns of every part, each over the same rows:
        numbered, so that each part's columns (its rows in its own order) line up."""
        bag = kernels.expand(rows)
        numbered = kernels.inserted(bag.append_column(NUMBER, pa.array(np.arange(bag.num_rows))))
        columns: dict[str, pa.ChunkedArray] = {}
        for part in parts:
            out = self._part(op, part, numbered)
            if out is None:
                return None
            out = out.take(pc.sort_indices(out.column(NUMBER)))
            columns |= {n: out.column(n) for n in out.column_names if n not in numbered.column_names}
        names = [n for n, _ in op.funcs]
        return pa.table({c: bag.column(c) for c in bag.column_names} | {n: columns[n] for n in names}
                        | {WEIGHT: kernels.ones(bag.num_rows)})

    def _regroup(self, op: GroupDiff, rows: pa.Table) -> pa.Table:
        new = kernels.regroup(rows, op.keys, op.aggs, self.arrow_schema(op), ansi=self.ansi,
                              legacy_stats=self.legacy_stats)
        if new is None:
            types = zsets.arg_types(self.plan.schema(op.delta), op.aggs)
            new = self._in_spark(op, rows, lambda df: zsets.group_diff(None, df, None, op.keys, op.aggs, False,
                                                                       types), rows=kernels.regroups(op.aggs))
        return new

    def _recompute(self, op: GroupDiff | WindowDiff, compute: Callable[[pa.Table], pa.Table | None]
                   ) -> pa.Table | None:
        """The touched groups' rows (their stored rows and this tick's), recomputed by
        ``compute``, minus what was emitted for them before. The touched keys are distinct
        as Spark groups them (-0.0 is 0.0, every NaN one): each group is read and
        retracted once, however many spellings of its key the delta holds."""
        found = self._touched(op)
        if found is None:
            return self._no_rows(op)
        touched, rows = found
        return self._retract(op, touched, compute(rows))

    def _touched(self, op: GroupDiff | WindowDiff) -> tuple[pa.Table, pa.Table] | None:
        """The groups this tick's delta touches (distinct keys), and their rows: stored and
        this tick's, consolidated; None when the input did not change."""
        delta = self.value(op.delta)
        if delta is None or delta.num_rows == 0:
            return None
        keys = list(group_keys(op))
        touched = kernels.aggregate(delta.select(keys), keys, []) if keys else pa.table({ROW: [0]})
        _, old = self._read(self.plan.before[op.id], touched, keys, keys, [True] * len(keys))
        return touched, kernels.consolidate(kernels.concat([old.cast(delta.schema) if old is not None else None,
                                                            delta]))

    def _no_rows(self, op: GroupDiff | WindowDiff) -> pa.Table | None:
        """No change of an operator whose input did not change: but on the first tick a
        keyless aggregate over no rows has its one row (COUNT 0, SUM NULL): a linear one's
        from partial sums of no rows (all NULL), another's aggregated over no rows."""
        if self.first and isinstance(op, GroupDiff) and not op.keys:
            none = self.arrow_schema(op.delta)
            if op.linear:
                return self._finished(op, pa.table({f.name: pa.nulls(1, f.type) for f in none}, schema=none))
            return self._regroup(op, none.empty_table())
        return None

    def _retract(self, op: Operator, touched: pa.Table, new: pa.Table | None) -> pa.Table | None:
        """``new`` minus the rows ``op`` emitted before for the ``touched`` groups."""
        keys = list(group_keys(op))
        _, prior = self._runs.probe(self._arr[op.id][tuple(keys)], touched, keys, [True] * len(keys))
        if prior is None:
            return new
        prior = kernels.negate(prior)
        return kernels.consolidate(prior if new is None else kernels.concat([prior.cast(new.schema), new]))

    def state_delta(self, state: Operator) -> pa.Table | None:
        """What a state node adds this tick, as stored: consolidated, partial sums as they are."""
        if isinstance(state, Recompute):
            return self.value(state)
        assert isinstance(state, Integral)
        t = self.value(state.input)
        if t is None or isinstance(state.input, Partials):
            return t
        return kernels.sum_by(t, state.key) if state.key is not None else kernels.consolidate(t)

