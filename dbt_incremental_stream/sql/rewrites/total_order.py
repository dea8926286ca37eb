"""A total order for every ORDER BY that feeds a LIMIT: not applied before planning (the
planner breaks ties itself, by the output columns, see ``_Planner.top_k``) but by the DuckDB
oracle, so that a LIMIT picks the same rows in both engines."""
from __future__ import annotations

from sqlglot import exp


def total_order(tree: exp.Expr) -> exp.Expr:
    """A copy of ``tree`` with every ORDER BY that feeds a LIMIT extended by all output
    columns, NULLs first, as the planner breaks ties."""
    return tree.copy().transform(_extend)


def _extend(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Query) and node.args.get("limit") and node.args.get("order"):
        order = node.args["order"]
        width = len(node.selects)
        order.set("expressions", list(order.expressions) + [
            exp.Ordered(this=exp.Literal.number(i + 1), nulls_first=True) for i in range(width)])
    return node
