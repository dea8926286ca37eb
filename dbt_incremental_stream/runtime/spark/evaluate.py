"""One tick of an incremental circuit as lazy Spark DataFrames.

Every node's value is its delta for this tick (None when it is statically empty, so
untouched inputs cost nothing); ``Integral`` nodes read as z⁻¹I + Δ and ``Delay`` as the
stored spine. A delta consumed more than once is cut out of its consumers' plans as a
lazily checkpointed RDD: Spark computes it once, and plans stay linear in the circuit's
size instead of repeating shared subtrees (a join's delta reads each input twice).
"""
from __future__ import annotations

from functools import singledispatchmethod
from typing import Callable, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ...circuit.operators import (
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
    Scale,
    Temporal,
    WindowDiff,
    quote,
)
from . import zsets
from .zsets import col


class Tick:
    """Evaluates node deltas for one tick.

    ``before`` gives a state node's committed integral (None: empty) — an ``Integral``'s,
    or a ``Recompute``'s own output; ``is_new`` tells whether a state node has never been
    committed (a global aggregate then emits its first row, typed by ``empty``: a tick
    over empty inputs, see :func:`empty_tick`).
    """

    def __init__(self, inputs: Mapping[str, DataFrame | None], before: Callable[[str], DataFrame | None],
                 is_new: Callable[[str], bool], shared: set[str], empty: Tick | None = None):
        self._inputs = inputs
        self._before = before
        self._is_new = is_new
        self._shared = shared
        self._empty = empty
        self._memo: dict[str, DataFrame | None] = {}
        self.persisted: list[DataFrame] = []

    def value(self, op: Operator) -> DataFrame | None:
        if op.id not in self._memo:
            df = self._eval(op)
            if df is not None and op.id in self._shared:
                df = df.localCheckpoint(eager=False)
                self.persisted.append(df)
            self._memo[op.id] = df
        return self._memo[op.id]

    def release(self) -> None:
        """Drop the blocks of this tick's shared values."""
        for df in self.persisted:
            df._jdf.queryExecution().analyzed().rdd().unpersist(False)
        self.persisted.clear()

    @singledispatchmethod
    def _eval(self, op: Operator) -> DataFrame | None:
        raise TypeError(f"the runtime cannot evaluate {type(op).__name__}")

    @_eval.register
    def _(self, op: Input) -> DataFrame | None:
        df = self._inputs.get(op.name)
        if df is None:
            return None
        return df.select(*map(col, op.columns), col(WEIGHT).cast("bigint").alias(WEIGHT))

    @_eval.register
    def _(self, op: Map) -> DataFrame | None:
        df = self.value(op.input)
        if df is None:
            return None
        return zsets.project(df, op.exprs)

    @_eval.register
    def _(self, op: Filter) -> DataFrame | None:
        df = self.value(op.input)
        return None if df is None else df.where(op.predicate)

    @_eval.register
    def _(self, op: Generate) -> DataFrame | None:
        df = self.value(op.input)
        return None if df is None else df.selectExpr(*map(quote, op.input.columns), op.sql, quote(WEIGHT))

    @_eval.register
    def _(self, op: Plus) -> DataFrame | None:
        return zsets.union(self.value(i) for i in op.inputs)

    @_eval.register
    def _(self, op: Pad) -> DataFrame | None:
        df = self.value(op.input)
        if df is None:
            return None
        like = (self if self._empty is None else self._empty).value(op.like)
        if like is None:
            raise TypeError(f"no type for the columns of {op.like.label()}")
        types = {f.name: f.dataType for f in like.schema.fields}
        return df.select(*map(col, op.input.columns), *(F.lit(None).cast(types[c]).alias(c) for c in op.like.columns),
                         col(WEIGHT))

    @_eval.register
    def _(self, op: Scale) -> DataFrame | None:
        df = self.value(op.input)
        return None if df is None else zsets.scale(df, op.factor)

    @_eval.register
    def _(self, op: Join) -> DataFrame | None:
        left = self.value(op.left)
        right = self.value(op.right) if left is not None else None
        if left is None or right is None:
            return None
        return zsets.join(left, right, op.on)

    @_eval.register
    def _(self, op: Temporal) -> DataFrame | None:
        df = self.value(op.joined)
        return None if df is None else df.select(*map(col, op.columns), col(WEIGHT))

    @_eval.register
    def _(self, op: Integral) -> DataFrame | None:
        return zsets.union([self._before(op.id), self.value(op.input)])

    @_eval.register
    def _(self, op: Delay) -> DataFrame | None:
        return self._before(op.input.id)

    @_eval.register
    def _(self, op: Partials) -> DataFrame | None:
        df = self.value(op.input)
        return None if df is None else zsets.partials(df, op.keys, op.aggs)

    @_eval.register
    def _(self, op: GroupDiff) -> DataFrame | None:
        delta = self.value(op.delta)
        if delta is None and not op.keys and self._is_new(op.id) and self._empty is not None:
            delta = self._empty.value(op.delta)  # a global aggregate has its row from the start
        if delta is None:
            return None
        rows = op.delta.input if isinstance(op.delta, Partials) else op.delta  # the rows aggregated
        typed = self.value(rows) or (self._empty.value(rows) if self._empty is not None else None)
        assert typed is not None, f"no rows typed for {op.label()}"
        return zsets.group_diff(self.value(op.before), delta, self._before(op.id), op.keys, op.aggs, op.linear,
                                zsets.arg_types(typed.schema, op.aggs))

    @_eval.register
    def _(self, op: WindowDiff) -> DataFrame | None:
        delta = self.value(op.delta)
        if delta is None:
            return None
        return zsets.window_diff(self.value(op.before), delta, self._before(op.id), op.partition, op.funcs, op.keep)


def empty_tick(inputs: Mapping[str, DataFrame]) -> Tick:
    """A tick over typed empty inputs with empty state, for typed empty values."""
    return Tick(inputs, lambda _: None, lambda _: True, set())
