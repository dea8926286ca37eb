"""Incrementalization: rewrite a circuit over relations into one over their deltas (DBSP).

Linear operators apply to deltas as they are. A join becomes
ΔA⋈z⁻¹I(B) + I(A)⋈ΔB (which equals ΔA⋈B₋₁ + A₋₁⋈ΔB + ΔA⋈ΔB). An aggregate keeps the
integral of its input — of per-group partial sums when every aggregate is linear — and
re-derives only the groups a delta touches; COUNT/SUM/AVG(DISTINCT) become linear
aggregates over a DISTINCT first (:func:`distinct_parts`). Window functions likewise
recompute only the partitions a delta touches.
"""
from __future__ import annotations

from dataclasses import replace
from functools import singledispatch

from .operators import (
    AggCall,
    Aggregate,
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
    Window,
    WindowDiff,
    distinct,
    quote,
)


def integral(op: Operator) -> Operator:
    """I(op), sharing state. Integration commutes with row-wise linear operators, so
    I(Map(x)) is Map(I(x)) for a projection (columns picked or renamed, and constants
    beside them over a recompute's output): one stored integral serves every projection
    of x, a source's retained input or the output a recompute stores. A Map that computes
    columns, or a Filter, is integrated itself: its rows are computed once, as they
    change, not at every read of the state (where only Spark computes them exactly, a
    task, which has no Spark, could not)."""
    if isinstance(op, Map) and (op.is_projection or op.computes_nothing and _recomputed(op.input)):
        return Map(integral(op.input), op.exprs)
    return Integral(op)


def _recomputed(op: Operator) -> bool:
    """Whether ``op`` is a recompute's stored output, through projections."""
    while isinstance(op, Map) and op.computes_nothing:
        op = op.input
    return isinstance(op, Recompute)


def delayed(op: Operator) -> Operator:
    """z⁻¹ of an integral built by :func:`integral`."""
    if isinstance(op, (Map, Filter)):
        return replace(op, input=delayed(op.input))
    assert isinstance(op, Integral)
    return Delay(op)


class Incrementalizer:
    """Memoized so that a node shared by several views becomes one shared delta node."""

    def __init__(self) -> None:
        self._memo: dict[str, Operator] = {}

    def __call__(self, op: Operator) -> Operator:
        done = self._memo.get(op.id)
        if done is None:
            done = self._memo[op.id] = _delta(op, self)
        return done


@singledispatch
def _delta(op: Operator, inc: Incrementalizer) -> Operator:
    raise TypeError(f"no incremental rule for {type(op).__name__}")


@_delta.register
def _(op: Input, inc: Incrementalizer) -> Operator:
    return op


@_delta.register
def _(op: Map, inc: Incrementalizer) -> Operator:
    return Map(inc(op.input), op.exprs)


@_delta.register
def _(op: Filter, inc: Incrementalizer) -> Operator:
    return Filter(inc(op.input), op.predicate)


@_delta.register
def _(op: Generate, inc: Incrementalizer) -> Operator:
    return replace(op, input=inc(op.input))


@_delta.register
def _(op: Plus, inc: Incrementalizer) -> Operator:
    return Plus(tuple(inc(i) for i in op.inputs))


@_delta.register
def _(op: Pad, inc: Incrementalizer) -> Operator:
    return Pad(inc(op.input), inc(op.like))


@_delta.register
def _(op: Scale, inc: Incrementalizer) -> Operator:
    return Scale(inc(op.input), op.factor)


@_delta.register
def _(op: Join, inc: Incrementalizer) -> Operator:
    da, db = inc(op.left), inc(op.right)
    ia, ib = integral(da), integral(db)
    return Plus((replace(op, left=da, right=delayed(ib)), replace(op, left=ia, right=db)))  # a Temporal stays one


@_delta.register
def _(op: Aggregate, inc: Incrementalizer) -> Operator:
    split = distinct_parts(op)
    if split is not None:
        return inc(split)
    dx = inc(op.input)
    if all(a.linear for a in op.aggs):
        dx = Partials(dx, op.keys, op.aggs)
        state = Integral(dx, op.keys)
    else:
        state = Integral(dx)
    return GroupDiff(dx, Delay(state), op.keys, op.aggs)


@_delta.register
def _(op: Window, inc: Incrementalizer) -> Operator:
    dx = inc(op.input)
    return WindowDiff(dx, delayed(integral(dx)), op.partition, op.funcs, op.keep)


def distinct_parts(op: Aggregate) -> Operator | None:
    """An aggregate whose only non-linear calls are COUNT, SUM or AVG of DISTINCT values, as
    linear aggregates joined on its group keys (NULL-safe): f(DISTINCT x) per group is f(x)
    over the distinct (group, x) pairs, and a DISTINCT is kept as counts. So every part
    costs the change, where re-aggregating a touched group reads all of its rows. None
    for any other aggregate."""
    by_arg: dict[str, list[AggCall]] = {}
    for a in op.aggs:
        if not a.linear:
            if not a.distinct or a.func not in ("count", "sum", "avg") or a.arg is None:
                return None
            by_arg.setdefault(a.arg, []).append(AggCall(a.name, a.func, a.arg))
    if not by_arg:
        return None
    keys = tuple((k, quote(k)) for k in op.keys)
    linear = tuple(a for a in op.aggs if a.linear)
    parts: list[Operator] = [Aggregate(op.input, op.keys, linear)] if linear else []
    for arg, calls in by_arg.items():
        pairs = distinct(Map(op.input, keys + ((arg, quote(arg)),)))
        parts.append(Aggregate(pairs, op.keys, tuple(calls)))
    joined = parts[0]
    for i, part in enumerate(parts[1:], 1):
        renamed = tuple((f"{k}__d{i}", k) for k in op.keys)
        part = Map(part, tuple((n, quote(k)) for n, k in renamed)
                   + tuple((c, quote(c)) for c in part.columns[len(keys):]))
        on = " AND ".join(f"{quote(k)} <=> {quote(n)}" for n, k in renamed) or "TRUE"
        joined = Join(joined, part, on, tuple((quote(k), quote(n)) for n, k in renamed))
    return Map(joined, tuple((c, quote(c)) for c in op.columns))
