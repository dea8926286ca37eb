"""A rewritten query tree → logical plan: a circuit of Z-set operators over whole relations.

The tree comes from :func:`~.compile.compile`, after the passes of :data:`~.rewrites.RULES`
(columns qualified by their FROM item's alias). Each query scope is planned on its own:
inside a scope every column of a FROM item is renamed ``alias__column`` so joined relations
never clash, single-relation predicates are pushed below the joins, and joins are ordered
so that each new relation connects by an equality to those already joined. Outer joins
become an inner join plus the unmatched rows padded with NULLs; subqueries are decorrelated
into joins (see :meth:`_Planner.decorrelate`); window functions and ORDER BY … LIMIT become
``Window`` nodes.
"""
from __future__ import annotations

import itertools
from functools import partial
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence, cast

import sqlglot
from sqlglot import exp

from ..circuit.operators import (
    AggCall,
    Aggregate,
    Filter,
    Generate,
    Join,
    Map,
    Operator,
    Pad,
    Plus,
    Scale,
    Window,
    distinct,
    is_identifier,
    minus,
    passthrough,
    quote,
)
from ..errors import CompileError
from .predicates import conjuncts
from .relations import DIALECT
from .join_keys import key_columns
from .temporal import temporal_filters
from .pivot import pivoted, unpivoted
from .validate import (AGGREGATES, SPARK_AGGREGATES, function_name, generator, is_aggregate, position, spark_aggregate,
                       unsupported)

Env = Mapping[str, Operator]
Render = Callable[[exp.Expr], str]
#: the columns, as (name, Spark type), that Spark makes of an expression's SQL over a
#: node's rows: a generator's (whether an array or a map is exploded, a struct's fields),
#: an aggregate's type
Analyzed = Callable[[Operator, str], Sequence[tuple[str, str]]]
#: an equality used to join: (SQL on the left side, SQL on the right side, NULL-safe)
Pair = tuple[str, str, bool]


#: Spark's ``spark.sql.cteRecursionLevelLimit`` by default: a recursive CTE's levels
RECURSION_LEVELS = 100


def plan(tree: exp.Expr, catalog: Mapping[str, Operator], view: str | None = None,
         analyzed: Analyzed | None = None, recursion: int = RECURSION_LEVELS) -> Operator:
    """The logical plan of ``tree``, a query after :data:`~.rewrites.RULES` (qualified);
    ``catalog`` maps relation names to their operators; ``analyzed`` gives Spark's
    columns of an expression (without it: a generator makes as many columns as it is given
    names, else as of an array, and a PIVOT's aggregates are taken for numbers);
    ``recursion`` is Spark's level limit of a recursive CTE. Then two passes over the
    operators: joins with the clock as temporal filters, join keys as columns."""
    return key_columns(temporal_filters(_Planner(catalog, view, analyzed, recursion).query(tree, {})))


@dataclass
class _Unit:
    """Joined FROM items: the aliases they bind and their operator."""

    aliases: frozenset[str]
    op: Operator


@dataclass
class _Sub:
    """A decorrelated subquery: an uncorrelated relation and how it joins to the outer rows."""

    op: Operator
    keys: list[str]  # its correlation key columns …
    outer: list[tuple[str, bool]]  # … equal to these outer expressions (SQL, NULL-safe)
    mark: str  # a column that is TRUE on every row
    value: str | None = None  # the column holding its value (IN / scalar subquery)
    test: str | None = None  # IN: the outer expression tested for membership
    empty: str = "NULL"  # scalar: the value when no row correlates
    empties: list[str | None] = field(default_factory=list)  # LATERAL aggregate: per column, its value over no rows

    @property
    def key_pairs(self) -> list[Pair]:
        """The correlation equalities."""
        return [(o, quote(k), ns) for k, (o, ns) in zip(self.keys, self.outer)]

    @property
    def pairs(self) -> list[Pair]:
        """The equalities that join it to the outer rows: correlation, and IN's value."""
        if self.test is None:
            return self.key_pairs
        return [(self.test, quote(self.value), False)] + self.key_pairs  # type: ignore[arg-type]


