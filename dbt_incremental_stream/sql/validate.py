"""Reject what the incremental engine cannot maintain, before anything else runs.

Runs on the parsed (not yet optimized) tree so that positions point into the user's SQL.
"""
from __future__ import annotations

from typing import TypedDict

from sqlglot import exp

from ..errors import UnsupportedSqlError
from .relations import DIALECT

#: aggregate functions the planner maintains (sqlglot class → SQL name)
AGGREGATES: dict[type[exp.Expr], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
    exp.Stddev: "stddev_samp",
    exp.StddevSamp: "stddev_samp",
    exp.StddevPop: "stddev_pop",
    exp.Variance: "var_samp",
    exp.VariancePop: "var_pop",
}

#: aggregate functions Spark computes over the groups a tick touches (sqlglot's classes,
#: and the names sqlglot leaves as anonymous calls); the engine keeps their input's rows.
#: Where Spark's own answer depends on the rows' order (``collect_list``, ``first``,
#: ``max_by`` of ties, ``listagg`` without WITHIN GROUP), the view's does too.
SPARK_AGGREGATES: tuple[type[exp.Expr], ...] = (
    exp.Median, exp.Quantile, exp.ApproxQuantile, exp.ArrayAgg, exp.ArrayUniqueAgg, exp.ArgMax, exp.ArgMin,
    exp.CountIf, exp.LogicalAnd, exp.LogicalOr, exp.GroupConcat, exp.First, exp.Last, exp.AnyValue, exp.Mode,
    exp.Skewness, exp.Kurtosis, exp.ApproxDistinct, exp.Corr, exp.CovarPop, exp.CovarSamp, exp.BitwiseAndAgg,
    exp.BitwiseOrAgg, exp.BitwiseXorAgg, exp.RegrSlope, exp.RegrIntercept, exp.RegrR2, exp.RegrCount,
    exp.RegrAvgx, exp.RegrAvgy, exp.RegrSxx, exp.RegrSyy, exp.RegrSxy,
)
SPARK_AGGREGATE_NAMES = frozenset({
    "every", "some", "any", "product", "histogram_numeric", "try_sum", "try_avg", "percentile_cont",
    "percentile_disc", "approx_top_k", "hll_sketch_agg", "hll_union_agg", "bitmap_or_agg", "bitmap_construct_agg",
    "kll_sketch_agg_bigint", "kll_sketch_agg_double", "kll_sketch_agg_float",
})


def generator(node: exp.Expr) -> str | None:
    """Spark's name of the generator ``node`` calls (``explode_outer``, ``stack``), if it
    calls one."""
    if isinstance(node, exp.Func) and isinstance(node, (exp.UDTF, exp.Explode)):  # a Lateral is a UDTF too
        return node.sql_name().lower()
    name = str(node.name).lower() if isinstance(node, exp.Anonymous) else None
    return name if name in GENERATORS or name in OTHER_GENERATORS else None


def is_aggregate(node: exp.Expr) -> bool:
    """An aggregate the engine computes itself, or one Spark computes over touched groups."""
    return type(node) in AGGREGATES or spark_aggregate(node)


def spark_aggregate(node: exp.Expr) -> bool:
    """Whether ``node`` calls an aggregate that Spark computes over touched groups."""
    return isinstance(node, SPARK_AGGREGATES) or (
        isinstance(node, exp.Anonymous) and str(node.name).lower() in SPARK_AGGREGATE_NAMES)


#: functions whose value is not a function of the input rows
NONDETERMINISTIC: dict[type[exp.Expr], str] = {
    exp.Rand: "rand()",
    exp.Randn: "randn()",
    exp.Uuid: "uuid()",
    exp.CurrentTime: "current_time()",
}
NONDETERMINISTIC_NAMES = {
    "monotonically_increasing_id", "spark_partition_id", "input_file_name", "shuffle",
    "random", "localtimestamp", "unix_timestamp", "current_timezone",
}

STRUCTURES: dict[type[exp.Expr], str] = {
    exp.TableSample: "TABLESAMPLE",
    exp.Values: "VALUES as a table",
    exp.Unnest: "UNNEST",
}

#: the generators the planner maintains as flat-maps (Spark's names), with ``stack``
GENERATORS = frozenset({"explode", "explode_outer", "posexplode", "posexplode_outer", "inline", "inline_outer",
                        "stack"})
#: generators refused, with what to write instead
OTHER_GENERATORS = {"json_tuple": "get_json_object(j, '$.field') for each field"}

SELECT_CLAUSES = {
    "expressions", "from_", "joins", "where", "group", "having", "distinct", "order", "with_",
    "hint", "kind", "operation_modifiers", "limit", "offset", "exclude", "qualify", "laterals",
}


class Position(TypedDict, total=False):
    line: int
    col: int


def position(node: exp.Expr) -> Position:
    """Line and column of the first token under ``node`` (the parser records them on leaves)."""
    for sub in node.walk():
        if "line" in sub.meta:
            return {"line": sub.meta["line"], "col": sub.meta["col"]}
    return {}


def unsupported(construct: str, node: exp.Expr, view: str | None) -> UnsupportedSqlError:
    return UnsupportedSqlError(construct, view=view, **position(node))


