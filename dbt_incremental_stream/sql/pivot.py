"""PIVOT and UNPIVOT as the plain queries Spark's analyzer makes of them.

The planner plans a FROM item's PIVOT or UNPIVOT as the query these functions build over
the item (bound to a name of its own), so each is planned by the rules of its parts.

- ``t PIVOT (SUM(v) AS s FOR k IN ('a', 'b' AS bb))`` groups by the columns of ``t`` that
  neither the aggregates nor ``k`` read. Each value's column is its aggregate over the
  rows whose ``k`` equals it, NULL-safely: ``SUM(IF(k <=> 'a', v, NULL))``. Spark's
  ``ResolvePivot`` takes one of two forms. When every aggregate is a number or a boolean
  (``PivotFirst``), a value without rows is NULL, even for COUNT. Otherwise each aggregate
  is computed over its value's rows, and COUNT is 0. Both are built here.
- ``t UNPIVOT [INCLUDE NULLS] (val FOR name IN (v, w AS ww))`` is a UNION ALL with one arm
  per unpivoted column: the other columns, the name (``'v'``, ``'ww'``) and the value.
  Without INCLUDE NULLS, a row whose values are all NULL is left out.
Column names are sqlglot's, which spells them as Spark does (``a_s`` for two aggregates).
"""
from __future__ import annotations

from typing import Callable, Sequence

from sqlglot import exp

from .validate import is_aggregate

#: the aggregate types Spark's ``PivotFirst`` takes (``PivotFirst.supportsDataType``)
FIRST_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean", "decimal")


def _columns(e: exp.Expr) -> list[str]:
    """The names of the columns ``e`` reads (unqualified: a pivot reads its one relation)."""
    return [c.name for c in e.find_all(exp.Column)]


def _values(e: exp.Expr) -> list[exp.Expr]:
    value = e.this if isinstance(e, exp.PivotAlias) else e
    return list(value.expressions) if isinstance(value, exp.Tuple) else [value]


def _only(agg: exp.Expr, match: exp.Expr) -> exp.Expr:
    """``agg`` with each aggregate call's arguments NULL outside the rows ``match`` holds
    for (a constant argument, a percentile's, kept), as Spark's ``ResolvePivot`` writes it."""
    def wrap(arg: exp.Expr) -> exp.Expr:
        if isinstance(arg, exp.Star):
            arg = exp.Literal.number(1)
        elif not arg.find(exp.Column):
            return arg
        return exp.If(this=match.copy(), true=arg, false=exp.Null())

    def each(node: exp.Expr) -> exp.Expr:
        if not is_aggregate(node) and not isinstance(node, exp.WithinGroup):
            return node
        node = node.copy()
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Distinct):
                value.set("expressions", [wrap(v) for v in value.expressions])
            elif isinstance(value, exp.Order):
                for o in value.expressions:
                    o.set("this", wrap(o.this))
            elif isinstance(value, exp.Expr) and not is_aggregate(value):
                node.set(key, wrap(value))
            elif isinstance(value, list):
                node.set(key, [wrap(v) if isinstance(v, exp.Expr) else v for v in value])
        return node

    return agg.copy().transform(each, copy=False)


def _column(name: str, table: str) -> exp.Column:
    return exp.column(name, table=table, quoted=True)


def pivoted(pivot: exp.Pivot, columns: Sequence[str], source: str,
            types: Callable[[exp.Expr], str | None]) -> exp.Select:
    """The aggregate that ``pivot`` is over relation ``source`` of ``columns``; ``types``
    gives an aggregate's Spark type (None: not known, taken for a number)."""
    aggs = [e.this if isinstance(e, exp.Alias) else e for e in pivot.expressions]
    (field,) = pivot.args["fields"]
    keys = [exp.column(c, table=source, quoted=True) for c in _columns(field.this)]
    read = {c.lower() for e in (*aggs, field.this) for c in _columns(e)}
    grouped = [c for c in columns if c.lower() not in read]

    def local(e: exp.Expr) -> exp.Expr:  # the columns of ``source``
        e = e.copy()
        for c in e.find_all(exp.Column):
            c.replace(_column(c.name, source))
        return e

    aggs = [local(a) for a in aggs]
    first = all(str(t or "double").startswith(FIRST_TYPES) for t in map(types, aggs))
    names = iter(c.name for c in pivot.args["columns"])
    outputs: list[exp.Expr] = [_column(c, source).as_(c, quoted=True) for c in grouped]
    for value in field.expressions:
        match = exp.and_(*(exp.NullSafeEQ(this=k.copy(), expression=v.copy()) for k, v in zip(keys, _values(value))))
        for agg in aggs:
            out = _only(agg, match)
            if first:  # PivotFirst: no row of this value, no value (COUNT too)
                rows = exp.Count(this=exp.If(this=match.copy(), true=exp.Literal.number(1), false=exp.Null()))
                out = exp.Case(ifs=[exp.If(this=exp.GT(this=rows, expression=exp.Literal.number(0)), true=out)])
            outputs.append(out.as_(next(names), quoted=True))
    query = exp.select(*outputs).from_(exp.to_table(source))
    return query.group_by(*(_column(c, source) for c in grouped)) if grouped else query


def unpivoted(pivot: exp.Pivot, columns: Sequence[str], source: str) -> exp.Query:
    """The UNION ALL that ``pivot`` (an UNPIVOT) is over relation ``source`` of ``columns``."""
    given = pivot.expressions
    values = [v.name for v in (given[0].expressions if isinstance(given[0], exp.Tuple) else given)]
    (field,) = pivot.args["fields"]
    name = field.this.name
    arms = [(e.alias if isinstance(e, exp.PivotAlias) and e.alias else "_".join(_columns(e)),
             _columns(e.this if isinstance(e, exp.PivotAlias) else e)) for e in field.expressions]
    read = {c.lower() for _, cs in arms for c in cs}
    kept = [_column(c, source).as_(c, quoted=True) for c in columns if c.lower() not in read]
    selects = []
    for label, cs in arms:
        read_ = [_column(c, source) for c in cs]
        select = exp.select(*kept, exp.Literal.string(label).as_(name, quoted=True),
                            *(c.as_(v, quoted=True) for c, v in zip(read_, values))).from_(exp.to_table(source))
        if not pivot.args.get("include_nulls"):
            select = select.where(exp.or_(*(exp.Not(this=exp.Is(this=c.copy(), expression=exp.Null())) for c in read_)))
        selects.append(select)
    query: exp.Query = selects[0]
    for s in selects[1:]:
        query = exp.union(query, s, distinct=False)
    return query
