"""A condition as the terms it ANDs: the planner places each term on its own (below a join,
as a join key, in a Window's ``keep``), the arranged runtime reads join bounds from them,
and :func:`~dbt_incremental_stream.sql.rewrites.factor_or.factor_or` finds the terms every
branch of an OR shares. :func:`key_terms` finds which terms of a join's ON are its keys."""
from __future__ import annotations

from typing import Sequence

import sqlglot
from sqlglot import exp

from .relations import DIALECT


def conjuncts(e: exp.Expr) -> list[exp.Expr]:
    """The terms of ``e`` joined by AND, left to right, parentheses removed."""
    e = e.unnest()
    if isinstance(e, exp.And):
        return conjuncts(e.left) + conjuncts(e.right)
    return [e]


def normalized(e: exp.Expr | str) -> str:
    """An expression's SQL without its outer parentheses (``(`a`)`` is `` `a` ``)."""
    return (sqlglot.parse_one(e, read=DIALECT) if isinstance(e, str) else e).unnest().sql(DIALECT)


def key_terms(on: exp.Expr, keys: Sequence[tuple[str, str]]) -> list[tuple[exp.Expr, int | None, bool]]:
    """Each term of a join's ``on`` (:func:`conjuncts`, the tree's own nodes) with the
    first of ``keys`` (left, right) it equates (``=`` or ``<=>``), or None, and whether it
    is written right side first."""
    pairs = [(normalized(a), normalized(b)) for a, b in keys]
    out: list[tuple[exp.Expr, int | None, bool]] = []
    for t in conjuncts(on):
        hit, swapped = None, False
        if isinstance(t, (exp.EQ, exp.NullSafeEQ)):
            p = (normalized(t.left), normalized(t.right))
            if p in pairs:
                hit = pairs.index(p)
            elif p[::-1] in pairs:
                hit, swapped = pairs.index(p[::-1]), True
        out.append((t, hit, swapped))
    return out
