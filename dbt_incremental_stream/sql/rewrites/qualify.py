"""Every name resolved, by sqlglot's qualify: stars expanded, columns qualified by the alias
of their FROM item, USING, select-list aliases and ordinals resolved. The planner then reads
each column's relation from the tree, and a name that resolves nowhere is an error naming
the view before planning starts."""
from __future__ import annotations

from typing import Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify as sqlglot_qualify

from ...errors import CompileError
from ..relations import DIALECT


def qualify(tree: exp.Expr, columns: Mapping[str, Sequence[str]], view: str | None = None) -> exp.Expr:
    """A copy of ``tree`` with every name resolved against ``columns`` (each relation's
    column names)."""
    schema: dict[str, object] = {name: {c: "string" for c in cols} for name, cols in columns.items()}
    try:
        return sqlglot_qualify(tree.copy(), schema=schema, dialect=DIALECT, validate_qualify_columns=True,
                               quote_identifiers=False)
    except (OptimizeError, AssertionError) as e:  # sqlglot asserts what it cannot qualify
        raise CompileError(f"the query cannot be resolved: {e}", view=view) from e
