"""A check between rewrites rather than a rewrite: every SELECT reads a FROM item. A SELECT
without one is a constant relation, which the engine does not maintain (a seed or a table
holds constants); it runs after :func:`~.clock.with_clock`, which gives a SELECT that reads
only the time the clock as its FROM item."""
from __future__ import annotations

from sqlglot import exp

from ..validate import unsupported


def require_from(tree: exp.Expr, view: str | None = None) -> exp.Expr:
    """``tree`` itself, or :class:`~dbt_incremental_stream.errors.UnsupportedSqlError` at
    the first SELECT without FROM."""
    for select in tree.find_all(exp.Select):
        if select.args.get("from_") is None:
            raise unsupported("SELECT without FROM (a constant relation); read a seed or table instead", select, view)
    return tree
