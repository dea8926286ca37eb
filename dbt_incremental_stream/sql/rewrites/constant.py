"""A SELECT without FROM (``SELECT 0 AS n UNION ALL SELECT 1``: what ``dbt_utils.date_spine``,
``generate_series`` and test-style models expand to) reads the one-row relation :data:`ONE`,
as Spark's own planner reads its one-row ``OneRowRelation``. :data:`ONE` is an input the
pipeline fills with its one row in the tick it first holds it and never changes after, so a
constant relation is a view like any other: built from that row when it is added, rebuilt
(its old rows retracted) when a redeploy changes it. Runs after :func:`~.clock.with_clock`,
which gives a SELECT that reads only the time the clock as its FROM item."""
from __future__ import annotations

from sqlglot import exp

from .clock import with_clock

ONE, ONE_COLUMN = "__one", "__one_row"


def from_one(tree: exp.Expr) -> exp.Expr:
    """A copy of ``tree`` in which every SELECT without FROM reads :data:`ONE`."""
    tree = tree.copy()
    for select in tree.find_all(exp.Select):
        if select.args.get("from_") is None:
            select.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(ONE))))
    return tree


def uses_one(tree: exp.Expr) -> bool:
    """Whether the query has a SELECT without FROM (the time read alone is the clock's)."""
    return any(s.args.get("from_") is None for s in with_clock(tree).find_all(exp.Select))
