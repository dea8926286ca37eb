"""Random workloads for differential tests: inserts, deletes and updates over small
value domains, so that joins match, groups collide and duplicates occur."""
from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from dbt_incremental_stream.differential import Differential

Row = tuple[Any, ...]

SOURCES = {
    "orders": "id INT, cust INT, amount DECIMAL(10,2), qty INT, status STRING",
    "customers": "id INT, name STRING, region STRING",
    "items": "order_id INT, sku STRING, price DOUBLE",
}


def _maybe_null(s: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(s, s, s, s, st.none())


ROWS: dict[str, st.SearchStrategy[Row]] = {
    "orders": st.tuples(
        st.integers(1, 8),
        _maybe_null(st.integers(1, 4)),
        _maybe_null(st.decimals(min_value=0, max_value=100, places=2, allow_nan=False)),
        _maybe_null(st.integers(0, 5)),
        _maybe_null(st.sampled_from(["open", "paid", "shipped"])),
    ),
    "customers": st.tuples(
        st.integers(1, 5),
        _maybe_null(st.sampled_from(["ann", "bob", "cy"])),
        _maybe_null(st.sampled_from(["eu", "us"])),
    ),
    "items": st.tuples(
        st.integers(1, 8),
        st.sampled_from(["a", "b", "c"]),
        _maybe_null(st.floats(min_value=0, max_value=80, allow_nan=False, width=32).map(lambda f: round(f, 2))),
    ),
}


def changes(data: st.DataObject, diff: Differential, sources: list[str]) -> dict[str, list[tuple[Row, int]]]:
    """One tick: for each source, some inserts, deletes of existing rows and updates
    (a delete plus an insert of the same row with one column changed)."""
    out: dict[str, list[tuple[Row, int]]] = {}
    for source in sources:
        current = diff.rows(source)
        ops: list[tuple[Row, int]] = [(r, 1) for r in data.draw(st.lists(ROWS[source], max_size=6), label=f"+{source}")]
        if current:
            for row in data.draw(st.lists(st.sampled_from(current), max_size=3, unique=True), label=f"-{source}"):
                ops.append((row, -1))
            for row in data.draw(st.lists(st.sampled_from(current), max_size=2, unique=True), label=f"~{source}"):
                if (row, -1) in ops:
                    continue
                fresh = data.draw(ROWS[source], label=f"new {source}")
                i = data.draw(st.integers(1, len(row) - 1), label="column")
                changed = row[:i] + (fresh[i],) + row[i + 1:]
                ops += [(row, -1), (changed, 1)]
        out[source] = ops
    return out


def run(data: st.DataObject, make: Callable[[], Differential], sources: list[str], ticks: int) -> Differential:
    """Drive ``ticks`` random ticks, checking every view after each one."""
    diff = make()
    try:
        for tick in range(ticks):
            diff.step(changes(data, diff, sources))
            # every operator has an arranged form: a small tick after the first runs on arrangements
            assert tick == 0 or diff.pipeline.last_tick.path == "arranged", diff.pipeline.last_tick.why
    finally:
        diff.close()
    return diff