def validate(tree: exp.Expr, view: str | None = None) -> None:
    """Raise :class:`UnsupportedSqlError` for the first construct outside the supported set."""
    for node in tree.walk():
        kind = type(node)
        if kind in STRUCTURES:
            raise unsupported(STRUCTURES[kind], node, view)
        if isinstance(node, exp.Lateral):
            _check_lateral(node, view)
        name = generator(node)
        if name is not None:
            _check_generator(node, name, view)
        if kind in NONDETERMINISTIC:
            raise unsupported(f"non-deterministic function {NONDETERMINISTIC[kind]}", node, view)
        if isinstance(node, exp.Func) and node.sql_name().lower() in NONDETERMINISTIC_NAMES:
            raise unsupported(f"non-deterministic function {node.sql_name().lower()}()", node, view)
        if isinstance(node, exp.Anonymous) and str(node.name).lower() in NONDETERMINISTIC_NAMES:
            raise unsupported(f"non-deterministic function {node.name}()", node, view)
        distinct = any(isinstance(d, exp.Distinct) for d in node.iter_expressions())
        if distinct and spark_aggregate(node) and not _windowed(node):  # Spark's windows take no DISTINCT
            raise unsupported(f"DISTINCT in aggregate function {function_name(node)}()", node, view)
        if isinstance(node, exp.AggFunc) and kind not in AGGREGATES and not spark_aggregate(node) \
                and kind not in (exp.Grouping, exp.GroupingId) \
                and not _windowed(node):
            raise unsupported(f"aggregate function {function_name(node)}()", node, view)
        if isinstance(node, exp.Join):
            _check_join(node, view)
        if isinstance(node, exp.Select):
            _check_select(node, view)
        if isinstance(node, (exp.Select, exp.SetOperation)) and _misplaced(node):
            raise unsupported("subquery outside WHERE, HAVING and the SELECT list", node, view)
        if isinstance(node, exp.Distinct) and node.args.get("on"):
            raise unsupported("DISTINCT ON", node, view)
        if kind in AGGREGATES and isinstance(node.this, exp.Distinct) and len(node.this.expressions) > 1:
            raise unsupported("COUNT(DISTINCT ...) over several columns", node, view)


def function_name(node: exp.Expr) -> str:
    """A function's name as Spark spells it (sqlglot's class for collect_list is ArrayAgg)."""
    return node.sql("spark").split("(")[0].strip().lower()


def _check_join(join: exp.Join, view: str | None) -> None:
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if kind not in ("", "INNER", "CROSS", "OUTER", "SEMI", "ANTI"):
        raise unsupported(f"{kind} JOIN", join, view)
    if kind in ("SEMI", "ANTI") and side not in ("", "LEFT"):
        raise unsupported(f"{side} {kind} JOIN", join, view)
    if join.args.get("using") is None and _subquery_in(join.args.get("on")):
        raise unsupported("subquery in a JOIN condition", join, view)


def _check_lateral(lateral: exp.Lateral, view: str | None) -> None:
    if isinstance(lateral.this, exp.Subquery) and isinstance(lateral.parent, exp.Join):
        return  # [LEFT] JOIN LATERAL (SELECT …), or , LATERAL (SELECT …)
    if not lateral.args.get("view"):
        raise unsupported("LATERAL of a function; use LATERAL VIEW for a generator", lateral, view)
    if generator(lateral.this) is None:
        raise unsupported(f"LATERAL VIEW of {lateral.this.sql(DIALECT)}, which is not a generator", lateral, view)


def _check_generator(call: exp.Expr, name: str, view: str | None) -> None:
    """A generator is a whole item of a SELECT list (maybe aliased) or a LATERAL VIEW's."""
    if name in OTHER_GENERATORS:
        raise unsupported(f"generator function {name}(); use {OTHER_GENERATORS[name]}", call, view)
    if name not in GENERATORS:
        raise unsupported(f"generator function {name}()", call, view)
    item = call.parent if isinstance(call.parent, (exp.Alias, exp.Aliases)) else call
    select = item.parent
    if isinstance(select, exp.Lateral):
        return
    if not isinstance(select, exp.Select) or item.arg_key != "expressions":
        raise unsupported(f"generator function {name}() inside an expression or clause", call, view)
    if any(w for e in select.expressions for w in e.find_all(exp.Window)):
        raise unsupported(f"generator function {name}() beside window functions", call, view)


def _check_select(select: exp.Select, view: str | None) -> None:
    for clause, value in select.args.items():
        if value and clause not in SELECT_CLAUSES:  # a sample after a quoted name is the SELECT's
            raise unsupported(STRUCTURES.get(type(value), f"{clause.upper()} clause"), select, view)


def _misplaced(query: exp.Expr) -> bool:
    """A query nested in an expression other than a WHERE / HAVING condition or a SELECT
    item (where the planner decorrelates it into joins)."""
    parent = query.parent
    while isinstance(parent, exp.Subquery):
        query, parent = parent, parent.parent
    if parent is None or isinstance(parent, (exp.From, exp.Join, exp.CTE, exp.SetOperation, exp.Lateral)):
        return False
    while parent is not None and not isinstance(parent, (exp.Where, exp.Having, exp.Select)):
        if isinstance(parent, (exp.Group, exp.Order, exp.Join, exp.Window, exp.AggFunc)):
            return True
        parent = parent.parent
    return parent is None


def _subquery_in(e: exp.Expr | None) -> bool:
    return e is not None and any(True for _ in e.find_all(exp.Select))


def _windowed(node: exp.Expr) -> bool:
    """Whether a function is called by a window (``f(x) OVER``, ``f(x) IGNORE NULLS OVER``)."""
    parent = node.parent
    if isinstance(parent, (exp.IgnoreNulls, exp.RespectNulls)):
        parent = parent.parent
    return isinstance(parent, exp.Window)
