"""A tick on arrangements: node deltas as Arrow tables, probes into indexed state.

For a small tick a Spark job costs more than the work, so the stateful operators run as
:mod:`.kernels` over the arrangements their integrals are kept in: a join probes the other
side's arrangement with the delta's keys, a linear aggregate probes its partial sums and
its own emitted rows for the touched groups only. Projections, renames and casts to the
type a column already has are done on the Arrow columns; every other expression (a
filter, a computed column, an aggregate's finishing where Spark's decimal arithmetic
decides) is handed to Spark on the delta itself (a local relation: no state is read), so
Spark's semantics stay exact.

:func:`plan` decides once per circuit whether every operator can run this way and which
integrals must be arranged by which key; :class:`ArrangedTick` evaluates one tick.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from functools import singledispatchmethod
from typing import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType
from sqlglot import exp

from ..circuit.operators import (
    WEIGHT,
    Delay,
    Filter,
    GroupDiff,
    Input,
    Integral,
    Join,
    Map,
    Operator,
    Partials,
    Plus,
    Recompute,
    Scale,
    is_identifier,
    walk,
)
from ..sql.planner import DIALECT, _conjuncts
from . import kernels, zsets
from .arrangement import Arrangement, RunStore

_CAST = re.compile(r"^CAST\((`(?:[^`]|``)+`) AS (.+)\)$", re.S)


class NotArranged(Exception):
    """Why a circuit (or a tick) takes the DataFrame path."""


def unquote(identifier: str) -> str:
    return identifier[1:-1].replace("``", "`")


@dataclass(frozen=True)
class Side:
    """One side of a join read from state: ``integral`` (before this tick, or including
    it when ``after``), whose column ``rename[c]`` is the side's column ``c``."""

    integral: Integral
    after: bool
    rename: dict[str, str]


@dataclass(frozen=True)
class Spec:
    """An arrangement a circuit needs: state node ``node`` by ``key``."""

    node: str
    key: tuple[str, ...]
    additive: bool


class Plan:
    """What the arranged path needs to know about a circuit, found once."""

    def __init__(self, states: Sequence[Operator], same: Mapping[str, str], schema: Callable[[Operator], StructType]):
        self.same = same
        self.schema = schema
        self.specs: dict[tuple[str, tuple[str, ...]], Spec] = {}
        self.sides: dict[str, tuple[Side | None, Side | None, tuple[bool, ...], bool]] = {}
        self.renames: dict[str, list[tuple[str, str]] | None] = {}
        for op in walk(*states):
            self._check(op)

    def state_of(self, integral: Integral) -> str:
        return self.same.get(integral.id, integral.id)

    def _need(self, node: str, key: tuple[str, ...], additive: bool) -> None:
        self.specs[(node, key)] = Spec(node, key, additive)

    def _check(self, op: Operator) -> None:
        if isinstance(op, (Input, Plus, Partials, Integral, Delay, Filter, Scale)):
            return
        if isinstance(op, Map):
            self.renames[op.id] = self._renames(op)
            return
        if isinstance(op, GroupDiff) and op.linear:
            before = op.before
            if not (isinstance(before, Delay) and before.input.key == op.keys):
                raise NotArranged(f"{op.label()}: its partial sums are not a keyed integral")
            self._need(before.input.id, op.keys, True)
            self._need(op.id, op.keys, False)
            return
        if isinstance(op, Join):
            self.sides[op.id] = self._join(op)
            return
        raise NotArranged(f"{op.label()} has no arranged form yet")

    def _renames(self, op: Map) -> list[tuple[str, str]] | None:
        """(output, input column) when every expression is a column, maybe cast to the
        type it already has; None when Spark must evaluate it."""
        types = {f.name: f.dataType.simpleString() for f in self.schema(op.input).fields}
        out = []
        for name, e in op.exprs:
            if is_identifier(e):
                out.append((name, unquote(e)))
                continue
            m = _CAST.match(e)
            if m and is_identifier(m.group(1)) and types.get(unquote(m.group(1))) == m.group(2).strip().lower():
                out.append((name, unquote(m.group(1))))
                continue
            return None
        return out

    def _side(self, op: Operator) -> Side | None:
        """``op`` as an integral under renames, or None when it is a delta."""
        maps: list[Map] = []
        while isinstance(op, Map):
            maps.append(op)
            op = op.input
        if isinstance(op, Delay):
            integral, after = op.input, False
        elif isinstance(op, Integral):
            integral, after = op, True
        else:
            return None
        rename = {c: c for c in integral.columns}
        for m in reversed(maps):
            pairs = self._renames(m)
            if pairs is None:
                raise NotArranged(f"a join side computes {m.label()} over its state")
            rename = {name: rename[src] for name, src in pairs}
        return Side(integral, after, rename)

    def _join(self, op: Join) -> tuple[Side | None, Side | None, tuple[bool, ...], bool]:
        if not op.keys or not all(is_identifier(a) and is_identifier(b) for a, b in op.keys):
            raise NotArranged(f"{op.label()}: no equi-join on columns")
        left, right = self._side(op.left), self._side(op.right)
        if (left is None) == (right is None):
            raise NotArranged(f"{op.label()}: not a delta joined with an integral")
        null_safe, residual = _on(op)
        state, i = (right, 1) if right is not None else (left, 0)
        assert state is not None
        key = tuple(state.rename[unquote(pair[i])] for pair in op.keys)
        if state.integral.key is not None:
            raise NotArranged(f"{op.label()}: joins partial sums")
        self._need(self.state_of(state.integral), key, False)
        return left, right, null_safe, residual


