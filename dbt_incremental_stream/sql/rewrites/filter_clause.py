"""Aggregate FILTER clauses as CASE arguments: the planner maintains plain aggregate calls
only, and ``agg(CASE WHEN p THEN x END)`` skips the same rows as ``agg(x) FILTER (WHERE p)``
(aggregates ignore NULLs; ``COUNT(*)`` counts a 1 per kept row)."""
from __future__ import annotations

from sqlglot import exp


def filter_clause(tree: exp.Expr) -> exp.Expr:
    """``tree`` with every ``agg(x) FILTER (WHERE p)`` as ``agg(CASE WHEN p THEN x END)``."""
    return tree.transform(_filter_clause)


def _filter_clause(node: exp.Expr) -> exp.Expr:
    if not isinstance(node, exp.Filter) or not isinstance(node.this, exp.AggFunc):
        return node
    call, cond = node.this.copy(), node.expression.this
    arg = call.this
    target = arg.expressions[0] if isinstance(arg, exp.Distinct) else arg
    value = exp.Literal.number(1) if isinstance(target, exp.Star) else target
    case = exp.Case(ifs=[exp.If(this=cond.copy(), true=value.copy())])
    if isinstance(arg, exp.Distinct):
        arg.set("expressions", [case])
    else:
        call.set("this", case)
    second = call.args.get("expression")  # max_by(x, y): a skipped row's y is NULL too
    if isinstance(second, exp.Expr) and second.find(exp.Column) is not None:
        call.set("expression", exp.Case(ifs=[exp.If(this=cond.copy(), true=second.copy())]))
    return call
