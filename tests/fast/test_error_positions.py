"""An error in a model's SQL is placed where its user can open it (the adapter's `in_files`)."""
from __future__ import annotations

from dbt.adapters.incremental_stream.impl import in_files

from dbt_incremental_stream.errors import CompileError, UnsupportedSqlError

RAW = "{{ config(materialized='streaming_view') }}\nselect *\nfrom {{ ref('orders') }}\nlimit 3"
SQL = "\nselect *\nfrom s.orders\nlimit 3"
FILES = {"path": "models/first.sql", "raw": RAW, "compiled": "target/compiled/p/models/first.sql"}


def test_a_line_jinja_left_alone_keeps_its_column():
    e = in_files(UnsupportedSqlError("LIMIT", view="s.first", line=4, col=5), SQL, **FILES)
    assert str(e) == "unsupported in a streaming view: LIMIT (view 's.first', line 4, col 5 of models/first.sql)"
    assert isinstance(e, UnsupportedSqlError) and e.construct == "LIMIT"


def test_a_line_jinja_changed_keeps_only_its_line():
    e = in_files(CompileError("bad", view="s.first", line=3, col=14), SQL, **FILES)
    assert str(e) == "bad (view 's.first', line 3 of models/first.sql)"


def test_sql_with_lines_of_its_own_points_to_the_compiled_file():
    expanded = "with __dbt__cte__stg as (\nselect 1\n)\n" + SQL
    e = in_files(CompileError("bad", view="s.first", line=7, col=1), expanded, **FILES)
    assert str(e) == ("bad (view 's.first', line 7, col 1 of target/compiled/p/models/first.sql, "
                      "compiled from models/first.sql)")


def test_an_error_without_a_position_is_left_as_it_is():
    e = CompileError("a view is exactly one SELECT query", view="s.first")
    assert in_files(e, SQL, **FILES) is e
