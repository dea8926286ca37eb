"""Names for unnamed subqueries of a select list: sqlglot's qualify resolves ``ORDER BY
<position>`` only to aliased expressions, and asserted on one naming an unaliased subquery."""
from __future__ import annotations

from sqlglot import exp


def name_subqueries(tree: exp.Expr) -> exp.Expr:
    """``tree`` with each unaliased subquery of a select list aliased with the name qualify
    would give it (``_col_<position>``)."""
    return tree.transform(_name_subqueries)


def _name_subqueries(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Select):
        for i, projection in enumerate(node.expressions):
            if isinstance(projection, exp.Subquery) and not projection.alias:
                projection.replace(exp.Alias(this=projection.copy(), alias=exp.to_identifier(f"_col_{i}")))
    return node
