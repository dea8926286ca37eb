"""Reject what the incremental engine cannot maintain, before anything else runs.

Runs on the parsed (not yet optimized) tree so that positions point into the user's SQL.
"""
from __future__ import annotations

from sqlglot import exp

from ..errors import UnsupportedSqlError

#: aggregate functions the planner maintains (sqlglot class → SQL name)
AGGREGATES: dict[type[exp.Expression], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
}

#: functions whose value is not a function of the input rows
NONDETERMINISTIC: dict[type[exp.Expression], str] = {
    exp.Rand: "rand()",
    exp.Randn: "randn()",
    exp.Uuid: "uuid()",
    exp.CurrentTimestamp: "current_timestamp()",
    exp.CurrentDate: "current_date()",
    exp.CurrentTime: "current_time()",
}
NONDETERMINISTIC_NAMES = {
    "monotonically_increasing_id", "spark_partition_id", "input_file_name", "shuffle",
    "random", "now", "localtimestamp", "unix_timestamp", "current_timezone",
}

STRUCTURES: dict[type[exp.Expression], str] = {
    exp.Window: "window function (OVER ...)",
    exp.Intersect: "INTERSECT",
    exp.Except: "EXCEPT",
    exp.Lateral: "LATERAL VIEW / LATERAL subquery",
    exp.Pivot: "PIVOT / UNPIVOT",
    exp.TableSample: "TABLESAMPLE",
    exp.Values: "VALUES as a table",
    exp.Qualify: "QUALIFY",
    exp.GroupingSets: "GROUPING SETS",
    exp.Rollup: "ROLLUP",
    exp.Cube: "CUBE",
    exp.Exists: "EXISTS subquery",
    exp.Explode: "generator function explode()",
    exp.Posexplode: "generator function posexplode()",
    exp.Inline: "generator function inline()",
    exp.Unnest: "UNNEST",
    exp.Offset: "OFFSET",
    exp.Limit: "LIMIT (top-k)",
}

SELECT_CLAUSES = {
    "expressions", "from_", "joins", "where", "group", "having", "distinct", "order", "with_",
    "hint", "kind", "operation_modifiers", "limit", "offset", "exclude", "qualify",
}


def position(node: exp.Expression) -> dict[str, int]:
    """Line and column of the first token under ``node`` (the parser records them on leaves)."""
    for sub in node.walk():
        if "line" in sub.meta:
            return {"line": sub.meta["line"], "col": sub.meta["col"]}
    return {}


def unsupported(construct: str, node: exp.Expression, view: str | None) -> UnsupportedSqlError:
    return UnsupportedSqlError(construct, view=view, **position(node))  # type: ignore[arg-type]


def validate(tree: exp.Expression, view: str | None = None) -> None:
    """Raise :class:`UnsupportedSqlError` for the first construct outside the supported set."""
    for node in tree.walk():
        kind = type(node)
        if kind in STRUCTURES:
            raise unsupported(STRUCTURES[kind], node, view)
        if kind in NONDETERMINISTIC:
            raise unsupported(f"non-deterministic function {NONDETERMINISTIC[kind]}", node, view)
        if isinstance(node, exp.Func) and node.sql_name().lower() in NONDETERMINISTIC_NAMES:
            raise unsupported(f"non-deterministic function {node.sql_name().lower()}()", node, view)
        if isinstance(node, exp.Anonymous) and str(node.name).lower() in NONDETERMINISTIC_NAMES:
            raise unsupported(f"non-deterministic function {node.name}()", node, view)
        if isinstance(node, exp.AggFunc) and kind not in AGGREGATES:
            raise unsupported(f"aggregate function {node.sql_name().lower()}()", node, view)
        if isinstance(node, exp.Filter):
            raise unsupported("aggregate FILTER (WHERE ...) clause", node, view)
        if isinstance(node, exp.Join):
            _check_join(node, view)
        if isinstance(node, exp.Select):
            _check_select(node, view)
        if isinstance(node, (exp.Select, exp.SetOperation)) and _in_expression(node):
            raise unsupported("subquery in an expression (IN / scalar subquery)", node, view)
        if isinstance(node, exp.Distinct) and node.args.get("on"):
            raise unsupported("DISTINCT ON", node, view)
        if kind in AGGREGATES and isinstance(node.this, exp.Distinct) and len(node.this.expressions) > 1:
            raise unsupported("COUNT(DISTINCT ...) over several columns", node, view)


def _check_join(join: exp.Join, view: str | None) -> None:
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if side or kind not in ("", "INNER", "CROSS"):
        name = " ".join(p for p in (side, kind) if p) + " JOIN"
        if side and not kind:
            name = f"{side} OUTER JOIN"
        raise unsupported(name, join, view)


def _check_select(select: exp.Select, view: str | None) -> None:
    for clause, value in select.args.items():
        if value and clause not in SELECT_CLAUSES:
            raise unsupported(f"{clause.upper()} clause", select, view)


def _in_expression(query: exp.Expression) -> bool:
    """A query nested in an expression rather than in FROM / JOIN / WITH / a set operation."""
    parent = query.parent
    while isinstance(parent, exp.Subquery):
        query, parent = parent, parent.parent
    if parent is None or isinstance(parent, (exp.From, exp.Join, exp.CTE, exp.SetOperation)):
        return False
    return True
