"""SQL text → logical plan: a circuit of Z-set operators over whole relations.

parse (spark dialect) → validate → qualify (sqlglot: expand stars, qualify columns,
resolve USING / aliases / ordinals) → plan each query scope. Inside a scope every
column of a FROM item is renamed ``alias__column`` so joined relations never clash,
single-relation predicates are pushed below the joins, and joins are ordered so that
each new relation connects by an equality to those already joined.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.qualify import qualify

from ..circuit.operators import AggCall, Aggregate, Filter, Join, Map, Operator, Plus, distinct, quote
from ..errors import CompileError
from .validate import AGGREGATES, position, unsupported, validate

DIALECT = "spark"


def parse(sql: str, view: str | None = None) -> exp.Query:
    """One query statement, validated against the supported set."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        raise CompileError(f"cannot parse SQL: {first.get('description', e)}", view=view,
                           line=first.get("line"), col=first.get("col")) from e
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise CompileError("a view is exactly one SELECT query", view=view)
    validate(statements[0], view)
    return statements[0]


def plan(sql: str, catalog: Mapping[str, Operator], view: str | None = None) -> Operator:
    """The logical plan of ``sql``; ``catalog`` maps relation names to their operators."""
    tree = parse(sql, view)
    schema = {name: {c: "string" for c in op.columns} for name, op in catalog.items()}
    try:
        tree = qualify(tree, schema=schema, dialect=DIALECT, validate_qualify_columns=True,
                       quote_identifiers=False)
    except OptimizeError as e:
        raise CompileError(str(e), view=view) from e
    return _Planner(catalog, view).query(tree, {})


Env = Mapping[str, Operator]


