"""The rewrites a parsed query goes through before planning, in order.

Modelled on sqlglot's optimizer: each pass is a function ``tree -> tree`` in a module of
its own that returns a new tree and leaves its input as it was, and :data:`RULES` lists the
passes :func:`rewrite` runs, in order. A pass reads the keyword arguments of :func:`rewrite`
that its signature names: ``columns`` (each relation's column names) and ``view`` (the
name its errors carry). :func:`~.total_order.total_order` lives here too but is not a rule:
only the DuckDB oracle applies it.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from sqlglot import exp

from .clock import with_clock
from .constant import from_one
from .factor_or import factor_or
from .filter_clause import filter_clause
from .name_projections import name_projections
from .qualify import qualify

Rule = Callable[..., exp.Expr]

#: the passes before planning: qualify resolves what the passes before it add (the clock,
#: subquery names), and factor_or compares terms as qualify spells them
RULES: tuple[Rule, ...] = (filter_clause, with_clock, from_one, name_projections, qualify, factor_or)


def rewrite(tree: exp.Expr, rules: tuple[Rule, ...] = RULES, **kwargs: Any) -> exp.Expr:
    """``tree`` after each of ``rules`` in turn, each given the ``kwargs`` it names."""
    for rule in rules:
        names = inspect.signature(rule).parameters
        tree = rule(tree, **{k: v for k, v in kwargs.items() if k in names})
    return tree
