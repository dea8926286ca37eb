"""Golden files for the SQL front end, in the style of sqlglot's optimizer fixtures.

- ``fixtures/rewrites/<pass>.sql``, one file per pass of ``sql/rewrites`` named as its
  function: SQL in → the SQL that pass alone makes of it.
- ``fixtures/planner/*.sql``: SQL in → ``explain()`` of the plan :func:`compile` makes of it
  over :data:`CATALOG`.
- ``fixtures/circuit/*.sql``: SQL in → ``explain()`` of the view's incremental circuit (the
  DBSP rules of ``circuit/incremental.py`` applied to that plan, its output integrated).

A file is a header of ``--`` comments, then sections: ``-- name: <what it shows>``, the SQL
(its last line ends with ``;``), then the expected output, or ``ERROR <message>`` when the
pass or the compile raises. After an intended change, regenerate the files and review their
diff::

    UPDATE_GOLDEN=1 python -m pytest tests/fast/test_golden.py
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

import pytest
import sqlglot

from dbt_incremental_stream.circuit.incremental import Incrementalizer
from dbt_incremental_stream.circuit.operators import Input, Integral, explain
from dbt_incremental_stream.errors import StreamError
from dbt_incremental_stream.sql.compile import BUILT_IN, compile
from dbt_incremental_stream.sql.relations import DIALECT
from dbt_incremental_stream.sql.rewrites import RULES, rewrite
from dbt_incremental_stream.sql.rewrites.total_order import total_order

FIXTURES = Path(__file__).parent / "fixtures"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

CATALOG = {
    "orders": Input("orders", ("id", "cust", "amount", "status")),
    "customers": Input("customers", ("id", "name", "region")),
    "items": Input("items", ("order_id", "sku", "price")),
    "events": Input("events", ("id", "ts", "v")),
    **BUILT_IN,  # the clock and the one row, as compile knows them
}
PASSES = {rule.__name__: rule for rule in (*RULES, total_order)}


def _sections(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """The header and the (name, SQL, expected) sections of a fixture file."""
    header, *chunks = re.split(r"^-- name: ", text, flags=re.M)
    sections = []
    for chunk in chunks:
        name, _, body = chunk.partition("\n")
        lines = body.strip("\n").split("\n")
        end = next(i for i, line in enumerate(lines) if line.rstrip().endswith(";"))
        sql = "\n".join(lines[:end + 1]).rstrip()[:-1]
        sections.append((name.strip(), sql, "\n".join(lines[end + 1:]).strip("\n")))
    return header, sections


def _check(path: Path, output: Callable[[str], str]) -> None:
    """The file as it would be with ``output`` of each section's SQL: equal to the file, or
    written over it with UPDATE_GOLDEN=1."""
    header, sections = _sections(path.read_text())
    assert sections, f"{path} has no sections"
    actual = header + "".join(f"-- name: {name}\n{sql};\n{_or_error(output, sql)}\n\n" for name, sql, _ in sections)
    actual = actual.rstrip("\n") + "\n"
    if UPDATE:
        path.write_text(actual)
    else:
        assert actual == path.read_text(), f"{path.name} differs (UPDATE_GOLDEN=1 rewrites it)"


def _or_error(output: Callable[[str], str], sql: str) -> str:
    """``output(sql)`` without trailing blanks (explain ends an empty list with one), or its error."""
    try:
        return "\n".join(line.rstrip() for line in output(sql).split("\n"))
    except StreamError as e:
        return f"ERROR {e}"


def test_every_pass_has_a_fixture():
    assert {p.stem for p in (FIXTURES / "rewrites").glob("*.sql")} == set(PASSES)


@pytest.mark.parametrize("name", sorted(PASSES))
def test_rewrite_fixtures(name):
    columns = {n: op.columns for n, op in CATALOG.items()}

    def output(sql: str) -> str:
        tree = sqlglot.parse_one(sql, read=DIALECT)
        out = rewrite(tree, (PASSES[name],), columns=columns, view="v")
        assert tree == sqlglot.parse_one(sql, read=DIALECT), "a pass leaves its input as it was"
        return out.sql(DIALECT)

    _check(FIXTURES / "rewrites" / f"{name}.sql", output)


@pytest.mark.parametrize("path", sorted((FIXTURES / "planner").glob("*.sql")), ids=lambda p: p.stem)
def test_plan_fixtures(path):
    _check(path, lambda sql: explain(compile(sql, CATALOG, view="v")))


@pytest.mark.parametrize("path", sorted((FIXTURES / "circuit").glob("*.sql")), ids=lambda p: p.stem)
def test_circuit_fixtures(path):
    _check(path, lambda sql: explain(Integral(Incrementalizer()(compile(sql, CATALOG, view="v")))))