def _on(op: Join) -> tuple[tuple[bool, ...], bool]:
    """Per key pair whether it is NULL-safe (``<=>``), and whether ``on`` says more than
    the key equalities."""
    terms = _conjuncts(sqlglot.parse_one(op.on, read=DIALECT))
    pairs = {(unquote(a), unquote(b)) for a, b in op.keys}
    found: dict[tuple[str, str], bool] = {}
    residual = False
    for t in terms:
        if isinstance(t, (exp.EQ, exp.NullSafeEQ)) and isinstance(t.left, exp.Column) and isinstance(t.right, exp.Column):
            p = (t.left.name, t.right.name)
            q = (p[1], p[0])
            hit = p if p in pairs else q if q in pairs else None
            if hit is not None:
                found[hit] = isinstance(t, exp.NullSafeEQ)
                continue
        residual = True
    return tuple(found.get((unquote(a), unquote(b)), False) for a, b in op.keys), residual




class ArrangedTick:
    """Evaluates node deltas of one tick as Arrow tables (None: statically empty)."""

    def __init__(self, plan: Plan, inputs: Mapping[str, pa.Table | None], arrangements: Mapping[str, dict[tuple[str, ...], Arrangement]],
                 runs: RunStore, spark: SparkSession):
        self.plan = plan
        self._inputs = inputs
        self._arr = arrangements
        self._runs = runs
        self._spark = spark
        self._memo: dict[str, pa.Table | None] = {}
        self.spark_seconds = 0.0  # spent in Spark passes

    def arrow_schema(self, op: Operator) -> pa.Schema:
        return zsets.arrow_schema(self.plan.schema(op))

    def value(self, op: Operator) -> pa.Table | None:
        if op.id not in self._memo:
            self._memo[op.id] = self._eval(op)
        return self._memo[op.id]

    def _conform(self, op: Operator, table: pa.Table) -> pa.Table:
        schema = self.arrow_schema(op)
        if table.schema.names != schema.names:
            table = table.rename_columns(schema.names)
        return table.cast(schema) if table.schema != schema else table

    def _in_spark(self, op: Operator, table: pa.Table, f: Callable[[DataFrame], DataFrame]) -> pa.Table:
        """``f`` applied by Spark to ``table`` (a local relation: the delta only)."""
        started = time.perf_counter()
        out = self._conform(op, f(self._spark.createDataFrame(table)).toArrow())
        self.spark_seconds += time.perf_counter() - started
        return out

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
        if t is None:
            return None
        pairs = self.plan.renames.get(op.id)
        if pairs is None:
            return self._in_spark(op, t, lambda df: zsets.project(df, op.exprs))
        return self._conform(op, pa.table({n: t.column(c) for n, c in pairs} | {WEIGHT: t.column(WEIGHT)}))

    @_eval.register
    def _(self, op: Filter) -> pa.Table | None:
        t = self.value(op.input)
        return None if t is None else self._in_spark(op, t, lambda df: df.where(op.predicate))

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
    def _(self, op: Partials) -> pa.Table | None:
        t = self.value(op.input)
        return None if t is None else kernels.partials(t, op.keys, op.aggs, self.arrow_schema(op))

    @_eval.register
    def _(self, op: Join) -> pa.Table | None:
        left, right, null_safe, residual = self.plan.sides[op.id]
        state, delta_op = (right, op.left) if right is not None else (left, op.right)
        assert state is not None
        delta = self.value(delta_op)
        if delta is None:
            return None
        i = 0 if right is not None else 1
        delta_keys = [unquote(pair[i]) for pair in op.keys]
        node = self.plan.state_of(state.integral)
        key = tuple(state.rename[unquote(pair[1 - i])] for pair in op.keys)
        arr = self._arr[node][key]
        extra = self.value(state.integral.input) if state.after else None
        rows, matched = self._runs.probe(arr, delta, delta_keys, null_safe, extra)
        if matched is None:
            return None
        mine = delta.take(pa.array(rows))
        w = pc.multiply_checked(mine.column(WEIGHT), matched.column(WEIGHT))
        theirs = {name: matched.column(src) for name, src in state.rename.items()}
        ours = {c: mine.column(c) for c in kernels.data_columns(mine)}
        cols = (ours | theirs) if right is not None else (theirs | ours)
        out = pa.table({c: cols[c] for c in op.columns} | {WEIGHT: w})
        out = self._conform(op, out)
        return self._in_spark(op, out, lambda df: df.where(op.on)) if residual else out

    @_eval.register
    def _(self, op: GroupDiff) -> pa.Table | None:
        dp = self.value(op.delta)
        if dp is None:
            return None
        keys = list(op.keys)
        safe = [True] * len(keys)
        before = op.before
        assert isinstance(before, Delay)
        _, old = self._runs.probe(self._arr[before.input.id][op.keys], dp, keys, safe)
        groups = kernels.group_sums(kernels.concat([old, dp.cast(old.schema) if old is not None else dp]), keys)
        new = kernels.finish(groups, keys, op.aggs)
        if new is None:
            new = self._in_spark(op, groups, lambda df: zsets.finish(df, keys, op.aggs)).select(
                list(op.columns) + [WEIGHT])
        new = self._conform(op, new)
        _, prior = self._runs.probe(self._arr[op.id][op.keys], dp, keys, safe)
        if prior is not None:
            new = pa.concat_tables([kernels.negate(prior).cast(new.schema), new])
        return kernels.consolidate(new)

    def state_delta(self, state: Operator) -> pa.Table | None:
        """What a state node adds this tick, as stored: consolidated, partial sums as they are."""
        if isinstance(state, Recompute):
            return self.value(state)
        assert isinstance(state, Integral)
        t = self.value(state.input)
        if t is None or isinstance(state.input, Partials):
            return t
        return kernels.sum_by(t, state.key) if state.key is not None else kernels.consolidate(t)


