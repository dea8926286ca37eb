"""The arranged plan of a circuit: decided once per circuit (and again when it changes),
whether every operator can run on arrangements, which integrals are arranged by which
key (:class:`Spec`), and what each stateful operator reads of its state: a join's
probed side (:class:`JoinPlan`), a temporal filter's ranges (:class:`TemporalPlan`), a
top-k's or a keyless MIN/MAX's ordered end (:class:`TopPlan`, :class:`Extreme`), the
functions of a window Arrow computes (:class:`Ranking`, :class:`Totals`), and the rows
that expire (:class:`Expiry`). No tick runs here: :mod:`.arranged` evaluates one
over the plan, in the driver or inside Spark tasks (:mod:`.spark.tasks`), and the plan
decides placement, not semantics.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from functools import partial
from typing import AbstractSet, Any, Callable, Mapping, NamedTuple, Sequence

import pyarrow as pa
import sqlglot
from pyspark.sql.types import DataType, StructType, TimestampNTZType, TimestampType
from sqlglot import exp

from ..circuit.operators import (
    MOMENTS,
    WEIGHT,
    AggCall,
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
    walk,
)
from ..sql.predicates import conjuncts, key_terms, normalized
from ..sql.relations import DIALECT
from ..sql.validate import AGGREGATES
from ..sql.temporal import CLOCK, CLOCK_COLUMN
from .arrow import expressions, kernels, windows
from .spark import zsets

_CAST = re.compile(r"^CAST\((`(?:[^`]|``)+`) AS (.+)\)$", re.S)


class NotArranged(Exception):
    """Why a circuit (or a tick) takes the DataFrame path."""


class DeclinedRows(NotArranged):
    """A decline of one tick's rows, not of the circuit (an aggregate or window whose
    values Spark decides: an overflow, a RANGE frame over NULLs) where Spark is not at hand
    (in a task): that tick goes elsewhere, the next one is tried in tasks again."""


class NeedsSpark(DeclinedRows):
    """A Map's columns or a Filter's predicate that Arrow declines on a tick's rows (an
    overflow, a division by zero, a string that does not cast), or a window's functions
    (a running sum leaving its type, a RANGE bound past a type's limit), where Spark is not
    at hand (in a task): the tick runs again with Spark computing that node between stages
    (:func:`.tasks.layout`), so its answer, or its error, is Spark's."""

    def __init__(self, node: str, why: str):
        super().__init__(f"{why} [node {node}]")
        self.node = node


def unquote(identifier: str) -> str:
    return identifier[1:-1].replace("``", "`")




@dataclass(frozen=True)
class Side:
    """State read through row-wise operators: ``integral`` (before this tick, or including
    it when ``after``), then ``chain`` (Maps and Filters, innermost first). ``rename[c]``
    is the integral's column that the side's column ``c`` copies, for the columns that
    are copies: only those can be probed."""

    integral: Integral
    after: bool
    chain: tuple[Operator, ...]
    rename: dict[str, str]

    def key(self, columns: Sequence[str]) -> tuple[str, ...]:
        computed = [c for c in columns if c not in self.rename]
        if computed:
            raise NotArranged(f"the key {computed} is computed over state")
        return tuple(self.rename[c] for c in columns)


@dataclass(frozen=True)
class JoinPlan:
    """A join of a delta with ``state``, the right side when ``state_right``."""

    state: Side
    state_right: bool
    null_safe: tuple[bool, ...]
    residual: bool
    computed: bool  # a key of the delta's side is an expression: Spark computes it first
    unkeyed: str | None = None  # why its state cannot be probed: a tick where its delta has rows takes Spark's job
    #: per key pair, the state key's type where the delta's key has another (:func:`kernels.as_probe`)
    probe_as: tuple[pa.DataType | None, ...] = ()
    probed: tuple[str, ...] = ()  # the key of the state's arrangement the delta probes (when keyed)


@dataclass(frozen=True)
class TemporalPlan:
    """A temporal filter whose rows are ``state``, kept ordered by the integral's
    ``column``; ``bounds`` compute, from the clock's rows, what the column is compared with;
    ``lower`` are the bounds below which a row is false, that never decrease as the time
    moves on (``c > now() - INTERVAL 1 HOUR``): once below one, a row is false for good."""

    state: Side
    column: str
    bounds: tuple[expressions.Compiled, ...]
    lower: tuple[expressions.Compiled, ...] = ()


@dataclass(frozen=True)
class Expiry:
    """The rows of a state node that every reader (each a temporal filter) excludes now
    and at every later time: ``column`` below :meth:`threshold`, or NULL. ``readers`` are
    each reader's lower bounds over the clock's row (``clock``: its Arrow schema)."""

    column: str
    clock: pa.Schema
    readers: tuple[tuple[expressions.Compiled, ...], ...]

    def threshold(self, now: datetime) -> pa.Scalar | None:
        """The least value a row's column needs to be true for some reader at ``now`` or
        later: the smallest over readers of the largest of each one's lower bounds."""
        clock = pa.Table.from_pylist([{c: 1 if c == WEIGHT else now for c in self.clock.names}], schema=self.clock)
        out = None
        for bounds in self.readers:
            values = [expressions.as_column(f(clock), 1)[0] for f in bounds]
            if any(not v.is_valid for v in values):
                return None
            high = max(values, key=lambda v: v.as_py())
            out = high if out is None or high.as_py() < out.as_py() else out
        return out


@dataclass(frozen=True)
class TopPlan:
    """A top-k without partitions whose first order term is ``column`` of the input (the
    integral's ``stored``), NULLs last: read from the ordered arrangement's end."""

    column: str
    stored: str
    desc: bool
    k: int


@dataclass(frozen=True)
class Extreme:
    """A keyless MIN (or MAX, ``desc``) of the input's ``column`` (the integral's
    ``stored``): read from an end of the input kept ordered by it."""

    column: str
    stored: str
    desc: bool


@dataclass(frozen=True)
class Ranking:
    """A window Arrow computes: functions of ordered rows (:data:`windows.RANKINGS`,
    :data:`windows.VALUES`) ``OVER (PARTITION BY partition ORDER BY order)``, rows kept
    where ``keep`` holds."""

    funcs: tuple[windows.Ordered, ...]
    partition: tuple[str, ...]
    order: tuple[tuple[str, bool, bool], ...]  # (column, descending, nulls first)
    keep: expressions.Compiled | None


@dataclass(frozen=True)
class Totals:
    """A window Arrow computes: aggregates over whole partitions, ``agg(x) OVER (PARTITION
    BY partition)`` (no ORDER BY: every row of a partition has its group's values), rows
    kept where ``keep`` holds."""

    aggs: tuple[AggCall, ...]
    partition: tuple[str, ...]
    keep: expressions.Compiled | None


@dataclass(frozen=True)
class Windows:
    """A window Arrow computes whose functions have several specifications (a running
    total by date and a rank by amount in one SELECT): each part over the same touched
    partitions' rows, their columns side by side, rows kept where ``keep`` holds."""

    parts: tuple[Ranking | Totals, ...]
    keep: expressions.Compiled | None


@dataclass(frozen=True)
class Spec:
    """An arrangement a circuit needs: state node ``node`` by ``key``."""

    node: str
    key: tuple[str, ...]
    additive: bool


class Plan:
    """What the arranged path needs to know about a circuit, found once."""

    def __init__(self, states: Sequence[Operator], same: Mapping[str, str], schema: Callable[[Operator], StructType],
                 types: Callable[[Operator, list[str]], list[pa.DataType]], zone: str = "UTC",
                 keep: AbstractSet[str] = frozenset(), midnights: expressions.Calendar | None = None):
        self.same = same
        self.schema = schema
        self.types = types  # Spark's types of expressions over a node's columns
        self.zone = zone  # Spark's session time zone
        self.midnights = midnights  # when each day starts there, for casts between DATE and TIMESTAMP
        self.specs: dict[tuple[str, tuple[str, ...]], Spec] = {}
        self.joins: dict[str, JoinPlan] = {}
        self.before: dict[str, Side] = {}  # per-group recompute: the input's integral
        self.renames: dict[str, list[tuple[str, str]] | None] = {}
        self.predicates: dict[str, expressions.Compiled] = {}  # filters and join conditions Arrow evaluates
        self.values: dict[str, list[tuple[str, expressions.Compiled]]] = {}  # Maps Arrow computes
        self.windows: dict[str, Ranking | Totals | Windows] = {}  # windows Arrow computes
        self.join_keys: dict[str, list[expressions.Compiled]] = {}  # a join's computed delta keys Arrow computes
        self.temporal: dict[str, TemporalPlan] = {}  # temporal filters read by ranges of their state
        self.tops: dict[str, TopPlan] = {}  # top-k without partitions read from an ordered end
        self.extremes: dict[str, tuple[Extreme, ...]] = {}  # keyless MIN/MAX read from ordered ends
        #: temporal filters over a source's rows with lower edges: (source, edges as an Expiry)
        self.guards: dict[str, tuple[str, Expiry]] = {}
        for op in walk(*states):
            self._check(op)
        self.expiry = self._expiries(states, keep)  # state nodes rows leave for good as the time moves

    def portable(self, states: Sequence[Operator]) -> Plan:
        """This plan for a Spark task: the node schemas looked up, not asked of the
        session (the task has none); planning is over, so no expression types are asked."""
        schemas = {}
        ops = list(walk(*states))
        ops += [op.joined for op in ops if isinstance(op, Temporal)]  # evaluated in a filter's place
        for op in ops:
            try:
                schemas[op.id] = self.schema(op)
            except NotArranged:
                pass
        out = copy.copy(self)
        out.schema = lambda op: schemas[op.id]  # type: ignore[method-assign]
        out.types = _no_types  # type: ignore[method-assign]
        out.midnights = None  # asked of the session; compiled expressions hold what they asked
        return out

    def state_of(self, integral: Integral) -> str:
        return self.same.get(integral.id, integral.id)

    def need(self, node: str, key: tuple[str, ...], additive: bool = False) -> None:
        """Keep state node ``node`` arranged by ``key``."""
        self.specs[(node, key)] = Spec(node, key, additive)

    def note(self, op: Operator) -> str | None:
        """What this plan does at ``op`` (for :func:`~.operators.explain`): the arrangements
        of a state node, how a join or a group reads the state, what Arrow computes and what
        Spark does instead."""
        node = self.same.get(op.id, op.id)
        keys = [_key_text(s) for s in self.specs.values() if s.node == node]
        arranged = f"arranged by {', '.join(keys)}" if keys else None
        if isinstance(op, (GroupDiff, WindowDiff)):
            if isinstance(op, GroupDiff) and op.linear:
                said = "partial sums of the touched groups"
            elif op.id in self.tops:
                top = self.tops[op.id]
                said = f"the first {top.k} rows read from the {'top' if top.desc else 'bottom'} of {top.stored}"
            elif op.id in self.extremes:
                said = "the rows read from the " + ", ".join(
                    f"{'top' if e.desc else 'bottom'} of {e.stored}" for e in self.extremes[op.id])
            else:
                said = f"the touched groups' rows read by ({', '.join(group_keys(op))})"
            if isinstance(op, WindowDiff):
                said += ", " + _window_text(self.windows.get(op.id))
            return said + (f"; output {arranged}" if arranged else "")
        if arranged or isinstance(op, (Integral, Recompute)):
            return arranged
        if isinstance(op, Join) and op.id in self.joins:
            j = self.joins[op.id]
            side = "right" if j.state_right else "left"
            said = (f"Spark probes ({j.unkeyed})" if j.unkeyed else
                    f"the delta probes the {side} side's state by {_key_text(j.probed)}")
            if j.probe_as:
                said += " (the delta's keys as " + ", ".join(str(t) for t in j.probe_as if t is not None) + ")"
            if j.computed:
                said += ", the delta's keys computed " + ("in Arrow" if op.id in self.join_keys else "by Spark")
            if j.residual:
                said += ", the rest of ON " + ("in Arrow" if op.id in self.predicates else "by Spark")
            return said
        if isinstance(op, Temporal):
            t = self.temporal.get(op.id)
            return f"rows read by ranges of {t.column} as the time moves" if t is not None else None
        if isinstance(op, Map) and self.renames.get(op.id) is not None:
            return None  # columns renamed: nothing computed
        if isinstance(op, (Map, Filter)):
            return "by Spark" if self.by_spark(op) else "in Arrow"
        return "in Arrow" if isinstance(op, Generate) else None

    def by_spark(self, op: Operator) -> bool:
        """Whether Spark computes a Map's columns, a Filter's predicate, a window's
        functions or an aggregate's: Arrow has no form of them (in tasks, Spark between two
        stages does: a projection, or a window over the touched partitions' or groups' rows)."""
        if isinstance(op, Filter):
            return op.id not in self.predicates
        if isinstance(op, WindowDiff):
            return op.id not in self.windows
        if isinstance(op, GroupDiff):
            return not op.linear and not kernels.regroups(op.aggs)
        return isinstance(op, Map) and self.renames.get(op.id) is None and op.id not in self.values

    def _check(self, op: Operator) -> None:
        if isinstance(op, Filter):
            self._predicate(op, op.predicate, op.input)
            return
        if isinstance(op, (Input, Plus, Partials, Integral, Delay, Scale, Pad, Generate)):
            return
        if isinstance(op, Map):
            self.renames[op.id] = self._renames(op)
            if self.renames[op.id] is None:
                self._values(op)
            return
        if isinstance(op, GroupDiff) and op.linear:
            before = op.before
            if not (isinstance(before, Delay) and before.input.key == op.keys):
                raise NotArranged(f"{op.label()}: its partial sums are not a keyed integral")
            self.need(before.input.id, op.keys, True)
            self.need(op.id, op.keys, False)
            return
        if isinstance(op, (GroupDiff, WindowDiff)):
            keys = group_keys(op)
            side = self._side(op.before)
            if side is None or side.integral.key is not None:
                raise NotArranged(f"{op.label()}: its input is not kept as rows")
            self.before[op.id] = side
            if isinstance(op, GroupDiff):
                self._extremes(op, side)
            if op.id not in self.extremes:  # read by its keys (the extremes are read by their values)
                self.need(self.state_of(side.integral), side.key(keys), False)
            self.need(op.id, keys, False)
            if isinstance(op, WindowDiff):
                self._window(op)
                self._top(op, side)
            return
        if isinstance(op, Temporal):
            found = self._temporal(op)
            if found is None:  # the rows are the delta (or no range bounds the change): as the join
                self._check(op.joined)
            else:
                self.temporal[op.id] = found
                self._predicate(op.joined, op.on, op.joined)
            return
        if isinstance(op, Join):
            self.joins[op.id] = self._join(op)
            if self.joins[op.id].residual:
                self._predicate(op, op.on, op)
            return
        raise NotArranged(f"{op.label()} has no arranged form yet")

    def _predicate(self, op: Operator, predicate: str, over: Operator) -> None:
        compiled = expressions.predicate(predicate, zsets.arrow_schema(self.schema(over)),
                                         partial(self.types, over), self.zone, self.midnights)
        if compiled is not None:
            self.predicates[op.id] = compiled

    def _window(self, op: WindowDiff) -> None:
        """Arrow's form of a window over PARTITION BY (and ORDER BY) of columns, kept by a
        predicate Arrow evaluates: per window specification of its functions (each one
        part, :class:`Windows` when there are several), functions of ordered rows
        (:class:`Ranking`; with the default frame, or the whole partition for FIRST_VALUE,
        LAST_VALUE and NTH_VALUE; aggregates of columns over any frame :func:`_frame`
        reads), or aggregates of columns over whole partitions without ORDER BY
        (:class:`Totals`). Other frames (of months, of expressions) are Spark's to decide
        (or refuse), and with one of them the whole window."""
        found = [(name, sqlglot.parse_one(sql, read=DIALECT)) for name, sql in op.funcs]
        calls = [(name, w) for name, w in found if isinstance(w, exp.Window) and isinstance(_call(w), exp.Func)]
        if len(calls) != len(found):
            return
        types, out = zsets.arrow_schema(self.schema(op.delta)), zsets.arrow_schema(self.schema(op))
        keep = None
        if op.keep:
            keep = expressions.predicate(op.keep, out)
            if keep is None:
                return
        by_spec: dict[Any, list[tuple[str, exp.Window]]] = {}
        for name, w in calls:
            by_spec.setdefault((tuple(w.args.get("partition_by") or ()), w.args.get("order")), []).append((name, w))
        found_parts = [self._window_part(types, partition, order, members, out)
                       for (partition, order), members in by_spec.items()]
        parts = [p for p in found_parts if p is not None]
        if len(parts) == len(found_parts):
            self.windows[op.id] = replace(parts[0], keep=keep) if len(parts) == 1 else Windows(tuple(parts), keep)

    def _window_part(self, types: pa.Schema, partition: tuple[exp.Expr, ...], order: exp.Order | None,
                     calls: list[tuple[str, exp.Window]], out: pa.Schema) -> Ranking | Totals | None:
        """The functions ``calls`` of one window specification as Arrow computes them (kept
        by no predicate; ``out``: the window's columns), or None."""
        terms = [o.this for o in order.expressions] if order else []
        if not all(isinstance(c, exp.Column) and c.name in types.names for c in (*partition, *terms)):
            return None
        # per function: its frame; whether it is one at all, and one of the whole partition
        order_kind = types.field(terms[0].name).type if len(terms) == 1 else None
        frames = [_frame(w.args.get("spec"), order_kind) for _, w in calls]
        framed = [w.args.get("spec") is not None for _, w in calls]
        whole = [f and frame == WHOLE_PARTITION for f, frame in zip(framed, frames)]
        by = tuple(c.name for c in partition)
        if order and all(not f or (all_of and _call(w).sql_name().lower() in windows.WHOLE)
                         or type(_call(w)) in AGGREGATES and frame is not None
                         for f, all_of, frame, (_, w) in zip(framed, whole, frames, calls)):
            ordered = [_ordered(name, _call(w), types, out.field(name).type, all_of, frame,
                                isinstance(w.this, exp.IgnoreNulls))
                       for (name, w), all_of, frame in zip(calls, whole, frames)]
            funcs = tuple(f for f in ordered if f is not None)
            if len(funcs) != len(ordered):
                return None
            assert order is not None
            return Ranking(funcs, by, tuple((o.this.name, bool(o.args.get("desc")), bool(o.args.get("nulls_first")))
                                            for o in order.expressions), None)
        if not order and all(not f or w for f, w in zip(framed, whole)) and all(
                type(_call(w)) in AGGREGATES and _column_arg(_call(w), types.names) is not None for _, w in calls):
            return Totals(tuple(AggCall(name, AGGREGATES[type(_call(w))], _column_arg(_call(w), types.names) or None)
                                for name, w in calls), by, None)
        return None

    def _top(self, op: WindowDiff, side: Side) -> None:
        """A top-k over the whole input (``ORDER BY … LIMIT k``) whose first order term puts
        NULLs last and orders numbers, dates or times exactly: kept also ordered by it."""
        spec = self.windows.get(op.id)
        if op.partition or not isinstance(spec, Ranking) or spec.partition or not op.keep \
                or [f.func for f in spec.funcs] != ["row_number"]:
            return
        column, desc, nulls_first = spec.order[0]
        kind = zsets.arrow_schema(self.schema(op.delta)).field(column).type
        k = _limit(op.keep, spec.funcs[0].name)
        if nulls_first or k is None or column not in side.rename or not kernels.orders_exactly(kind):
            return
        self.need(self.state_of(side.integral), (kernels.ORDERED, side.rename[column]))
        self.tops[op.id] = TopPlan(column, side.rename[column], desc, k)

    def _extremes(self, op: GroupDiff, side: Side) -> None:
        """A keyless aggregate of MIN and MAX alone, of columns whose values Arrow orders
        exactly (integers, dates, times, decimals of up to 18 digits): each read from an
        end of the input kept ordered by its column, not the whole input every tick."""
        kinds = zsets.arrow_schema(self.schema(op.delta))
        if op.keys or not all(a.func in ("min", "max") and a.arg in side.rename
                              and kernels.orders_exactly(kinds.field(a.arg).type) for a in op.aggs):
            return
        found = tuple(Extreme(a.arg, side.rename[a.arg], a.func == "max") for a in op.aggs if a.arg is not None)
        for e in found:
            self.need(self.state_of(side.integral), (kernels.ORDERED, e.stored))
        self.extremes[op.id] = found

    def _values(self, op: Map) -> None:
        """Arrow's form of a Map's expressions, when every one has one."""
        copies = self._copies(op)
        schema = zsets.arrow_schema(self.schema(op.input))
        out = []
        for name, e in op.exprs:
            f = (_pick(copies[name]) if name in copies
                 else expressions.value(e, schema, partial(self.types, op.input), self.zone, self.midnights))
            if f is None:
                return
            out.append((name, f))
        self.values[op.id] = out

    def _copies(self, op: Map) -> dict[str, str]:
        """Output column → the input column it copies, maybe cast to the type it has."""
        types = {f.name: f.dataType.simpleString() for f in self.schema(op.input).fields}
        out = {}
        for name, e in op.exprs:
            if is_identifier(e):
                out[name] = unquote(e)
                continue
            m = _CAST.match(e)
            if m and is_identifier(m.group(1)) and types.get(unquote(m.group(1))) == m.group(2).strip().lower():
                out[name] = unquote(m.group(1))
        return out

    def _renames(self, op: Map) -> list[tuple[str, str]] | None:
        """(output, input column) when every expression is a copy; None when Spark must
        evaluate one."""
        copies = self._copies(op)
        return [(n, copies[n]) for n, _ in op.exprs] if len(copies) == len(op.exprs) else None

    def _side(self, op: Operator) -> Side | None:
        """``op`` as an integral under row-wise operators, or None when it is a delta."""
        chain, op = _unchained(op)
        if isinstance(op, Delay):
            integral, after = op.input, False
        elif isinstance(op, Integral):
            integral, after = op, True
        else:
            return None
        return Side(integral, after, tuple(reversed(chain)), self._renamed(integral.columns, chain))

    def _temporal(self, op: Temporal) -> TemporalPlan | None:
        """The ranges a temporal filter's state is read by when the time moves (see
        :meth:`_edges`); a row's truth can differ between the old and the new time only
        where the column lies between the value at the old and at the new time."""
        edges = self._edges(op)
        if edges is None:
            return None
        column, bounds, lower = edges
        source = self._source_copy(op.left, column)
        if source is not None and lower:
            clock = zsets.arrow_schema(self.schema(op.right))
            self.guards[op.id] = (source[0], Expiry(source[1], clock, (lower,)))
        state = self._side(op.left)
        if state is None or self._side(op.right) is not None or state.integral.key is not None:
            return None
        if column not in state.rename:
            return None
        self.need(self.state_of(state.integral), (kernels.ORDERED, state.rename[column]))
        return TemporalPlan(state, state.rename[column], bounds, lower)

    def _edges(self, op: Temporal
               ) -> tuple[str, tuple[expressions.Compiled, ...], tuple[expressions.Compiled, ...]] | None:
        """(column, bounds, lower bounds) of a temporal filter whose every condition that
        reads the clock compares one column of the rows with a value of the clock (``c >
        now() - INTERVAL 1 HOUR``, ``c BETWEEN … AND …``, ``c = …``); the lower bounds are
        those the column must reach that never decrease as the time moves on."""
        rows, clock = set(op.left.columns), set(op.right.columns)
        column: str | None = None
        bounds: list[str] = []
        lower: list[str] = []  # bounds the column must reach (or pass)
        for t in conjuncts(sqlglot.parse_one(op.on, read=DIALECT)):
            if not {c.name for c in t.find_all(exp.Column)} & clock:
                continue  # the same at every time
            if isinstance(t, exp.Between):
                pairs = [(t.this, t.args["low"], True, False), (t.this, t.args["high"], False, False)]
            elif isinstance(t, (exp.GT, exp.GTE, exp.EQ)):
                pairs = [(t.left, t.right, True, isinstance(t, exp.GT))] + (
                    [(t.left, t.right, False, False)] if isinstance(t, exp.EQ) else [])
            elif isinstance(t, (exp.LT, exp.LTE)):
                pairs = [(t.left, t.right, False, isinstance(t, exp.LT))]
            else:
                return None
            for a, b, below, strict in pairs:
                if not (isinstance(a, exp.Column) and a.name in rows or self._day_of(op.left, a)):
                    a, b, below = b, a, not below  # the rows' column (or its day) on the left
                if (day := self._day_of(op.left, a)) is not None:
                    # the day of a time compared with a day: the time compared with the
                    # instant that day (or the next) starts, as Spark casts a DATE to it
                    a, b = exp.column(day), _day_start(b, below == strict, self.schema(op.left)[day].dataType)
                if not (isinstance(a, exp.Column) and a.name in rows) or not (
                        {c.name for c in b.find_all(exp.Column)} <= clock) or column not in (None, a.name):
                    return None
                column = a.name
                bounds.append(b.sql(DIALECT))
                if below and (time := _clock_column(op.right)) is not None and _nondecreasing(b, time):
                    lower.append(b.sql(DIALECT))
        if column is None:
            return None
        kind = zsets.arrow_schema(self.schema(op.left)).field(column).type
        if not (pa.types.is_timestamp(kind) or pa.types.is_date32(kind) or pa.types.is_integer(kind)):
            return None
        schema = zsets.arrow_schema(self.schema(op.right))
        compiled = [expressions.value(b, schema, partial(self.types, op.right), self.zone, self.midnights)
                    for b in bounds]
        if any(f is None for f in compiled) or any(t != kind for t in self.types(op.right, bounds)):
            return None
        return (column, tuple(compiled),  # type: ignore[arg-type]
                tuple(f for b, f in zip(bounds, compiled) if b in lower))  # type: ignore[misc]

    def _day_of(self, rows: Operator, e: exp.Expr) -> str | None:
        """The column of ``rows`` whose day ``e`` is (``CAST(ts AS DATE)``,
        ``to_date(ts)``), when that column is a TIMESTAMP or TIMESTAMP_NTZ."""
        if isinstance(e, exp.Cast) and e.to.is_type("date") or isinstance(e, exp.TsOrDsToDate) \
                and not e.args.get("format"):
            inner = e.this
            if isinstance(inner, exp.Column) and inner.name in rows.columns and isinstance(
                    self.schema(rows)[inner.name].dataType, (TimestampType, TimestampNTZType)):
                return inner.name
        return None

    def _source_copy(self, op: Operator, column: str) -> tuple[str, str] | None:
        """(source, its column) when ``op``'s rows are a source's rows (its delta or its
        integral) under row-wise operators and ``column`` copies one of its columns."""
        chain, op = _unchained(op)
        if isinstance(op, Delay):
            op = op.input
        if isinstance(op, Integral) and op.key is None:
            op = op.input
        if not isinstance(op, Input):
            return None
        rename = self._renamed(op.columns, chain)
        return (op.name, rename[column]) if column in rename else None

    def _renamed(self, columns: Sequence[str], chain: Sequence[Operator]) -> dict[str, str]:
        """Column → the column of ``columns`` it copies, after ``chain`` (innermost first)."""
        rename = {c: c for c in columns}
        for m in reversed(chain):
            if isinstance(m, Map):
                rename = {name: rename[src] for name, src in self._copies(m).items() if src in rename}
        return rename

    def _expiries(self, states: Sequence[Operator], keep: AbstractSet[str]) -> dict[str, Expiry]:
        """The state nodes whose every reader is a temporal filter with lower bounds on
        one column: rows below all of them can leave the state. ``keep``: nodes read
        whole from outside the circuit (views' contents, sources read back to diff)."""
        readers: dict[str, list[Operator]] = {}
        for op in walk(*states):
            if isinstance(op, (Map, Filter, Delay)):
                continue  # a step of a side's chain: its consumer reads the state
            for i in op.inputs:
                side = self._side(i)
                if side is not None:
                    readers.setdefault(self.state_of(side.integral), []).append(op)
        out = {}
        for node, ops in readers.items():
            plans = [self.temporal.get(op.id) for op in ops]
            columns = {p.column for p in plans if p is not None}
            if node in keep or len(columns) != 1 or any(p is None or not p.lower for p in plans):
                continue
            clock = zsets.arrow_schema(self.schema(ops[0].right))  # type: ignore[attr-defined]
            out[node] = Expiry(columns.pop(), clock, tuple(p.lower for p in plans))  # type: ignore[union-attr]
        return out

    def _join(self, op: Join) -> JoinPlan:
        left, right = self._side(op.left), self._side(op.right)
        if (left is None) == (right is None):
            raise NotArranged(f"{op.label()}: not a delta joined with an integral")
        null_safe, residual = _on(op)
        state, i = (right, 1) if right is not None else (left, 0)
        assert state is not None
        if state.integral.key is not None:
            raise NotArranged(f"{op.label()}: joins partial sums")
        try:  # a key computed over state has no arrangement (the planner makes keys columns of the state)
            if not all(is_identifier(pair[i]) for pair in op.keys):
                raise NotArranged("the key of its state side is an expression")
            probed = state.key([unquote(pair[i]) for pair in op.keys])
        except NotArranged as e:
            return JoinPlan(state, right is not None, null_safe, residual, False, f"{op.label()}: {e}")
        self.need(self.state_of(state.integral), probed, False)
        computed = not all(is_identifier(pair[1 - i]) for pair in op.keys)
        delta = op.left if right is not None else op.right
        if computed:
            schema = zsets.arrow_schema(self.schema(delta))
            compiled = [expressions.value(pair[1 - i], schema, partial(self.types, delta), self.zone, self.midnights)
                        for pair in op.keys if not is_identifier(pair[1 - i])]
            if all(f is not None for f in compiled):
                self.join_keys[op.id] = compiled  # type: ignore[assignment]
        # Spark compares keys of two types in their common type: the delta's keys become the state's
        ours = self.types(delta, [pair[1 - i] for pair in op.keys])
        theirs = self.types(op.right if right is not None else op.left, [pair[i] for pair in op.keys])
        mixed = [(a, b) for a, b in zip(ours, theirs) if a != b]
        plan = JoinPlan(state, right is not None, null_safe, residual, computed,
                        probe_as=tuple(b if a != b else None for a, b in zip(ours, theirs)) if mixed else (),
                        probed=probed)
        if any(not kernels.probes_as(a, b) for a, b in mixed):
            return replace(plan, unkeyed=f"{op.label()}: keys of types {mixed} are compared by Spark")
        return plan


def _window_text(spec: Ranking | Totals | Windows | None) -> str:
    if spec is None:
        return "the window by Spark"
    if isinstance(spec, Windows):
        return "; ".join(_window_text(p) for p in spec.parts)
    if isinstance(spec, Ranking):
        return ", ".join(_ordered_text(f) for f in spec.funcs) + " in Arrow"
    return ", ".join(f"{a.func.upper()}({a.arg or '*'})" for a in spec.aggs) + " of whole partitions in Arrow"


def _ordered_text(f: windows.Ordered) -> str:
    if f.func not in windows.RUNNING:
        return f.func.upper() + (" IGNORE NULLS" if f.ignore_nulls else "")
    call = f"{f.func.upper()}({f.arg or '*'})"
    if f.start is None and f.stop is None:
        return f"{call} of the partition"
    if f.start is None and (f.stop == 0 or not f.rows):
        return f"running {call}"
    start, stop = ("start" if f.start is None else f"{f.start:+}"), ("end" if f.stop is None else f"{f.stop:+}")
    return f"{call} over {'values' if f.by_value else 'rows'} {start}..{stop}"


def _key_text(spec: Spec | tuple[str, ...]) -> str:
    key = spec.key if isinstance(spec, Spec) else spec
    if key and key[0] == kernels.ORDERED:
        return f"order of {key[1]}"
    return f"({', '.join(key)})" + (" as sums" if isinstance(spec, Spec) and spec.additive else "")


def _no_types(op: Operator, exprs: list[str]) -> list[pa.DataType]:
    raise NotArranged("expression types are asked of Spark while planning only")


def _limit(keep: str, name: str) -> int | None:
    """The largest row number ``keep`` lets through (``name <= k``, ``< k``, ``= k``)."""
    found = []
    for t in conjuncts(sqlglot.parse_one(keep, read=DIALECT)):
        if isinstance(t, (exp.LTE, exp.LT, exp.EQ)) and isinstance(t.left, exp.Column) and t.left.name == name \
                and isinstance(t.right, exp.Literal) and t.right.this.isdigit():
            found.append(int(t.right.this) - (1 if isinstance(t, exp.LT) else 0))
    return min(found) if found else None


def _call(window: exp.Expression) -> Any:
    """The function a window calls (within its IGNORE NULLS)."""
    return window.this.this if isinstance(window.this, exp.IgnoreNulls) else window.this


def _ordered(name: str, func: exp.Func, columns: pa.Schema, kind: pa.DataType, whole: bool,
             frame: Frame | None = None, ignore_nulls: bool = False) -> windows.Ordered | None:
    """The kernels' form of a window function over ordered rows, or None: a ranking, a
    value function of a column whose result is that column's type (LAG/LEAD's offset a
    whole number, and their default NULL or a literal that type holds exactly), or an
    aggregate of a column over ``frame`` (:func:`_frame`) whose result is of the type
    :func:`windows.running` gives."""
    f = func.sql_name().lower()
    if ignore_nulls and f not in windows.VALUES:
        return None
    if f == "ntile":
        buckets = expressions.literal(func.this)
        ok = isinstance(buckets, int) and not isinstance(buckets, bool) and 0 < buckets < 2 ** 31
        return windows.Ordered(name, f, offset=buckets) if ok else None  # type: ignore[arg-type]
    if f in windows.RANKINGS:
        return windows.Ordered(name, f)
    arg = _column_arg(func, columns.names)
    if type(func) in AGGREGATES:
        agg = AGGREGATES[type(func)]
        if arg is None or agg not in windows.RUNNING or kind != _running_type(agg, columns.field(arg).type if arg
                                                                             else None):
            return None
        rows, start, stop, by_value = frame or Frame(False, None, 0)
        return windows.Ordered(name, agg, arg or None, rows=rows, start=start, stop=stop, by_value=by_value)
    if f not in windows.VALUES or not arg or columns.field(arg).type != kind:
        return None
    offset, default = func.args.get("offset"), func.args.get("default")
    n = 1 if offset is None else expressions.literal(offset)
    if not isinstance(n, int) or isinstance(n, bool) or ((f == "nth_value" or ignore_nulls) and n < 1):
        return None
    value = None
    if default is not None and not isinstance(default, exp.Null):
        literal = expressions.literal(default)
        if literal is None or isinstance(literal, bool) or isinstance(literal, str) != pa.types.is_string(kind):
            return None
        try:
            value = pa.scalar(Decimal(literal) if pa.types.is_decimal(kind) else literal, kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, OverflowError):
            return None
        if value.as_py() != literal:
            return None
    return windows.Ordered(name, f, arg, n, value, whole, ignore_nulls=ignore_nulls)


def _running_type(agg: str, arg: pa.DataType | None) -> pa.DataType | None:
    """The type :func:`windows.running` gives ``agg`` of a column of type ``arg`` (None:
    COUNT(*)), as Spark types it; None for an argument it does not aggregate."""
    if agg == "count":
        return pa.int64()
    assert arg is not None
    if agg in MOMENTS:
        numeric = pa.types.is_integer(arg) or pa.types.is_floating(arg) or pa.types.is_decimal(arg)
        return pa.float64() if numeric else None
    if agg in ("min", "max"):
        return None if pa.types.is_nested(arg) or pa.types.is_dictionary(arg) else arg
    if pa.types.is_floating(arg) or agg == "avg" and pa.types.is_integer(arg):
        return pa.float64()
    if pa.types.is_integer(arg):
        return pa.int64()
    if isinstance(arg, pa.Decimal128Type):
        if agg == "sum":
            return pa.decimal128(min(38, arg.precision + 10), arg.scale)
        return pa.decimal128(*kernels.average_types(arg.precision, arg.scale)[1:])
    return None


class Frame(NamedTuple):
    """A frame of ordered rows: a ROWS frame (``rows``) from ``start`` rows past the
    current one to ``stop`` (negative: before it; None: the partition's first, its last
    row); with ``by_value``, a RANGE frame of the rows whose one ORDER BY value is that far
    from the current row's (in :attr:`windows.Ordered.by_value`'s units); else RANGE from
    the partition's first row to the current row's last peer."""

    rows: bool
    start: int | float | None
    stop: int | float | None
    by_value: bool = False


#: a frame of the whole partition (ROWS or RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
WHOLE_PARTITION = Frame(True, None, None)
#: microseconds of an interval's unit (a RANGE frame's offset over a TIMESTAMP)
_MICROS = {"DAY": 86_400_000_000, "HOUR": 3_600_000_000, "MINUTE": 60_000_000, "SECOND": 1_000_000}


def _frame(frame: exp.Expression | None, by: pa.DataType | None) -> Frame | None:
    """A window frame (None: the default one) as :class:`Frame`: RANGE BETWEEN UNBOUNDED
    PRECEDING AND CURRENT ROW, the whole partition, ROWS from UNBOUNDED PRECEDING or n
    PRECEDING / FOLLOWING or CURRENT ROW to n PRECEDING / FOLLOWING, CURRENT ROW or
    UNBOUNDED FOLLOWING (n a whole number), or RANGE between such bounds of offsets of the
    one ORDER BY column's type ``by`` (:func:`_offset`); None for any other frame."""
    if frame is None:
        return Frame(False, None, 0)
    a = frame.args
    sides = str(a.get("start_side")).upper(), str(a.get("end_side")).upper()
    ends = a.get("start"), a.get("end") or "CURRENT ROW"
    if a.get("exclude") or str(ends[0]).upper() == "UNBOUNDED" and sides[0] != "PRECEDING" \
            or str(ends[1]).upper() == "UNBOUNDED" and sides[1] != "FOLLOWING":
        return None
    rows = str(a.get("kind")).upper() == "ROWS"
    if not rows and [str(e).upper() for e in ends] in (["UNBOUNDED", "CURRENT ROW"], ["UNBOUNDED", "UNBOUNDED"]):
        return Frame(ends[1] != "CURRENT ROW", None, None if ends[1] != "CURRENT ROW" else 0)
    if not rows and by is None:  # offsets of values need the one ORDER BY column's type
        return None
    bounds = [_offset(e, side, None if rows else by) for e, side in zip(ends, sides)]
    if any(b is _NO_BOUND for b in bounds):
        return None
    return Frame(True, bounds[0], bounds[1], by_value=not rows)


_NO_BOUND = object()


def _offset(at: Any, side: str, by: pa.DataType | None) -> Any:
    """A frame bound as its offset from the current row (None: UNBOUNDED): of rows (``by``
    None: a whole number), or of the values of type ``by``: a number for a number (a
    decimal's unscaled at its scale, exactly), ``INTERVAL n DAY`` for a DATE (days), an
    interval of days, hours, minutes or seconds for a TIMESTAMP (microseconds);
    :data:`_NO_BOUND` for any other."""
    if str(at).upper() == "UNBOUNDED":
        return None
    if str(at).upper() == "CURRENT ROW":
        return 0
    if side not in ("PRECEDING", "FOLLOWING"):
        return _NO_BOUND
    sign = -1 if side == "PRECEDING" else 1
    if isinstance(at, exp.Interval):
        unit = str(at.args.get("unit") or "").upper().rstrip("S")
        count = expressions.literal(at.this)
        if isinstance(count, str) and count.strip().isdigit():
            count = int(count)
        if not isinstance(count, int) or isinstance(count, bool):
            return _NO_BOUND
        if by is not None and pa.types.is_date32(by) and unit == "DAY":
            return sign * count
        if by is not None and pa.types.is_timestamp(by) and by.unit == "us" and unit in _MICROS:
            return sign * count * _MICROS[unit]
        return _NO_BOUND
    n = expressions.literal(at) if isinstance(at, exp.Expression) else None
    if n is None or isinstance(n, (bool, str)):
        return _NO_BOUND
    if by is None or pa.types.is_integer(by):
        return sign * n if isinstance(n, int) else _NO_BOUND
    if pa.types.is_floating(by):
        return sign * float(n)
    if isinstance(by, pa.Decimal128Type):
        unscaled = Decimal(n).scaleb(by.scale)
        return sign * int(unscaled) if unscaled == unscaled.to_integral_value() else _NO_BOUND
    return _NO_BOUND


def _column_arg(func: exp.Func, columns: Sequence[str]) -> str | None:
    """The input column an aggregate reads: its name, "" for COUNT(*); None for anything
    else (an expression, DISTINCT, a FILTER)."""
    arg = func.this
    if isinstance(func, exp.Count) and isinstance(arg, exp.Star):
        return ""
    return arg.name if isinstance(arg, exp.Column) and arg.name in columns and not func.args.get("expressions") \
        else None


def _pick(column: str) -> expressions.Compiled:
    return lambda t: t.column(column)


def group_keys(op: Operator) -> tuple[str, ...]:
    """The columns a per-group recompute is keyed by."""
    return op.keys if isinstance(op, GroupDiff) else op.partition  # type: ignore[attr-defined]


def _on(op: Join) -> tuple[tuple[bool, ...], bool]:
    """Per key pair whether it is NULL-safe (``<=>``), and whether ``on`` says more than
    the key equalities."""
    pairs = [(normalized(a), normalized(b)) for a, b in op.keys]
    found: dict[tuple[str, str], bool] = {}
    residual = False
    for t, hit, _ in key_terms(sqlglot.parse_one(op.on, read=DIALECT), op.keys):
        if hit is not None:
            found[pairs[hit]] = isinstance(t, exp.NullSafeEQ)
        elif not (isinstance(t, exp.Boolean) and t.this):
            residual = True
    return tuple(found.get(p, False) for p in pairs), residual


def _unchained(op: Operator) -> tuple[list[Operator], Operator]:
    """The Maps and Filters ``op`` is made of (outermost first), and what they read."""
    chain: list[Operator] = []
    while isinstance(op, (Map, Filter)):
        chain.append(op)
        op = op.input
    return chain, op


def _day_start(day: exp.Expr, next_day: bool, kind: DataType) -> exp.Expr:
    """The instant a day (``day``, or the day after it) starts, as Spark casts a DATE to
    ``kind`` (TIMESTAMP: in the session's time zone)."""
    start = exp.Add(this=exp.Paren(this=day.copy()), expression=exp.Literal.number(1)) if next_day else day.copy()
    return exp.Cast(this=start, to=exp.DataType.build(kind.simpleString(), dialect=DIALECT))


def _nondecreasing(e: exp.Expr, time: str) -> bool:
    """Whether ``e``, over column ``time`` (the time), never decreases as the time moves
    on: the time itself, shifted by a constant, or cast to a date or timestamp."""
    if isinstance(e, exp.Paren):
        return _nondecreasing(e.this, time)
    if isinstance(e, exp.Column):
        return e.name == time
    if isinstance(e, exp.Cast):
        return e.to.this in (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ,
                             exp.DataType.Type.TIMESTAMPNTZ) and _nondecreasing(e.this, time)
    if isinstance(e, exp.TsOrDsAdd):  # date_add, date_sub: by a constant
        return not {c.name for c in e.expression.find_all(exp.Column)} and _nondecreasing(e.this, time)
    constant = (exp.Interval, exp.Literal)
    if isinstance(e, exp.Add) and isinstance(e.this, constant):
        return _nondecreasing(e.expression, time)
    if isinstance(e, (exp.Add, exp.Sub)):
        return isinstance(e.expression, constant) and _nondecreasing(e.this, time)
    return False


def _clock_column(op: Operator) -> str | None:
    """The column of ``op`` holding the time, when ``op`` is the clock (its delta or its
    integral) with only that column (maybe renamed); None otherwise."""
    if isinstance(op, Delay) or isinstance(op, Integral) and op.key is None:
        return _clock_column(op.input)
    if isinstance(op, Input):
        return CLOCK_COLUMN if op.name == CLOCK and op.columns == (CLOCK_COLUMN,) else None
    if isinstance(op, Map) and len(op.exprs) == 1 and is_identifier(op.exprs[0][1]):
        inner = _clock_column(op.input)
        return op.exprs[0][0] if inner is not None and unquote(op.exprs[0][1]) == inner else None
    return None