@dataclass
class _Planner:
    catalog: Mapping[str, Operator]
    view: str | None
    analyzed: Analyzed | None = None
    recursion: int = RECURSION_LEVELS
    _names: itertools.count = field(default_factory=itertools.count)

    def fresh(self, prefix: str) -> str:
        """A column name unique within the view."""
        return f"_{prefix}{next(self._names)}"

    def error(self, message: str, node: exp.Expr) -> CompileError:
        return CompileError(message, view=self.view, **position(node))

    # --- queries -----------------------------------------------------------------------

    def query(self, q: exp.Expr, env: Env) -> Operator:
        with_ = q.args.get("with_")
        if with_:
            env = dict(env)
            for cte in with_.expressions:
                recursive = with_.args.get("recursive") and _reads(cte.this, cte.alias_or_name)
                env[cte.alias_or_name] = self.recursive(cte, env) if recursive else self.query(cte.this, env)
        if isinstance(q, exp.Subquery):
            return self.top_k(q, self.query(q.this, env))
        if isinstance(q, exp.SetOperation):
            return self.top_k(q, self.set_operation(q, env))
        if isinstance(q, exp.Select):
            return self.select(q, env)
        raise unsupported(f"query form {type(q).__name__}", q, self.view)

    def recursive(self, cte: exp.CTE, env: Env) -> Operator:
        """``WITH RECURSIVE r AS (anchor UNION ALL step)``, unrolled as Spark runs it: level
        0 is the anchor, level i + 1 the step over level i alone, and the CTE the union of
        the levels below the limit. Each level is planned as any query, so a tick costs
        the change at each level. A row at the limit is Spark's error."""
        name, q = cte.alias_or_name, cte.this
        if not isinstance(q, exp.Union) or q.args.get("distinct") or _reads(q.this, name):
            raise unsupported("WITH RECURSIVE other than anchor UNION ALL recursive step", q, self.view)
        level = self.query(q.this, env)
        names = [c.name for c in cte.args["alias"].columns] or list(level.columns)
        levels: list[Operator] = []
        for _ in range(self.recursion + 1):
            level = Map(level, tuple((n, quote(c)) for n, c in zip(names, level.columns)))
            levels.append(level)
            level = self.query(q.expression, {**env, name: level})
        error = (f"raise_error('[RECURSION_LEVEL_LIMIT_EXCEEDED] Recursion level limit {self.recursion} reached "
                 f"but query has not exhausted, try increasing spark.sql.cteRecursionLevelLimit.')")
        last = levels.pop()  # level ``recursion``: any row is Spark's error
        fresh = [self.fresh("r") for _ in names]  # Spark computes it: names apart from a stage's columns
        last = Map(last, tuple((f, quote(n)) for f, n in zip(fresh, names)))
        guard = Map(last, tuple((n, f"IF({error} IS NULL, {quote(f)}, {quote(f)})" if i == 0 else quote(f))
                                for i, (n, f) in enumerate(zip(names, fresh))))
        return Plus((*levels, guard))

    def set_operation(self, q: exp.SetOperation, env: Env) -> Operator:
        left, right = self.query(q.this, env), self.query(q.expression, env)
        if len(left.columns) != len(right.columns):
            raise self.error(f"{q.key.upper()} sides have {len(left.columns)} and {len(right.columns)} columns", q)
        cols = left.columns
        right = Map(right, tuple((n, quote(c)) for n, c in zip(cols, right.columns)))
        if isinstance(q, exp.Union):
            both: Operator = Plus((left, right))
            return distinct(both) if q.args.get("distinct") else both
        # INTERSECT / EXCEPT: count each row's occurrences on both sides, then keep rows by the counts
        a, b = self.fresh("na"), self.fresh("nb")
        same = passthrough(cols)
        tagged = Plus((Map(left, same + ((a, "1"), (b, "0"))), Map(right, same + ((a, "0"), (b, "1")))))
        counts: Operator = Aggregate(tagged, cols, (AggCall(a, "sum", a), AggCall(b, "sum", b)))
        na, nb = quote(a), quote(b)
        if isinstance(q, exp.Intersect):
            counts = (Filter(counts, f"{na} > 0 AND {nb} > 0") if q.args.get("distinct")
                      else Scale(counts, f"LEAST({na}, {nb})"))
        else:
            counts = (Filter(counts, f"{na} > 0 AND {nb} = 0") if q.args.get("distinct")
                      else Scale(counts, f"GREATEST({na} - {nb}, 0)"))
        return Map(counts, same)

    def relation(self, source: exp.Expr, env: Env) -> Operator:
        if source.args.get("pivots"):
            return self.pivots(source, env)
        if isinstance(source, exp.Subquery):
            return self.query(source, env)
        if isinstance(source, exp.Table):
            names = [source.name] if not source.db else [f"{source.db}.{source.name}", source.name]
            for name in names:
                if name in env:
                    return env[name]
                if name in self.catalog:
                    return self.catalog[name]
            raise self.error(f"unknown relation {source.sql(DIALECT)}", source)
        raise unsupported(f"FROM item {type(source).__name__}", source, self.view)

    def pivots(self, source: exp.Expr, env: Env) -> Operator:
        """A FROM item's PIVOT or UNPIVOT: the query :mod:`.pivot` makes of it, over the
        item bound to a name of its own."""
        bare = source.copy()
        bare.set("pivots", None)
        node = self.relation(bare, env)
        for p in source.args["pivots"]:
            if len(p.args.get("fields") or []) != 1:
                raise unsupported("PIVOT without exactly one FOR column list", p, self.view)
            name = self.fresh("pivot")
            query = (unpivoted(p, node.columns, name) if p.args.get("unpivot")
                     else pivoted(p, node.columns, name, partial(self.type_of, node)))
            node = self.query(query, {**env, name: node})
        return node

    def type_of(self, node: Operator, e: exp.Expr) -> str | None:
        """Spark's type of ``e`` (columns of ``node``) over ``node``'s rows; None without
        :attr:`analyzed`."""
        if self.analyzed is None:
            return None
        e = e.copy()
        for c in e.find_all(exp.Column):
            c.set("table", None)
        return self.analyzed(node, e.sql(DIALECT))[0][1]

    def select(self, q: exp.Select, env: Env) -> Operator:
        if q.is_star and not any(q.args.get(k) for k in ("joins", "where", "group", "having", "laterals")):
            return self.relation(q.args["from_"].this, env)  # qualify leaves ``SELECT *`` over a PIVOT only
        subqueries = [j for j in q.args.get("joins") or [] if isinstance(j.this, exp.Lateral)]  # LATERAL (SELECT …)
        if subqueries:
            q = q.copy()
            q.set("joins", [j for j in q.args["joins"] if not isinstance(j.this, exp.Lateral)] or None)
        joins = q.args.get("joins") or []
        laterals = q.args.get("laterals") or []
        items = [q.args["from_"].this] + [j.this for j in joins]
        scope = [q.args.get(k) for k in ("where", "group", "having", "qualify", "order")] + list(q.expressions)
        scope += [j.args.get("on") for j in joins] + laterals
        scope += [j.args.get(k) for j in subqueries for k in ("on", "this")]
        used: dict[str, set[str]] = {}
        for node in scope:
            for col in node.find_all(exp.Column) if node else ():
                used.setdefault(col.table, set()).add(col.name)

        sources: dict[str, Operator] = {}
        for item in items:
            alias = _bound(item)
            op = self.relation(item, env)
            keep = [c for c in op.columns if c in used.get(alias, ())]
            sources[alias] = Map(op, tuple((mangle(alias, c), quote(c)) for c in keep))
        generated = {lateral.alias for lateral in laterals} | {j.this.alias for j in subqueries}
        aliases = set(sources) | generated

        where = conjuncts(q.args["where"].this) if q.args.get("where") else []
        node = self.joins(q, sources, [c for c in where if not _subqueries(c) and not _aliases(c) & generated])
        bound = set(sources) | {j.this.alias for j in subqueries}
        for join in subqueries:  # after the other joins: each reads the rows before it
            node = self.lateral_subquery(node, join, bound, env)
        for lateral in laterals:  # after the FROM clause's joins, before WHERE: as Spark applies them
            node = self.lateral(node, lateral)
        for c in where:
            if _subqueries(c):
                node = self.filter(node, c, aliases, env, _render)
            elif _aliases(c) & generated:
                node = _filter(node, _render(c))

        render: Render = _render
        if q.args.get("group") or any(_aggregates(e) for e in q.expressions) or q.args.get("having"):
            node, render = self.aggregate(q, node)
            having = q.args.get("having")
            for c in conjuncts(having.this) if having is not None else []:
                node = self.filter(node, c, aliases, env, render)
        node, render = self.windows(q, node, render)
        for c in conjuncts(q.args["qualify"].this) if q.args.get("qualify") else []:
            node = _filter(node, render(c))

        outputs: list[tuple[str, str]] = []
        for item in q.expressions:
            call = item.this if isinstance(item, (exp.Alias, exp.Aliases)) else item
            if generator(call):
                given = [i.name for i in item.expressions] if isinstance(item, exp.Aliases) else [item.alias_or_name]
                node, made = self.generate(node, call, render, None)
                outputs += zip(given if len(given) == len(made) else made, map(quote, made))
                continue
            node, e = self.inline(node, item.unalias(), aliases, env, render) if _subqueries(item) else (node, item)
            outputs.append((item.alias_or_name, render(e.unalias())))
        names = [n for n, _ in outputs]
        hidden = self.order_columns(q, names, render)
        node = Map(node, tuple(outputs) + tuple((n, e) for n, e in hidden.values() if n not in names))
        if q.args.get("distinct"):
            node = distinct(node)
        node = self.top_k(q, node, {k: n for k, (n, _) in hidden.items()}, names)
        return node if node.columns == tuple(names) else Map(node, passthrough(names))

    # --- LATERAL subqueries ---------------------------------------------------------------

    def lateral_subquery(self, node: Operator, join: exp.Join, aliases: set[str], env: Env) -> Operator:
        """``[LEFT] JOIN LATERAL (SELECT …) s [ON …]``: the subquery decorrelated as a
        relation keyed by the outer values it reads (:meth:`decorrelate`), joined to
        ``node``; its columns are ``s__c``. An aggregate without GROUP BY gives each outer
        row one row: its value over no rows where none correlate."""
        lateral = join.this
        alias, side = lateral.alias, (join.side or "").upper()
        on = join.args.get("on")
        if side not in ("", "LEFT") or (side == "LEFT" and on is not None and on != exp.true()):
            raise unsupported(f"{side} JOIN LATERAL with a condition", join, self.view)
        sub = self.decorrelate(lateral.this, node, aliases - {alias}, env, _render, None, relation=alias)
        if not sub.empties:  # a relation: each correlated row, or NULLs (LEFT)
            node = (self.left_join if side == "LEFT" else _join)(node, sub.op, sub.pairs, [])
        else:  # one row per outer row: the aggregates' values, over no rows where none correlate
            node = self.attach(node, sub)
            m = quote(sub.mark)
            empty = {c: e for c, e in zip(sub.op.columns, sub.empties) if e is not None}
            node = Map(node, tuple((c, quote(c)) for c in node.columns if c not in empty) + tuple(
                (c, f"CASE WHEN {m} IS NULL THEN {e} ELSE {quote(c)} END") for c, e in empty.items()))
        if side == "" and on is not None and on != exp.true():
            node = _filter(node, _render(on))
        return node

    # --- generators ----------------------------------------------------------------------

    def lateral(self, node: Operator, lateral: exp.Lateral) -> Operator:
        """``LATERAL VIEW [OUTER] gen(...) t AS c1, c2``: the generator's columns beside
        ``node``'s, named ``t__c1``, ``t__c2`` (with no names given: as Spark names them)."""
        alias = lateral.args["alias"]
        call = lateral.this
        if lateral.args.get("outer") and generator(call) in ("explode", "posexplode", "inline"):
            call = exp.Anonymous(this=f"{generator(call)}_outer", expressions=[call.this])
        columns = [c.name for c in alias.columns] or self.spark_names(node, call, _render)
        return self.generate(node, call, _render, [mangle(alias.name, c) for c in columns])[0]

    def generate(self, node: Operator, call: exp.Expr, render: Render,
                 names: Sequence[str] | None) -> tuple[Operator, list[str]]:
        """``node`` with the rows generator ``call`` makes of each row (a linear flat-map):
        its columns, then the generated ones (``names``, or fresh). ``stack(n, ...)`` is a
        union of ``n`` projections; the others a :class:`Generate` over the column of
        their argument."""
        name = cast(str, generator(call))
        keep = passthrough(node.columns)
        if name == "stack":
            count = _int(call.this, "stack()'s number of rows", self)
            values = [render(v) for v in call.expressions]
            width = -(-len(values) // count)
            made = list(names) if names is not None else [self.fresh("gen") for _ in range(width)]
            rows = [values[r * width:(r + 1) * width] for r in range(count)]
            return Plus(tuple(Map(node, keep + tuple(zip(made, row + ["NULL"] * (width - len(row)))))
                              for row in rows)), made
        arg = render(call.expressions[0] if isinstance(call, exp.Anonymous) else call.this)
        if not is_identifier(arg):  # the argument computed first, as a column
            column = self.fresh("garg")
            node = Map(node, keep + ((column, arg),))
            arg = quote(column)
        column = exp.to_identifier(arg[1:-1].replace("``", "`")).name
        kind, outer = name.removesuffix("_outer"), name.endswith("_outer")
        if names is None:
            names = [self.fresh("gen") for _ in self.spark_names(node, exp.column(column, quoted=True), None, kind)]
        made = list(names)
        return Generate(node, kind, column, tuple(made), outer), made

    def spark_names(self, node: Operator, call: exp.Expr, render: Render | None, kind: str | None = None) -> list[str]:
        """The columns Spark names for generator ``call`` over ``node`` (``kind``: of a
        column ``call``). Without :attr:`analyzed`: an array's."""
        sql = f"{kind}({call.sql(DIALECT)})" if kind is not None else cast(Render, render)(call)
        if self.analyzed is not None:
            return [name for name, _ in self.analyzed(node, sql)]
        name = kind or cast(str, generator(call)).removesuffix("_outer")
        if name == "stack":
            return [f"col{i}" for i in range(-(-(len(call.expressions)) // int(call.this.name)))]
        return ["pos", "col"] if name == "posexplode" else ["col"]

    # --- joins -------------------------------------------------------------------------

    def joins(self, q: exp.Select, sources: dict[str, Operator], where: list[exp.Expr]) -> Operator:
        """The FROM clause left to right: runs of inner joins are ordered freely, outer and
        semi/anti joins take what is joined so far as their left side."""
        joins = q.args.get("joins") or []
        nullable: set[str] = set()
        seen = {_bound(q.args["from_"].this)}
        for j in joins:
            alias, side = _bound(j.this), (j.side or "").upper()
            if side in ("LEFT", "FULL") and (j.kind or "").upper() not in ("SEMI", "ANTI"):
                nullable.add(alias)
            if side in ("RIGHT", "FULL"):
                nullable |= seen
            seen.add(alias)
        pending = list(where)

        def block(units: list[_Unit], terms: list[exp.Expr]) -> _Unit:
            bound = frozenset().union(*(u.aliases for u in units))
            movable = [c for c in pending if _aliases(c) <= bound and not _aliases(c) & nullable]
            for c in movable:
                pending.remove(c)
            return self.block(units, terms + movable)

        first = _bound(q.args["from_"].this)
        terms: list[exp.Expr]
        units, terms = [_Unit(frozenset({first}), sources[first])], []
        for j in joins:
            alias = _bound(j.this)
            right = _Unit(frozenset({alias}), sources[alias])
            on = conjuncts(j.args["on"]) if j.args.get("on") else []
            side, kind = (j.side or "").upper(), (j.kind or "").upper()
            if kind in ("SEMI", "ANTI"):
                left = block(units, terms)
                pairs, residual = self.split_on(left, right, on, push=True)
                matched = self.semi(left.op, right.op, pairs, residual)
                units, terms = [_Unit(left.aliases, matched if kind == "SEMI" else minus(left.op, matched))], []
            elif side:
                left = block(units, terms)
                units, terms = [self.outer(left, right, on, side)], []
            else:
                units.append(right)
                terms += on
        units = [block(units, terms)]
        return self.block(units, pending).op

    def block(self, units: list[_Unit], terms: list[exp.Expr]) -> _Unit:
        """Inner-join ``units``: push single-unit predicates down, join greedily along equalities."""
        units = list(units)
        pending: list[exp.Expr] = []
        constant: list[exp.Expr] = []
        for c in terms:
            aliases = _aliases(c)
            home = next((i for i, u in enumerate(units) if aliases and aliases <= u.aliases), None)
            if home is not None:
                units[home] = _Unit(units[home].aliases, _filter(units[home].op, _render(c)))
            elif aliases:
                pending.append(c)
            else:
                constant.append(c)

        joined = units.pop(0)
        while units:
            nxt = next((u for u in units if any(_equi(c, joined.aliases, u.aliases) for c in pending)), units[0])
            units.remove(nxt)
            scope = joined.aliases | nxt.aliases
            here = [c for c in pending if _aliases(c) <= scope]
            pending = [c for c in pending if c not in here]
            keys = tuple((_render(k[0]), _render(k[1])) for c in here if (k := _equi(c, joined.aliases, nxt.aliases)))
            on = " AND ".join(f"({_render(c)})" for c in here) or "TRUE"
            joined = _Unit(scope, Join(joined.op, nxt.op, on, keys))
        node = joined.op
        for c in pending + constant:
            node = Filter(node, _render(c))
        return _Unit(joined.aliases, node)

    def split_on(self, left: _Unit, right: _Unit, on: list[exp.Expr], push: bool) -> tuple[list[Pair], list[str]]:
        """An ON condition as equalities between the sides plus the rest; with ``push``,
        conditions on ``right`` alone filter it first (it is the NULL-supplying side)."""
        pairs: list[Pair] = []
        residual: list[str] = []
        for c in on:
            aliases = _aliases(c)
            if push and aliases and aliases <= right.aliases:
                right.op = Filter(right.op, _render(c))
            elif k := _equi(c, left.aliases, right.aliases):
                pairs.append((_render(k[0]), _render(k[1]), isinstance(c, exp.NullSafeEQ)))
            else:
                residual.append(_render(c))
        return pairs, residual

    def outer(self, left: _Unit, right: _Unit, on: list[exp.Expr], side: str) -> _Unit:
        aliases = left.aliases | right.aliases
        if side == "RIGHT":
            left, right = right, left
        pairs, residual = self.split_on(left, right, on, push=side != "FULL")
        node = self.left_join(left.op, right.op, pairs, residual)
        if side == "FULL":
            swapped = [(b, a, ns) for a, b, ns in pairs]
            unmatched = minus(right.op, self.semi(right.op, left.op, swapped, residual))
            padded = Map(Pad(unmatched, left.op), passthrough(node.columns))
            node = Plus((node, padded))
        return _Unit(aliases, node)

    def left_join(self, left: Operator, right: Operator, pairs: list[Pair], residual: list[str]) -> Operator:
        """Every match, plus each left row without one padded with NULLs."""
        inner = _join(left, right, pairs, residual)
        return Plus((inner, Pad(minus(left, self.semi(left, right, pairs, residual)), right)))

    def semi(self, left: Operator, right: Operator, pairs: list[Pair], residual: list[str]) -> Operator:
        """The rows of ``left``, with their multiplicities, that have a match in ``right``."""
        keep = passthrough(left.columns)
        if residual:  # the left rows that occur in the join, as a set
            names = [self.fresh("d") for _ in left.columns]
            inner = _join(left, right, pairs, residual)
            found = distinct(Map(inner, tuple((n, quote(c)) for n, c in zip(names, left.columns))))
            return Map(_join(left, found, [(quote(c), quote(n), True) for c, n in zip(left.columns, names)], []), keep)
        names = [self.fresh("k") for _ in pairs] or [self.fresh("k")]
        found = distinct(Map(right, tuple(zip(names, [b for _, b, _ in pairs] or ["1"]))))
        return Map(_join(left, found, [(a, quote(n), ns) for (a, _, ns), n in zip(pairs, names)], []), keep)

    # --- subqueries ----------------------------------------------------------------------

    def filter(self, node: Operator, cond: exp.Expr, aliases: set[str], env: Env, render: Render) -> Operator:
        """``node`` filtered by a condition with subqueries: EXISTS / IN as semi- or anti-joins
        when they are the whole condition, otherwise joined in as columns."""
        negated = isinstance(cond, exp.Not)
        test = cond.this.unnest() if negated else cond
        if _exists(test) or (isinstance(test, exp.In) and test.args.get("query")):
            value = render(test.this) if isinstance(test, exp.In) else None
            sub = self.decorrelate(test.args.get("query") or test.this, node, aliases, env, render, value)
            matched = Map(_join(node, sub.op, sub.pairs, []), passthrough(node.columns))
            if not negated:
                return matched
            unmatched = minus(node, matched)
            if value is None:
                return unmatched
            # NOT IN is unknown, so false, when the subquery's rows include NULL or the value is NULL
            joined, n, nn = self.in_counts(unmatched, sub)
            kept = Filter(joined, f"COALESCE({n}, 0) = 0 OR (({value}) IS NOT NULL AND {n} = {nn})")
            return Map(kept, passthrough(node.columns))
        joined, cond = self.inline(node, cond, aliases, env, render)
        return Map(Filter(joined, render(cond)), passthrough(node.columns))

    def inline(self, node: Operator, e: exp.Expr, aliases: set[str], env: Env,
               render: Render) -> tuple[Operator, exp.Expr]:
        """Join every subquery of ``e`` to ``node`` and replace it with the column(s) it became."""
        e = e.copy()
        for found in _subqueries(e):
            if _exists(found):
                sub = self.decorrelate(found.this, node, aliases, env, render, None)
                node = self.attach(node, sub)
                result: exp.Expr = exp.column(sub.mark, quoted=True).is_(exp.null()).not_()
            elif isinstance(found, exp.In):
                value = render(found.this)
                sub = self.decorrelate(found.args["query"], node, aliases, env, render, value)
                node = self.attach(node, sub)
                node, n, nn = self.in_counts(node, sub)
                m = quote(sub.mark)
                result = sqlglot.parse_one(
                    f"CASE WHEN {m} IS NOT NULL THEN TRUE WHEN COALESCE({n}, 0) = 0 THEN FALSE "
                    f"WHEN ({value}) IS NULL OR {n} > {nn} THEN NULL ELSE FALSE END", read=DIALECT)
            else:
                sub = self.decorrelate(found, node, aliases, env, render, None, scalar=True)
                node = self.attach(node, sub)
                v, m = quote(sub.value), quote(sub.mark)  # type: ignore[arg-type]
                result = sqlglot.parse_one(f"CASE WHEN {m} IS NULL THEN {sub.empty} ELSE {v} END", read=DIALECT)
            if found is e:
                e = result
            else:
                found.replace(result)
        return node, e

    def attach(self, node: Operator, sub: _Sub) -> Operator:
        """``node`` with the matching row of ``sub.op`` (at most one), or NULLs."""
        return self.left_join(node, sub.op, sub.pairs, [])

    def in_counts(self, node: Operator, sub: _Sub) -> tuple[Operator, str, str]:
        """``node`` with the number of rows and of non-NULL values of the IN subquery that
        correlate with each row."""
        n, nn = self.fresh("n"), self.fresh("nn")
        counts = Aggregate(sub.op, tuple(sub.keys), (AggCall(n, "count", None), AggCall(nn, "count", sub.value)))
        pairs = sub.key_pairs
        joined = self.left_join(node, counts, pairs, []) if pairs else Join(node, counts, "TRUE")
        return joined, quote(n), quote(nn)

    def decorrelate(self, sub: exp.Expr, node: Operator, aliases: set[str], env: Env, render: Render,
                    value: str | None, scalar: bool = False, relation: str | None = None) -> _Sub:
        """A subquery as a relation with one row per distinct correlation key (and value).

        Correlated only through equalities ``outer = inner`` in its WHERE, those move into
        the result as key columns (grouped by, for an aggregate). Otherwise the outer
        columns it reads become a relation of their distinct values (the magic set),
        joined into the subquery, whose rows then carry them as keys. ``relation`` (a
        LATERAL subquery's alias): every row and column of it, named ``<alias>__<column>``.
        """
        sub = sub.unnest()
        while isinstance(sub, exp.Subquery):
            sub = sub.this
        outer = _outer_columns(sub, aliases)
        if scalar and not outer and not _single_aggregate(sub):
            sub = _at_most_one_row(cast(exp.Query, sub))
        if not isinstance(sub, exp.Select):
            if outer:
                raise unsupported("correlated set operation in a subquery", sub, self.view)
            inner = exp.Subquery(this=sub.copy(), alias=exp.TableAlias(this=exp.to_identifier("_u")))
            sub = exp.select(*(exp.column(n, table="_u") for n in cast(exp.Query, sub).named_selects)).from_(inner)
        if sub.args.get("limit") or sub.args.get("offset"):
            what = "LIMIT in a LATERAL subquery" if relation else "LIMIT in a subquery used as an expression"
            raise unsupported(what, sub, self.view)
        where = conjuncts(sub.args["where"].this) if sub.args.get("where") else []
        correlated = [c for c in where if _outer_columns(c, aliases)]
        equalities = [_split_eq(c, aliases) for c in correlated]
        inside = sum((len(_outer_columns(c, aliases)) for c in correlated), 0)
        env = dict(env)
        keys: list[tuple[exp.Expr, str, bool]] = []  # (inner expression, outer SQL, NULL-safe)
        if all(equalities) and inside == len(outer):
            new = sub.copy()
            rest = [c for c in where if c not in correlated]
            for inner_side, out in equalities:  # type: ignore[misc]
                keys.append((inner_side.copy(), render(out), False))
        else:
            magic = self.fresh("outer")
            refs = sorted({(c.table, c.name) for c in outer})
            names = {ref: self.fresh("o") for ref in refs}
            outer_sql = {r: render(exp.column(r[1], table=r[0])) for r in refs}
            env[magic] = distinct(Map(node, tuple((names[r], outer_sql[r]) for r in refs)))
            new = sub.copy()
            for c in _outer_columns(new, aliases):
                c.replace(exp.column(names[(c.table, c.name)], table=magic, quoted=False))
            new = new.join(exp.Table(this=exp.to_identifier(magic)), copy=False)
            rest = conjuncts(new.args["where"].this) if new.args.get("where") else []
            for r in refs:
                keys.append((exp.column(names[r], table=magic), outer_sql[r], True))
        new.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
        new.set("order", None)

        key_names = [self.fresh("k") for _ in keys]
        key_items = [exp.alias_(k, n, quoted=True) for (k, _, _), n in zip(keys, key_names)]
        mark = self.fresh("m")
        out = _Sub(op=None, keys=key_names, outer=[(o, ns) for _, o, ns in keys], mark=mark)  # type: ignore[arg-type]
        grouped = bool(new.args.get("group"))
        selects = sub.expressions
        if relation is not None:
            selects = new.expressions  # the outer columns they read are the keys' now
            columns = [exp.alias_(s.unalias(), mangle(relation, s.alias_or_name), quoted=True) for s in selects]
            aggregated = not grouped and any(_aggregates(s) for s in selects)
            new.set("expressions", key_items + columns + [exp.alias_(exp.true(), mark, quoted=True)])
            if aggregated:  # one row per key; its value over no rows comes from the outer side
                self.own_empty(selects, "in a LATERAL subquery without GROUP BY")
                out.empties = [None] * len(key_items) + [_empty_aggregate(s.unalias()) for s in selects] + [None]
            if aggregated or grouped:
                _group_by_keys(new, keys)
        elif scalar:
            if len(selects) != 1 or grouped or not _aggregates(selects[0]):
                raise unsupported("scalar subquery that is not a single aggregate without GROUP BY", sub, self.view)
            self.own_empty(selects, "in a scalar subquery")
            out.value = self.fresh("v")
            out.empty = _empty_aggregate(selects[0].unalias())
            new.set("expressions", key_items + [exp.alias_(selects[0].unalias(), out.value, quoted=True),
                                                exp.alias_(exp.true(), mark, quoted=True)])
            _group_by_keys(new, keys)
        else:
            if not grouped and any(_aggregates(s) for s in selects) or new.args.get("having") and not grouped:
                raise unsupported("EXISTS / IN over an aggregate without GROUP BY", sub, self.view)
            items = key_items + [exp.alias_(exp.true(), mark, quoted=True)]
            if value is not None:
                if len(selects) != 1:
                    raise self.error(f"an IN subquery returns one column, not {len(selects)}", sub)
                out.value, out.test = self.fresh("v"), value
                items.insert(0, exp.alias_(selects[0].unalias(), out.value, quoted=True))
            new.set("expressions", items)
            new.set("distinct", exp.Distinct())
            if grouped:
                _group_by_keys(new, keys)
        out.op = self.select(new, env)
        return out

    def own_empty(self, selects: Sequence[exp.Expr], where: str) -> None:
        """Refuses a Spark aggregate among ``selects``: its value over no rows is its own
        ([] for collect_list, 0 for count_if), which the outer side cannot give."""
        call = next((n for s in selects for n in _aggregates(s) if spark_aggregate(n)), None)
        if call is not None:
            raise unsupported(f"aggregate function {function_name(call)}() {where}", call, self.view)

    # --- aggregates, windows, ordering --------------------------------------------------

    def aggregate(self, q: exp.Select, node: Operator) -> tuple[Operator, Render]:
        """Pre-project group keys and aggregate arguments, aggregate, and return how to
        render the SELECT list / HAVING over the aggregate's output columns."""
        group = q.args.get("group")
        sets: list[list[int]] | None = None  # GROUPING SETS, ROLLUP, CUBE: each set's group expressions
        if group is not None and group.args.get("all"):
            group_exprs = [e.unalias() for e in q.expressions if not _aggregates(e)]
        elif group is not None and _has_sets(group):
            group_exprs, sets = _grouping_sets(group)
        else:
            group_exprs = list(group.expressions) if group is not None else []
        keys: dict[str, str] = {}  # rendered group expression → key column
        for g in group_exprs:
            keys.setdefault(_render(g), f"_g{len(keys)}")
        order = [keys[_render(g)] for g in group_exprs]  # the group expressions' key columns, as written
        calls: dict[str, AggCall] = {}
        args: dict[str, str] = {}  # rendered argument → pre-projected column
        for e in list(q.expressions) + [q.args[k] for k in ("having", "qualify") if q.args.get(k)]:
            for call in _aggregates(e):
                key = _render(call)
                if key in calls:
                    continue
                if spark_aggregate(call):
                    calls[key] = self._spark_call(call, f"_a{len(calls)}", args)
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
        agg: Operator = Aggregate(pre, tuple(keys.values()), tuple(calls.values()))
        gid = self.fresh("gid")
        if sets is not None:
            agg = self.grouping_sets(pre, order, sets, tuple(calls.values()), gid)

        def grouping(n: exp.Expr) -> exp.Expr:
            """``grouping(x)``: whether ``x`` is aggregated over in the row's set; ``grouping_id(...)``
            those bits, the first expression's highest (all of GROUP BY's without arguments)."""
            if sets is None:
                raise unsupported(f"{n.sql(DIALECT)} without GROUPING SETS, ROLLUP or CUBE", n, self.view)
            of = list(n.expressions) or group_exprs
            positions = []
            for x in of:
                if _render(x) not in keys:
                    raise self.error(f"{x.sql(DIALECT)} in {n.sql(DIALECT)} is not a GROUP BY expression", n)
                positions.append(order.index(keys[_render(x)]))
            bits = " + ".join(f"((`{gid}` >> {len(order) - 1 - p}) & 1) * {1 << (len(of) - 1 - i)}"
                              for i, p in enumerate(positions))
            kind = "TINYINT" if isinstance(n, exp.Grouping) else "BIGINT"
            return sqlglot.parse_one(f"CAST({bits} AS {kind})", read=DIALECT)

        def render(e: exp.Expr) -> str:
            def swap(n: exp.Expr) -> exp.Expr:
                if isinstance(n, (exp.Grouping, exp.GroupingId)):
                    return grouping(n)
                if is_aggregate(n) and not _is_window_function(n):
                    return exp.column(calls[_render(n)].name, quoted=True)
                if not isinstance(n, (exp.Literal, exp.Boolean, exp.Null)):
                    key = keys.get(_render(n))
                    if key:
                        return exp.column(key, quoted=True)
                return n

            out = e.copy().transform(swap, copy=False)
            loose = next((c for c in out.find_all(exp.Column) if c.table), None)
            if loose is not None:
                raise self.error(f"column {loose.table}.{loose.name} is neither grouped nor aggregated", e)
            return out.sql(DIALECT)

        return agg, render

    def grouping_sets(self, pre: Operator, keys: list[str], sets: list[list[int]], calls: tuple[AggCall, ...],
                      gid: str) -> Operator:
        """GROUPING SETS as a union of aggregates, one per set (DBSP: each is its own
        aggregate, and the union is linear): each grouped by its keys and its number
        ``gid`` (Spark's grouping id: a bit per key, set where the key is aggregated over),
        the other keys NULL. The number keeps the empty set's aggregate keyed, as Spark's
        is: over no rows it has no row."""
        arms = []
        for members in sets:
            number = sum(1 << (len(keys) - 1 - i) for i in range(len(keys)) if i not in members)
            grouped = [keys[i] for i in dict.fromkeys(members)]
            tagged = Map(pre, passthrough(pre.columns) + ((gid, str(number)),))
            agg = Aggregate(tagged, tuple(grouped) + (gid,), calls)
            layout = tuple((k, quote(k) if k in grouped else "NULL") for k in dict.fromkeys(keys))
            arms.append(Map(agg, layout + ((gid, quote(gid)),) + passthrough([c.name for c in calls])))
        return Plus(tuple(arms))

    @staticmethod
    def _spark_call(call: exp.Expr, name: str, args: dict[str, str]) -> AggCall:
        """An aggregate Spark computes: its call with each value it reads (an argument, a
        WITHIN GROUP ordering key) a pre-projected column of ``args``."""
        call = call.copy()
        values = []
        for value in list(call.iter_expressions()):
            if isinstance(value, exp.Order):
                values += [value.this, *(o.this for o in value.expressions)]
            elif value.find(exp.Column) is not None:
                values.append(value)
        columns = []
        for value in values:
            columns.append(args.setdefault(_render(value), f"_x{len(args)}"))
            value.replace(exp.column(columns[-1], quoted=True))
        return AggCall(name, function_name(call), columns[0] if columns else None, sql=call.sql(DIALECT))

    def windows(self, q: exp.Select, node: Operator, render: Render) -> tuple[Operator, Render]:
        """Window functions of the SELECT list / QUALIFY as one ``Window`` over ``node``; the
        returned render reads their results from its columns."""
        found: dict[str, exp.Window] = {}
        for e in list(q.expressions) + ([q.args["qualify"]] if q.args.get("qualify") else []):
            for w in e.find_all(exp.Window):
                found.setdefault(w.sql(DIALECT), w)
        if not found:
            return node, render
        parts: dict[str, str] = {}  # rendered PARTITION BY expression → column
        orders: dict[str, str] = {}  # rendered ORDER BY expression (not a column) → column
        funcs: dict[str, tuple[str, str]] = {}  # window SQL → (column, SQL over the Window's input)
        partitions: list[set[str]] = []
        for text, w in found.items():
            cols = [parts.setdefault(render(p), self.fresh("p")) for p in w.args.get("partition_by") or []]
            partitions.append(set(cols))
            spec = w.copy()
            spec.set("partition_by", [exp.column(c, quoted=True) for c in cols])
            # an ORDER BY expression is computed before the window, as its partition keys
            # are: the window sorts by columns (its operator then needs no expressions)
            for term in spec.args["order"].expressions if spec.args.get("order") else []:
                rendered = render(term.this)
                if not is_identifier(rendered):
                    col = parts.get(rendered) or orders.setdefault(rendered, self.fresh("o"))
                    term.set("this", exp.column(col, quoted=True))
            funcs[text] = (self.fresh("w"), render(spec))
        common = tuple(c for c in parts.values() if all(c in p for p in partitions))
        pre = Map(node, passthrough(node.columns) + tuple((c, e) for made in (parts, orders) for e, c in made.items()))
        node = Window(pre, common, tuple(funcs.values()))

        def render_windows(e: exp.Expr) -> str:
            def swap(n: exp.Expr) -> exp.Expr:
                if isinstance(n, exp.Window):
                    return exp.column(funcs[n.sql(DIALECT)][0], quoted=True)
                return n

            return render(e.copy().transform(swap, copy=False))

        return node, render_windows

    def order_columns(self, q: exp.Query, outputs: list[str], render: Render) -> dict[int, tuple[str, str]]:
        """For a query with LIMIT: each ORDER BY term as a column of the SELECT's result,
        computed aside (hidden) unless it names an output column."""
        if not q.args.get("limit") and not q.args.get("offset"):
            return {}
        terms: dict[int, tuple[str, str]] = {}
        for i, o in enumerate(q.args["order"].expressions if q.args.get("order") else []):
            e = o.this
            if isinstance(e, exp.Column) and not e.table and e.name in outputs:
                terms[i] = (e.name, quote(e.name))
            elif isinstance(e, exp.Literal) and not e.is_string:
                name = outputs[int(e.this) - 1]
                terms[i] = (name, quote(name))
            else:
                terms[i] = (self.fresh("o"), render(e))
        return terms

    def top_k(self, q: exp.Query, node: Operator, terms: dict[int, str] | None = None,
              outputs: list[str] | None = None) -> Operator:
        """ORDER BY … LIMIT n [OFFSET m]: a ``Window`` numbering rows in order (ties broken
        by the output columns) that keeps the rows in range."""
        limit, offset = q.args.get("limit"), q.args.get("offset")
        if not limit and not offset:
            return node
        order = q.args.get("order")
        if not order and limit and not offset and _one_row(q):  # LIMIT n of one row: the row, or none for LIMIT 0
            return node if _int(limit.expression, "LIMIT", self) else Filter(node, "FALSE")
        if not order:
            raise unsupported("LIMIT / OFFSET without ORDER BY (not deterministic)", cast(exp.Expr, limit or offset),
                              self.view)
        outputs = list(node.columns) if outputs is None else outputs
        if terms is None:
            terms = {}
            for i, (name, _) in self.order_columns(q, outputs, _render).items():
                if name not in outputs:
                    raise unsupported("ORDER BY of a set operation on an expression", order, self.view)
                terms[i] = name
        by = [f"{quote(terms[i])} {'DESC' if o.args.get('desc') else 'ASC'} "
              f"NULLS {'FIRST' if o.args.get('nulls_first') else 'LAST'}" for i, o in enumerate(order.expressions)]
        by += [f"{quote(c)} ASC NULLS FIRST" for c in outputs]
        rn = self.fresh("rn")
        low = _int(offset.expression, "OFFSET", self) if offset else 0
        keep = f"{quote(rn)} > {low}"
        if limit:
            keep += f" AND {quote(rn)} <= {low + _int(limit.expression, 'LIMIT', self)}"
        ranked = Window(node, (), ((rn, f"ROW_NUMBER() OVER (ORDER BY {', '.join(by)})"),), keep)
        return Map(ranked, passthrough(node.columns))


def _group_by_keys(q: exp.Select, keys: Sequence[tuple[exp.Expr, str, bool]]) -> None:
    """A decorrelated subquery ``q`` grouped by its correlation keys too (after its own
    GROUP BY, if any)."""
    group = q.args.get("group")
    if group is not None:
        group.set("expressions", list(group.expressions) + [k.copy() for k, _, _ in keys])
    elif keys:
        q.set("group", exp.Group(expressions=[k.copy() for k, _, _ in keys]))


def _reads(q: exp.Expr, name: str) -> bool:
    """Whether query ``q`` reads relation ``name`` (a recursive CTE's own name)."""
    return any(t.name == name and not t.db for t in q.find_all(exp.Table))


def _bound(item: exp.Expr) -> str:
    """The name a FROM item binds: its PIVOT's alias where it has one (qualify gives it)."""
    pivots = item.args.get("pivots")
    return pivots[-1].alias if pivots and pivots[-1].alias else item.alias_or_name


def mangle(alias: str, column: str) -> str:
    """The scope-unique name of ``alias.column`` inside one SELECT."""
    return f"{alias}__{column}"


def _render(e: exp.Expr) -> str:
    """Spark SQL for ``e`` with every qualified column replaced by its mangled name."""

    def swap(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and n.table:
            return exp.column(mangle(n.table, n.name), quoted=True)
        return n

    return e.copy().transform(swap, copy=False).sql(DIALECT)


RANKINGS = ("ROW_NUMBER()", "RANK()", "DENSE_RANK()")


def _filter(node: Operator, predicate: str) -> Operator:
    """``Filter(node, predicate)``; a filter on a ranking window function's value (the
    per-group top-k ``WHERE rn <= 3`` over ``ROW_NUMBER() OVER (…)``) moves into the
    Window's ``keep``, so its state holds only the kept rows."""
    op = node
    while isinstance(op, Map):
        op = op.input
    if not isinstance(op, Window):
        return Filter(node, predicate)
    cond = sqlglot.parse_one(predicate, read=DIALECT)
    names = {c.name for c in cond.find_all(exp.Column)}
    maps: list[Map] = []
    op = node
    while isinstance(op, Map) and len(names) == 1:
        (name,) = names
        source = dict(op.exprs).get(name, "")
        if not is_identifier(source):
            break
        names = {exp.to_identifier(source[1:-1].replace("``", "`")).name}
        maps.append(op)
        op = op.input
    funcs = dict(op.funcs) if isinstance(op, Window) else {}
    (name,) = names if len(names) == 1 else ("",)
    if not funcs.get(name, "").upper().startswith(RANKINGS):
        return Filter(node, predicate)
    assert isinstance(op, Window)  # only a Window has a ranking function in funcs
    for c in cond.find_all(exp.Column):
        c.replace(exp.column(name, quoted=True))
    keep = cond.sql(DIALECT) if op.keep is None else f"({op.keep}) AND ({cond.sql(DIALECT)})"
    out: Operator = replace(op, keep=keep)
    for m in reversed(maps):
        out = Map(out, m.exprs)
    return out


def _join(left: Operator, right: Operator, pairs: list[Pair], residual: list[str]) -> Join:
    return Join(left, right, _on(pairs, residual), tuple((a, b) for a, b, _ in pairs))


def _on(pairs: list[Pair], residual: list[str]) -> str:
    terms = [f"({a}) {'<=>' if ns else '='} ({b})" for a, b, ns in pairs] + [f"({r})" for r in residual]
    return " AND ".join(terms) or "TRUE"


def _int(e: exp.Expr, clause: str, planner: _Planner) -> int:
    if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
        return int(e.this)
    raise planner.error(f"{clause} must be a whole number", e)


def _aliases(e: exp.Expr) -> set[str]:
    return {c.table for c in e.find_all(exp.Column)}


def _equi(c: exp.Expr, joined: set[str] | frozenset[str],
          new: set[str] | frozenset[str]) -> tuple[exp.Expr, exp.Expr] | None:
    """(joined side, new side) when ``c`` is an equality between the two (``=``, or
    ``<=>``: NULL-safe, as ``on`` keeps saying)."""
    if not isinstance(c, (exp.EQ, exp.NullSafeEQ)):
        return None
    left, right = _aliases(c.left), _aliases(c.right)
    if left and right and left <= joined and right <= new:
        return c.left, c.right
    if left and right and right <= joined and left <= new:
        return c.right, c.left
    return None


def _is_window_function(n: exp.Expr) -> bool:
    return isinstance(n.parent, exp.Window) and n.arg_key == "this"


def _aggregates(e: exp.Expr) -> list[exp.Expr]:
    """Aggregate calls of this scope: not window functions, not inside subqueries."""
    return [n for n in e.find_all(*AGGREGATES, *SPARK_AGGREGATES, exp.Anonymous)
            if is_aggregate(n) and not _is_window_function(n)
            and not any(isinstance(p, (exp.Subquery, exp.Exists)) or (isinstance(p, exp.Select) and p is not e)
                        for p in _ancestors(n, e))]


def _ancestors(n: exp.Expr, stop: exp.Expr) -> list[exp.Expr]:
    out = []
    p = n.parent
    while p is not None and p is not stop:
        out.append(p)
        p = p.parent
    return out


def _has_sets(group: exp.Group) -> bool:
    return bool(group.args.get("rollup") or group.args.get("cube") or group.find(exp.Rollup, exp.Cube,
                                                                                exp.GroupingSets))


def _grouping_sets(group: exp.Group) -> tuple[list[exp.Expr], list[list[int]]]:
    """A GROUP BY with GROUPING SETS, ROLLUP or CUBE: its distinct expressions, in order,
    and each grouping set as their indices (Spark's: the cross product of its terms' sets;
    ``ROLLUP(a, b)`` is ``(a, b), (a), ()``, ``CUBE(a, b)`` every subset; a set twice gives
    its rows twice)."""
    exprs: dict[str, exp.Expr] = {}

    def index(e: exp.Expr) -> int:
        exprs.setdefault(e.sql(DIALECT), e)
        return list(exprs).index(e.sql(DIALECT))

    def items(e: exp.Expr) -> list[int]:
        if isinstance(e, exp.Tuple):
            return [index(x) for x in e.expressions]
        return [index(e.this if isinstance(e, exp.Paren) else e)]

    def rollup(terms: list[list[int]]) -> list[list[int]]:
        return [sum(terms[:n], []) for n in range(len(terms), -1, -1)]

    def cube(terms: list[list[int]]) -> list[list[int]]:
        return [sum((t for t, bit in zip(terms, bits) if bit), [])
                for bits in itertools.product((1, 0), repeat=len(terms))]

    factors: list[list[list[int]]] = []
    plain: list[list[int]] = []
    for e in group.expressions:
        if isinstance(e, exp.Rollup):
            factors.append(rollup([items(x) for x in e.expressions]))
        elif isinstance(e, exp.Cube):
            factors.append(cube([items(x) for x in e.expressions]))
        elif isinstance(e, exp.GroupingSets):
            factors.append([[] if isinstance(x, exp.Tuple) and not x.expressions else items(x) for x in e.expressions])
        else:
            plain.append(items(e))
    if group.args.get("rollup"):  # GROUP BY a, b WITH ROLLUP
        factors.append(rollup(plain))
        plain = []
    elif group.args.get("cube"):
        factors.append(cube(plain))
        plain = []
    sets = [sum(plain, []) + sum(choice, []) for choice in itertools.product(*factors)]
    return list(exprs.values()), sets


def _single_aggregate(q: exp.Expr) -> bool:
    """A query of one aggregate without GROUP BY: one row, whatever its input."""
    return (isinstance(q, exp.Select) and len(q.expressions) == 1 and not q.args.get("group")
            and not q.args.get("limit") and not q.args.get("offset") and bool(_aggregates(q.expressions[0])))


def _one_row(q: exp.Expr) -> bool:
    """A SELECT that gives one row at most: aggregates without GROUP BY, or a SELECT (with
    no generator) of subqueries that each give one row at most, joined in any way."""
    if not isinstance(q, exp.Select) or q.args.get("group") or q.args.get("laterals"):
        return False
    if any(_aggregates(e) for e in q.expressions) or q.args.get("having"):
        return True
    items = [q.args["from_"].this, *(j.this for j in q.args.get("joins") or [])] if q.args.get("from_") else []
    return bool(items) and all(isinstance(i, exp.Subquery) and _one_row(i.this) for i in items) and not any(
        generator(e.unalias()) for e in q.expressions)


#: Spark's error for a scalar subquery of several rows
TOO_MANY_ROWS = "more than one row returned by a subquery used as an expression"


def _at_most_one_row(q: exp.Query) -> exp.Select:
    """An uncorrelated scalar subquery of any form (``SELECT DISTINCT x``, a GROUP BY, an
    ORDER BY ... LIMIT 1) as one aggregate without GROUP BY over it: its one row's value,
    NULL over no rows, and Spark's error over several."""
    name = q.named_selects[0]
    value = exp.column(name, table="_one", quoted=True)
    case = sqlglot.parse_one(f"CASE WHEN COUNT(*) = 0 THEN NULL WHEN COUNT(*) = 1 THEN MAX(x) "
                             f"ELSE raise_error('{TOO_MANY_ROWS}') END", read=DIALECT)
    case.find(exp.Max).set("this", value)  # type: ignore[union-attr]
    inner = exp.Subquery(this=q.copy(), alias=exp.TableAlias(this=exp.to_identifier("_one")))
    return exp.select(exp.alias_(case, name, quoted=True)).from_(inner)


def _exists(e: exp.Expr) -> bool:
    """An EXISTS subquery (not Spark's ``exists(array, x -> ...)``, which sqlglot parses alike)."""
    return isinstance(e, exp.Exists) and e.args.get("expression") is None


def _subqueries(e: exp.Expr) -> list[exp.Expr]:
    """The outermost subqueries in expression ``e``: EXISTS, IN (query) or scalar ones."""
    found: list[exp.Expr] = []

    def visit(n: exp.Expr) -> None:
        if _exists(n) or (isinstance(n, exp.In) and n.args.get("query")):
            found.append(n)
            return
        if isinstance(n, exp.Subquery):
            found.append(n)
            return
        for child in n.iter_expressions():
            visit(child)

    visit(e)
    return found


def _outer_columns(e: exp.Expr, aliases: set[str]) -> list[exp.Column]:
    """Columns in ``e`` bound by the enclosing scope (``aliases``) rather than by a FROM
    item inside ``e``."""
    local = {t.alias_or_name for t in e.find_all(exp.Table)} | {c.alias_or_name for c in e.find_all(exp.CTE)} | {
        p.alias for p in e.find_all(exp.Pivot) if p.alias}
    return [c for c in e.find_all(exp.Column) if c.table in aliases and c.table not in local]


def _split_eq(c: exp.Expr, aliases: set[str]) -> tuple[exp.Expr, exp.Expr] | None:
    """(inner side, outer side) of a correlated equality ``outer = inner``."""
    if not isinstance(c, exp.EQ):
        return None
    for inner, outer in ((c.left, c.right), (c.right, c.left)):
        outer_cols, inner_cols = list(outer.find_all(exp.Column)), list(inner.find_all(exp.Column))
        if (outer_cols and all(col.table in aliases for col in outer_cols)
                and inner_cols and not _outer_columns(inner, aliases)):
            return inner, outer
    return None


def _empty_aggregate(e: exp.Expr) -> str:
    """An aggregate expression's value over no rows: COUNT is 0, the others NULL."""

    def swap(n: exp.Expr) -> exp.Expr:
        if type(n) in AGGREGATES:
            return exp.Literal.number(0) if isinstance(n, exp.Count) else exp.null()
        return n

    return e.copy().transform(swap, copy=False).sql(DIALECT)
