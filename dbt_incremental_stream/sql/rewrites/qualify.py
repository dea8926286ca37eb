"""Every name resolved, by sqlglot's qualify: stars expanded, columns qualified by the alias
of their FROM item, USING, select-list aliases and ordinals resolved. The planner then reads
each column's relation from the tree, and a name that resolves nowhere is an error naming
the view before planning starts.

sqlglot does not count the table of a SEMI or ANTI join among the sources it qualifies
against, so in ``a LEFT SEMI JOIN b ON a.d = b.x`` it reads ``b.x`` as the field ``x`` of a
column ``b`` when ``a`` has one. Such a table is qualified under an alias no column has,
then given its own back."""
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
    taken = {c.lower() for cols in columns.values() for c in cols}
    tree, renamed = _rename_semi_tables(tree.copy(), taken)
    try:
        tree = sqlglot_qualify(tree, schema=schema, dialect=DIALECT, validate_qualify_columns=True,
                               quote_identifiers=False)
    except (OptimizeError, AssertionError) as e:  # sqlglot asserts what it cannot qualify
        raise CompileError(f"the query cannot be resolved: {e}", view=view) from e
    return _restore(tree, renamed) if renamed else tree


def _rename_semi_tables(tree: exp.Expr, taken: set[str]) -> tuple[exp.Expr, dict[str, str]]:
    """``tree`` with the table of each SEMI/ANTI join aliased by a name no column has (its
    references in the ON condition follow); returns the names given, each to the original."""
    renamed: dict[str, str] = {}
    for join in list(tree.find_all(exp.Join)):
        if (join.kind or "").upper() not in ("SEMI", "ANTI") or not isinstance(join.this, exp.Table):
            continue
        original = join.this.alias_or_name
        fresh = next(n for i in range(len(taken) + len(renamed) + 1)
                     if (n := f"semi_{i}") not in taken and n not in renamed)
        renamed[fresh] = original
        join.this.set("alias", exp.TableAlias(this=exp.to_identifier(fresh)))
        for column in join.args["on"].find_all(exp.Column) if join.args.get("on") else ():
            if column.table == original:
                column.set("table", exp.to_identifier(fresh))
    return tree, renamed


def _restore(tree: exp.Expr, renamed: Mapping[str, str]) -> exp.Expr:
    """The original alias of each table :func:`_rename_semi_tables` renamed."""
    for node in tree.find_all(exp.Column, exp.Table):
        if isinstance(node, exp.Column) and node.table in renamed:
            node.set("table", exp.to_identifier(renamed[node.table]))
        elif isinstance(node, exp.Table) and node.alias in renamed:
            node.set("alias", exp.TableAlias(this=exp.to_identifier(renamed[node.alias])))
    return tree
