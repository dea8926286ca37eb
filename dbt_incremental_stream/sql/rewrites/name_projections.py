"""Names for select-list items qualify would misname, given before it runs:

- an unaliased subquery: sqlglot's qualify resolves ``ORDER BY <position>`` only to aliased
  expressions, and asserted on one naming an unaliased subquery;
- an unaliased expression named like an item before it (``CAST(x AS INT), x``, or
  ``CAST('NaN' AS DOUBLE), 'nan'`` in an arm of a union): qualify names an expression after
  what it reads, so both would be named alike and neither could be told apart.

Each gets the name qualify gives an expression it cannot name: ``_col_<position>``."""
from __future__ import annotations

from sqlglot import exp


def name_projections(tree: exp.Expr) -> exp.Expr:
    """``tree`` with each unaliased subquery of a select list, and each unaliased item named
    like an item before it, aliased ``_col_<position>``."""
    return tree.transform(_name_projections)


def _name_projections(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Select):
        named = [p for p in node.expressions if p.alias or isinstance(p, (exp.Column, exp.Star))]
        taken = {p.alias_or_name.lower() for p in named}  # what a column or an alias names keeps its name
        for i, projection in enumerate(node.expressions):
            if any(projection is p for p in named):
                continue
            name = projection.alias_or_name.lower()
            if isinstance(projection, exp.Subquery) or name in taken:
                projection.replace(exp.Alias(this=projection.copy(), alias=exp.to_identifier(f"_col_{i}")))
            else:
                taken.add(name)
    return node
