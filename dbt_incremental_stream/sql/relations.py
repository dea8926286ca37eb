"""Relation names in a query: which catalog relations it reads, and the same query reading
them under other names.

A dbt model reads ``schema.table`` relations; the engine names its sources and views with
one plain identifier each (:func:`engine_name`), so compiled dbt SQL is renamed before
planning and every name in a plan or an error is one identifier. The SQL the engine reads
and writes is in one dialect, :data:`DIALECT`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from ..errors import CompileError

#: the dialect of every query the engine reads and every expression it writes
DIALECT = "spark"


def _tables(tree: exp.Expr) -> list[exp.Table]:
    """Base-table references: not CTE names, not table functions."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return [t for t in tree.find_all(exp.Table)
            if t.name and (t.db or t.name.lower() not in ctes)]


def qualified(table: exp.Table) -> str:
    """``schema.table`` (or ``table``) in lower case, without quotes or catalog."""
    return ".".join(p.lower() for p in (table.db, table.name) if p)


def syntax_error(e: ParseError, view: str | None) -> CompileError:
    """sqlglot's parse error as the project's, at the position of its first error."""
    first = e.errors[0] if e.errors else {}
    return CompileError(f"cannot parse SQL: {first.get('description', e)}", view=view,
                        line=first.get("line"), col=first.get("col"))


def parse_one(sql: str, view: str | None = None) -> exp.Expr:
    """The first statement of ``sql``, not validated: any model's relations can be read,
    whether or not it can run incrementally."""
    try:
        return sqlglot.parse_one(sql, read=DIALECT)
    except ParseError as e:
        raise syntax_error(e, view) from e


def referenced(sql: str | exp.Expr, view: str | None = None) -> list[str]:
    """The relations ``sql`` (text, or a tree from :func:`parse_one`) reads, qualified, in
    order of first appearance."""
    return list(dict.fromkeys(qualified(t) for t in _tables(parse_one(sql, view) if isinstance(sql, str) else sql)))


def engine_name(relation: str) -> str:
    """The engine's one-identifier name for ``schema.table``."""
    return relation.lower().replace(".", "__")


def rename(sql: str, names: Mapping[str, str], view: str | None = None, tree: exp.Expr | None = None) -> str:
    """``sql`` reading ``names[relation]`` wherever it read ``relation``; the old name stays
    usable as a qualifier (``schema.table.col`` and ``table.col``) through an alias. The
    names are replaced in the text itself, so every other line and character stays where
    the user wrote it (an error's position points into the model's own SQL); ``tree`` is
    ``sql`` parsed already (:func:`parse_one`), if at hand."""
    tree = parse_one(sql, view) if tree is None else tree
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in the text
    for table in _tables(tree):
        new = names.get(qualified(table))
        if new is not None:
            edits.append((*_span(table.parts), new if table.alias else f"{new} AS {table.name}"))
    for column in tree.find_all(exp.Column):
        if column.args.get("db"):  # schema.table.col → table.col
            edits.append((_span(column.parts)[0], _span([column.args["table"]])[0], ""))
    for start, end, text in sorted(edits, reverse=True):
        sql = sql[:start] + text + sql[end:]
    return sql


def _span(parts: Sequence[exp.Expr]) -> tuple[int, int]:
    """Where identifiers ``parts`` (one after another) stand in the text they were parsed
    from (sqlglot's parser records it on every identifier): the offset of the first's first
    character, and past the last's last."""
    return parts[0].meta["start"], parts[-1].meta["end"] + 1
