"""Packages in streaming models, installed as local packages (no network).

dbt-utils' SQL macros (a vendored copy): `date_spine`, `generate_series` (constant relations: SELECT without
FROM), `deduplicate` (a NATURAL JOIN on Spark), `star`, `pivot`, `union_relations` and
`generate_surrogate_key`. Each model equals its compiled SQL run in batch by Spark after the
seeds it reads are created, then changed (rows inserted, updated and deleted). (Spark, not
DuckDB: dbt-spark's `dateadd` goes through `to_unix_timestamp`, which the DuckDB oracle's
translation does not read as Spark does.)

How the adapter presents itself to packages (`packages/branching`): `adapter.dispatch` finds
a package's `spark__` implementation (dbt-spark is the adapter's parent); `target.type` is
`incremental_stream`, so a branch on `target.type in ('spark', 'databricks')` takes its other
side, and a project's `dispatch` config with a macro of its own puts it right."""
from __future__ import annotations

from pathlib import Path

import pytest
from dbt.tests.util import run_dbt

from dbt_incremental_stream.differential import compare

PACKAGES = Path(__file__).resolve().parent / "packages"
PACKAGE = PACKAGES / "dbt_utils"
ORDERS = """order_id,customer_id,status,amount,ordered_on
1,10,open,5.50,2024-01-01
2,10,paid,7.25,2024-01-02
3,11,open,1.00,2024-01-02
4,12,paid,,2024-01-05
5,11,paid,3.00,2024-01-07
"""
ORDERS_CHANGED = """order_id,customer_id,status,amount,ordered_on
1,10,paid,5.50,2024-01-01
2,10,paid,7.25,2024-01-02
4,12,paid,2.00,2024-01-05
5,11,open,3.00,2024-01-07
6,13,open,9.99,2024-01-09
"""
RETURNS = """order_id,customer_id,status,amount,ordered_on,reason
2,10,returned,7.25,2024-01-03,late
"""
MODELS = {
    "days.sql": "{{ dbt_utils.date_spine(datepart='day', start_date=\"cast('2024-01-01' as date)\", "
                "end_date=\"cast('2024-01-11' as date)\") }}",
    "daily_orders.sql": "select d.date_day, count(o.order_id) as orders from {{ ref('days') }} d "
                        "left join {{ ref('orders') }} o on o.ordered_on = d.date_day group by d.date_day",
    "series.sql": "{{ dbt_utils.generate_series(12) }}",
    "latest_per_customer.sql": "{{ dbt_utils.deduplicate(ref('orders'), partition_by='customer_id', "
                               "order_by='ordered_on desc, order_id desc') }}",
    "without_amount.sql": "select {{ dbt_utils.star(ref('orders'), except=['amount']) }} from {{ ref('orders') }}",
    "by_status.sql": "select customer_id, {{ dbt_utils.pivot('status', ['open', 'paid'], agg='sum', "
                     "then_value='amount') }} from {{ ref('orders') }} group by customer_id",
    "all_movements.sql": "{{ dbt_utils.union_relations(relations=[ref('orders'), ref('returns')]) }}",
    "keyed.sql": "select {{ dbt_utils.generate_surrogate_key(['order_id', 'status']) }} as order_key, order_id "
                 "from {{ ref('orders') }}",
}
STREAMING = {name[:-4] for name in MODELS}


class TestDbtUtilsMacrosStream:
    @pytest.fixture(scope="class")
    def packages(self):
        return {"packages": [{"local": str(PACKAGE)}]}

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"orders.csv": ORDERS, "returns.csv": RETURNS}

    @pytest.fixture(scope="class")
    def models(self):
        return {name: "{{ config(materialized='streaming_view') }}\n" + sql for name, sql in MODELS.items()}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"+column_types": {"amount": "decimal(10,2)", "ordered_on": "date"}}}

    def test_each_macro_streams_equal_to_batch(self, project, spark):
        run_dbt(["deps"])
        run_dbt(["seed"])
        results = run_dbt(["run"])
        assert {r.node.name for r in results if str(r.status) == "success"} == STREAMING
        self._check(project, spark)
        (Path(project.project_root) / "seeds" / "orders.csv").write_text(ORDERS_CHANGED)
        run_dbt(["seed"])
        results = run_dbt(["run"])
        assert {r.node.name for r in results if str(r.status) == "success"} == STREAMING
        self._check(project, spark)

    @staticmethod
    def _check(project, spark) -> None:
        sql = compiled(project)
        problems = {}
        for name in sorted(STREAMING):
            got = [tuple(r) for r in spark.table(f"{project.test_schema}.{name}").collect()]
            want = [tuple(r) for r in spark.sql(sql[name]).collect()]
            assert want, name  # every model has rows: the comparison is not vacuous
            if (problem := compare(got, want)) is not None:
                problems[name] = problem
        assert not problems, problems


def compiled(project) -> dict[str, str]:
    compiled = Path(project.project_root) / "target" / "compiled"
    return {p.stem: p.read_text() for p in compiled.rglob("models/**/*.sql")}


class TestPackagesBranchingOnTheAdapter:
    @pytest.fixture(scope="class")
    def packages(self):
        return {"packages": [{"local": str(PACKAGES / "branching")}]}

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"orders.csv": ORDERS}

    @pytest.fixture(scope="class")
    def macros(self):
        # the project's own version of the macro whose default branches on target.type
        return {"weeks.sql": "{% macro incremental_stream__week_of(col) %}date_trunc('WEEK', {{ col }})"
                             "{% endmacro %}"}

    @pytest.fixture(scope="class")
    def models(self):
        head = "{{ config(materialized='streaming_view') }}\n"
        return {"by_day.sql": head + "select d, count(*) as n from (select {{ branching.day_of('ordered_on') }} "
                                     "as d from {{ ref('orders') }}) x group by d",
                "by_week.sql": head + "select w, sum(amount) as amount from (select {{ branching.week_of("
                                      "'ordered_on') }} as w, amount from {{ ref('orders') }}) x group by w"}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"+column_types": {"amount": "decimal(10,2)", "ordered_on": "date"}},
                "dispatch": [{"macro_namespace": "branching", "search_order": ["test", "branching"]}]}

    def test_dispatch_finds_spark_and_the_project_fixes_a_target_type_branch(self, project, spark):
        run_dbt(["deps"])
        run_dbt(["seed"])
        assert (target := run_dbt(["compile", "--inline", "{{ target.type }}"])[0].node.compiled_code) == \
            "incremental_stream", target
        unfixed = run_dbt(["compile", "--inline", "{{ branching.default__week_of('d') }}"])[0].node.compiled_code
        assert "not spark" in unfixed  # the package's own branch on target.type takes its other side
        for round_ in range(2):
            if round_:
                (Path(project.project_root) / "seeds" / "orders.csv").write_text(ORDERS_CHANGED)
                run_dbt(["seed"])
            results = run_dbt(["run"])
            assert {r.node.name for r in results if str(r.status) == "success"} == {"by_day", "by_week"}
            sql = compiled(project)
            assert "to_date(ordered_on)" in sql["by_day"] and "date_trunc('WEEK', ordered_on)" in sql["by_week"]
            for name in ("by_day", "by_week"):
                got = [tuple(r) for r in spark.table(f"{project.test_schema}.{name}").collect()]
                want = [tuple(r) for r in spark.sql(sql[name]).collect()]
                assert want and compare(got, want) is None, (name, compare(got, want))
