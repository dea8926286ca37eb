"""Temporal filters: a join with the clock whose consumer drops the clock's columns.

:func:`~dbt_incremental_stream.sql.rewrites.clock.with_clock` makes the time an input joined to
every SELECT that reads it, so ``WHERE ts > current_timestamp() - INTERVAL 1 HOUR`` is a
join of the rows with the clock on that condition. When what follows keeps none of the
clock's columns, the join is a :class:`~dbt_incremental_stream.circuit.operators.Temporal`
filter: its output rows are the input's own, so as the time moves a row in both the old
and the new window cancels, and a tick reads only the rows whose window opened or closed.
"""
from __future__ import annotations

from ..circuit.operators import Filter, Input, Join, Map, Operator, Temporal, is_identifier, with_inputs

CLOCK, CLOCK_COLUMN = "__now", "__now_ts"


def temporal_filters(root: Operator) -> Operator:
    """``root`` with every Map over a join with the clock that drops its columns reading a
    :class:`Temporal` filter instead."""
    done: dict[str, Operator] = {}

    def visit(op: Operator) -> Operator:
        if op.id not in done:
            new = with_inputs(op, tuple(visit(i) for i in op.inputs))
            if isinstance(new, Map) and type(new.input) is Join:
                new = Map(_temporal(new.input, {e for _, e in new.exprs}), new.exprs)
            done[op.id] = new
        return done[op.id]

    return visit(root)


def _temporal(join: Join, used: set[str]) -> Operator:
    """``join`` as a Temporal filter (rows on the left), when one side is the clock and
    ``used`` (the SQL its consumer computes) reads none of the clock's columns."""
    for rows, clock in ((join.left, join.right), (join.right, join.left)):
        if _is_clock(clock) and not any(c in e for c in clock.columns for e in used):
            keys = tuple((b, a) for a, b in join.keys) if rows is join.right else join.keys
            if not all(is_identifier(theirs) for _, theirs in keys):
                # a day of the clock's (``d = current_date()``): its one row is read whole
                # and the key compared as the rest of ``on`` (no state is keyed by an expression)
                keys = ()
            return Temporal(rows, clock, join.on, keys)
    return join


def _is_clock(op: Operator) -> bool:
    while isinstance(op, (Map, Filter)):
        op = op.input
    return isinstance(op, Input) and op.name == CLOCK
