"""Terms common to every branch of an OR factored out: ``(a AND b) OR (a AND c)`` as
``a AND (b OR c)``, so a join key repeated in every branch (as TPC-H q19 writes it) is seen
as a join key rather than leaving a cross product filtered by the OR."""
from __future__ import annotations

from sqlglot import exp

from ..predicates import conjuncts


def factor_or(tree: exp.Expr) -> exp.Expr:
    """``tree`` with the conjuncts every branch of each OR shares taken out of it."""
    return tree.transform(_factor_or)


def _factor_or(node: exp.Expr) -> exp.Expr:
    if not isinstance(node, exp.Or):
        return node
    branches = [conjuncts(b) for b in node.flatten()]
    common = [c for c in branches[0] if all(c in b for b in branches[1:])]
    if not common:
        return node
    rests = [[c for c in b if c not in common] for b in branches]
    if any(not r for r in rests):
        return exp.and_(*common)
    return exp.and_(*common, exp.or_(*(exp.and_(*r) for r in rests)))
