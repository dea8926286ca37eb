"""The time as an input: every SELECT that reads it (current_timestamp(), now(),
current_date()) cross-joins the one-row relation :data:`~dbt_incremental_stream.sql.temporal.CLOCK`
and reads its column :data:`~dbt_incremental_stream.sql.temporal.CLOCK_COLUMN` instead, so a
tick with a new time retracts and re-derives what depends on it (a filter
``ts > current_timestamp() - INTERVAL 1 HOUR`` drops rows as time passes). The DuckDB oracle
applies the same rewrite, so both read the time from the same relation."""
from __future__ import annotations

from sqlglot import exp

from ..temporal import CLOCK, CLOCK_COLUMN


def with_clock(tree: exp.Expr) -> exp.Expr:
    """A copy of ``tree`` reading the time from :data:`CLOCK`."""
    tree = tree.copy()
    for select in list(tree.find_all(exp.Select)):
        calls = _clock_calls(select)
        if not calls:
            continue
        for n in calls:
            ts = exp.column(CLOCK_COLUMN, table=CLOCK)
            n.replace(exp.cast(ts, "date") if isinstance(n, exp.CurrentDate) else ts)
        clock = exp.Table(this=exp.to_identifier(CLOCK))
        if select.args.get("from_") is None:
            select.set("from_", exp.From(this=clock))
        else:
            select.append("joins", exp.Join(this=clock, kind="CROSS"))
    return tree


def uses_clock(tree: exp.Expr) -> bool:
    """Whether the query reads the time, so :func:`with_clock` makes it read :data:`CLOCK`."""
    return any(_clock_calls(s) for s in tree.find_all(exp.Select))


def _clock_calls(select: exp.Select) -> list[exp.Expr]:
    calls = select.find_all(exp.CurrentTimestamp, exp.CurrentDate, exp.Anonymous)
    return [n for n in calls if n.parent_select is select
            and (not isinstance(n, exp.Anonymous) or str(n.name).lower() == "now")]
