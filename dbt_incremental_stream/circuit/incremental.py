"""Incrementalization: rewrite a circuit over relations into one over their deltas (DBSP).

Linear operators apply to deltas as they are. A join becomes
ΔA⋈z⁻¹I(B) + I(A)⋈ΔB (which equals ΔA⋈B₋₁ + A₋₁⋈ΔB + ΔA⋈ΔB). An aggregate keeps the
integral of its input — of per-group partial sums when every aggregate is linear — and
re-derives only the groups a delta touches; window functions likewise recompute only
the partitions a delta touches.
"""
from __future__ import annotations

from dataclasses import replace
from functools import singledispatch

from .operators import (
    Aggregate,
    Delay,
    Filter,
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
)


def integral(op: Operator) -> Operator:
    """I(op), sharing state. Integration commutes with row-wise linear operators, so
    I(Map(x)) is Map(I(x)): one stored integral serves every projection of x, and the
    output a recompute stores anyway serves as the integral of whatever is computed row
    by row from it."""
    if isinstance(op, Map) and (op.is_projection or _stored(op.input)):
        return Map(integral(op.input), op.exprs)
    if isinstance(op, Filter) and _stored(op.input):
        return Filter(integral(op.input), op.predicate)
    return Integral(op)


def _stored(op: Operator) -> bool:
    """Whether ``op`` is computed row by row from a recompute's output."""
    while isinstance(op, (Map, Filter)):
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
    return Plus((Join(da, delayed(ib), op.on, op.keys), Join(ia, db, op.on, op.keys)))


@_delta.register
def _(op: Aggregate, inc: Incrementalizer) -> Operator:
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
