"""A condition as the terms it ANDs: the planner places each term on its own (below a join,
as a join key, in a Window's ``keep``), the arranged runtime reads join bounds from them,
and :func:`~dbt_incremental_stream.sql.rewrites.factor_or.factor_or` finds the terms every
branch of an OR shares."""
from __future__ import annotations

from sqlglot import exp


def conjuncts(e: exp.Expr) -> list[exp.Expr]:
    """The terms of ``e`` joined by AND, left to right, parentheses removed."""
    e = e.unnest()
    if isinstance(e, exp.And):
        return conjuncts(e.left) + conjuncts(e.right)
    return [e]