@dataclass
class _Planner:
    catalog: Mapping[str, Operator]
    view: str | None

    def query(self, q: exp.Expression, env: Env) -> Operator:
        with_ = q.args.get("with_")
        if with_:
            env = dict(env)
            for cte in with_.expressions:
                env[cte.alias_or_name] = self.query(cte.this, env)
        if isinstance(q, exp.Subquery):
            return self.query(q.this, env)
        if isinstance(q, exp.Union):
            return self.union(q, env)
        if isinstance(q, exp.Select):
            return self.select(q, env)
        raise unsupported(f"query form {type(q).__name__}", q, self.view)

    def union(self, q: exp.Union, env: Env) -> Operator:
        left, right = self.query(q.this, env), self.query(q.expression, env)
        if len(left.columns) != len(right.columns):
            raise CompileError(
                f"UNION sides have {len(left.columns)} and {len(right.columns)} columns", view=self.view,
                **position(q))  # type: ignore[arg-type]
        right = Map(right, tuple((n, quote(c)) for n, c in zip(left.columns, right.columns)))
        both: Operator = Plus((left, right))
        return distinct(both) if q.args.get("distinct") else both

    def relation(self, source: exp.Expression, env: Env) -> Operator:
        if isinstance(source, exp.Subquery):
            return self.query(source.this, env)
        if isinstance(source, exp.Table):
            names = [source.name] if not source.db else [f"{source.db}.{source.name}", source.name]
            for name in names:
                if name in env:
                    return env[name]
                if name in self.catalog:
                    return self.catalog[name]
            raise CompileError(f"unknown relation {source.sql(DIALECT)}", view=self.view,
                               **position(source))  # type: ignore[arg-type]
        raise unsupported(f"FROM item {type(source).__name__}", source, self.view)

    def select(self, q: exp.Select, env: Env) -> Operator:
        items = [q.args["from_"].this] + [j.this for j in q.args.get("joins") or []]
        scope = [q.args.get(k) for k in ("where", "group", "having")] + list(q.expressions)
        scope += [j.args.get("on") for j in q.args.get("joins") or []]
        used: dict[str, set[str]] = {}
        for node in scope:
            for col in node.find_all(exp.Column) if node else ():
                used.setdefault(col.table, set()).add(col.name)

        sources: dict[str, Operator] = {}
        for item in items:
            alias = item.alias_or_name
            op = self.relation(item, env)
            keep = [c for c in op.columns if c in used.get(alias, ())]
            sources[alias] = Map(op, tuple((mangle(alias, c), quote(c)) for c in keep))

        conjuncts = [c for node in [q.args.get("where")] + [j.args.get("on") for j in q.args.get("joins") or []]
                     if node is not None for c in _conjuncts(node.this if isinstance(node, exp.Where) else node)]
        node = self.join(sources, conjuncts)

        if q.args.get("group") or any(_aggregates(e) for e in q.expressions) or q.args.get("having"):
            node, render = self.aggregate(q, node)
            having = q.args.get("having")
            if having is not None:
                node = Filter(node, render(having.this))
        else:
            render = _render
        node = Map(node, tuple((e.alias_or_name, render(e.unalias())) for e in q.expressions))
        if q.args.get("distinct"):
            node = distinct(node)
        return node

    def join(self, sources: dict[str, Operator], conjuncts: list[exp.Expression]) -> Operator:
        """Push single-relation predicates down, then join greedily along equalities."""
        pending: list[exp.Expression] = []
        constant: list[exp.Expression] = []
        for c in conjuncts:
            aliases = _aliases(c)
            if len(aliases) == 1:
                (alias,) = aliases
                sources[alias] = Filter(sources[alias], _render(c))
            elif aliases:
                pending.append(c)
            else:
                constant.append(c)

        order = list(sources)
        joined = {order.pop(0)}
        node = sources[next(iter(joined))]
        while order:
            nxt = next((a for a in order if any(_equi(c, joined, a) for c in pending)), order[0])
            order.remove(nxt)
            scope = joined | {nxt}
            here = [c for c in pending if _aliases(c) <= scope]
            pending = [c for c in pending if c not in here]
            keys = tuple((_render(k[0]), _render(k[1])) for c in here if (k := _equi(c, joined, nxt)))
            on = " AND ".join(f"({_render(c)})" for c in here) or "TRUE"
            node = Join(node, sources[nxt], on, keys)
            joined = scope
        for c in constant:
            node = Filter(node, _render(c))
        return node

    def aggregate(self, q: exp.Select, node: Operator) -> tuple[Operator, Callable[[exp.Expression], str]]:
        """Pre-project group keys and aggregate arguments, aggregate, and return how to
        render the SELECT list / HAVING over the aggregate's output columns."""
        group = q.args.get("group")
        if group is not None and group.args.get("all"):
            group_exprs = [e.unalias() for e in q.expressions if not _aggregates(e)]
        else:
            group_exprs = list(group.expressions) if group is not None else []
        keys: dict[str, str] = {}  # rendered group expression → key column
        for g in group_exprs:
            keys.setdefault(_render(g), f"_g{len(keys)}")
        calls: dict[str, AggCall] = {}
        args: dict[str, str] = {}  # rendered argument → pre-projected column
        for e in list(q.expressions) + ([q.args["having"]] if q.args.get("having") else []):
            for call in _aggregates(e):
                key = _render(call)
                if key in calls:
                    continue
                arg = call.this
                is_distinct = isinstance(arg, exp.Distinct)
                if is_distinct:
                    arg = arg.expressions[0]
                col = None
                if not isinstance(arg, exp.Star):
                    col = args.setdefault(_render(arg), f"_x{len(args)}")
                calls[key] = AggCall(f"_a{len(calls)}", AGGREGATES[type(call)], col, is_distinct)
        pre = Map(node, tuple((k, e) for e, k in keys.items()) + tuple((c, e) for e, c in args.items()))
        agg = Aggregate(pre, tuple(keys.values()), tuple(calls.values()))

        def render(e: exp.Expression) -> str:
            def swap(n: exp.Expression) -> exp.Expression:
                if type(n) in AGGREGATES:
                    return exp.column(calls[_render(n)].name, quoted=True)
                if not isinstance(n, (exp.Literal, exp.Boolean, exp.Null)):
                    key = keys.get(_render(n))
                    if key:
                        return exp.column(key, quoted=True)
                return n

            out = e.copy().transform(swap, copy=False)
            loose = next((c for c in out.find_all(exp.Column) if c.table), None)
            if loose is not None:
                raise CompileError(
                    f"column {loose.table}.{loose.name} is neither grouped nor aggregated",
                    view=self.view, **position(e))  # type: ignore[arg-type]
            return out.sql(DIALECT)

        return agg, render


def mangle(alias: str, column: str) -> str:
    """The scope-unique name of ``alias.column`` inside one SELECT."""
    return f"{alias}__{column}"


def _render(e: exp.Expression) -> str:
    """Spark SQL for ``e`` with every qualified column replaced by its mangled name."""

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.table:
            return exp.column(mangle(n.table, n.name), quoted=True)
        return n

    return e.copy().transform(swap, copy=False).sql(DIALECT)


def _conjuncts(e: exp.Expression) -> list[exp.Expression]:
    e = e.unnest()
    if isinstance(e, exp.And):
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def _aliases(e: exp.Expression) -> set[str]:
    return {c.table for c in e.find_all(exp.Column)}


def _equi(c: exp.Expression, joined: set[str], new: str) -> tuple[exp.Expression, exp.Expression] | None:
    """(joined side, new side) when ``c`` is an equality between the two."""
    if not isinstance(c, exp.EQ):
        return None
    left, right = _aliases(c.left), _aliases(c.right)
    if left and right and left <= joined and right == {new}:
        return c.left, c.right
    if left and right and right <= joined and left == {new}:
        return c.right, c.left
    return None


def _aggregates(e: exp.Expression) -> list[exp.Expression]:
    return [n for n in e.find_all(*AGGREGATES)]
