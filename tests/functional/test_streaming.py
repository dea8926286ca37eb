"""Streaming models through real dbt invocations: seeds change between runs (rows added,
deleted and updated), `dbt build` brings every streaming model up to date, and after every
run each model equals its SQL run in batch by DuckDB over the seeds' contents."""
from __future__ import annotations

import csv
import os

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dbt_incremental_stream.differential import check_project
from dbt_incremental_stream.project import Project

STG_ORDERS = """
{{ config(materialized='ephemeral') }}
select id, customer_id, amount, status from {{ ref('orders') }} where status <> 'cancelled'
"""
CUSTOMER_TOTALS = """
{{ config(materialized='streaming_view') }}
select c.id as customer_id, c.name, c.region, count(o.id) as orders, sum(o.amount) as total
from {{ ref('customers') }} c left join {{ ref('stg_orders') }} o on o.customer_id = c.id
group by c.id, c.name, c.region
"""
REGION_TOTALS = """
{{ config(materialized='streaming_view') }}
select region, count(*) as customers, sum(total) as total from {{ ref('customer_totals') }} group by region
"""
TOP_CUSTOMERS = """
{{ config(materialized='streaming_view') }}
select region, customer_id, total, rank() over (partition by region order by total desc) as rnk
from {{ ref('customer_totals') }} where total is not null
"""
BIG_SPENDERS = """
{{ config(materialized='streaming_view') }}
select customer_id, name from {{ ref('customer_totals') }}
where total > (select avg(total) from {{ ref('customer_totals') }})
"""
ORDER_CHANGES = """
{{ config(materialized='changelog_table') }}
select status, count(*) as n, sum(amount) as amount from {{ ref('orders') }} group by status
"""
REGION_REPORT = """
{{ config(materialized='table') }}
select region, total from {{ ref('region_totals') }}
"""
SCHEMA_YML = """
version: 2
models:
  - name: customer_totals
    columns:
      - name: customer_id
        data_tests: [unique, not_null]
  - name: region_totals
    columns:
      - name: region
        data_tests: [unique]
"""
TOTALS_AGREE = """
select a.t, b.t from (select sum(total) as t from {{ ref('region_totals') }}) a
cross join (select sum(total) as t from {{ ref('customer_totals') }}) b
where abs(coalesce(a.t, 0) - coalesce(b.t, 0)) > 0.001
"""
ORDER_CHECKED = """
{{ config(materialized='streaming_view') }}
select id, case when customer_id = 777 then raise_error('customer 777 is closed') else amount end as amount
from {{ ref('orders') }}
"""
STREAMING = ("customer_totals", "region_totals", "top_customers", "big_spenders", "order_changes")

ORDERS = ["id", "customer_id", "amount", "status"]
CUSTOMERS = ["id", "name", "region"]
STATUSES = ["placed", "shipped", "cancelled"]
REGIONS = ["north", "south", "east", None]

# one change: (what, which row, a value)
change = st.tuples(st.sampled_from(["add_order", "drop_order", "amount", "status", "add_customer",
                                    "drop_customer", "region"]),
                   st.integers(0, 10_000), st.integers(0, 10_000))


def write_csv(path, header, rows) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])


class Shop:
    """The seeds' rows, changed in place and written out before each run."""

    def __init__(self) -> None:
        self.customers = {i: [i, f"c{i}", REGIONS[i % 4]] for i in range(1, 9)}
        self.orders = {i: [i, 1 + i % 10, None if i % 7 == 0 else round(i * 1.5, 2), STATUSES[i % 3]]
                       for i in range(1, 31)}
        self.next_order, self.next_customer = 31, 9

    def apply(self, what: str, which: int, value: int) -> None:
        orders, customers = sorted(self.orders), sorted(self.customers)
        if what == "add_order":
            self.orders[self.next_order] = [self.next_order, 1 + value % 12, float(value % 500) / 4,
                                            STATUSES[value % 3]]
            self.next_order += 1
        elif what == "drop_order" and orders:
            del self.orders[orders[which % len(orders)]]
        elif what == "amount" and orders:
            self.orders[orders[which % len(orders)]][2] = None if value % 9 == 0 else float(value % 300) / 2
        elif what == "status" and orders:
            self.orders[orders[which % len(orders)]][3] = STATUSES[value % 3]
        elif what == "add_customer":
            self.customers[self.next_customer] = [self.next_customer, f"c{self.next_customer}", REGIONS[value % 4]]
            self.next_customer += 1
        elif what == "drop_customer" and customers:
            del self.customers[customers[which % len(customers)]]
        elif what == "region" and customers:
            self.customers[customers[which % len(customers)]][2] = REGIONS[value % 4]

    def write(self, root) -> None:
        write_csv(os.path.join(root, "seeds", "orders.csv"), ORDERS, self.orders.values())
        write_csv(os.path.join(root, "seeds", "customers.csv"), CUSTOMERS, self.customers.values())


def actions(results) -> dict[str, str]:
    """What each streaming model's run did (CREATED, UNCHANGED, REBUILT, RESET)."""
    return {r.node.name: r.adapter_response.get("code") for r in results
            if r.node.resource_type == "model" and r.node.name in STREAMING}


def assert_equal_to_batch(spark, project_root) -> None:
    p = Project(spark, os.path.join(str(project_root), "stream_state"))
    try:
        problems = {m: d for m, d in check_project(p).items() if d}
        assert len(p.models) == len(STREAMING)
    finally:
        p.close()
    assert not problems, problems


class TestStreamingModels:
    shop = Shop()

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"orders.csv": "id\n", "customers.csv": "id\n"}  # replaced before every run

    @pytest.fixture(scope="class")
    def models(self):
        return {"stg_orders.sql": STG_ORDERS, "customer_totals.sql": CUSTOMER_TOTALS,
                "region_totals.sql": REGION_TOTALS, "top_customers.sql": TOP_CUSTOMERS,
                "big_spenders.sql": BIG_SPENDERS, "order_changes.sql": ORDER_CHANGES,
                "region_report.sql": REGION_REPORT, "schema.yml": SCHEMA_YML}

    @pytest.fixture(scope="class")
    def tests(self):
        return {"totals_agree.sql": TOTALS_AGREE}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        types = {"id": "bigint", "customer_id": "bigint", "amount": "double", "status": "string",
                 "name": "string", "region": "string"}
        return {"seeds": {"+column_types": types}}

    @pytest.fixture(scope="class")
    def built(self, project, spark):
        """The first `dbt build`: every streaming model created from the seeds."""
        self.shop.write(project.project_root)
        results = run_dbt(["build"])
        assert set(actions(results).values()) == {"CREATED"}
        assert_equal_to_batch(spark, project.project_root)
        return project

    @settings(max_examples=3, deadline=None, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(changes=st.lists(change, min_size=1, max_size=12))
    def test_seed_changes_flow_through(self, built, spark, changes):
        for c in changes:
            self.shop.apply(*c)
        self.shop.write(built.project_root)
        results = run_dbt(["build"])  # seeds reloaded, models caught up, tests run on the snapshot
        assert set(actions(results).values()) == {"UNCHANGED"}  # caught up, not rebuilt
        assert_equal_to_batch(spark, built.project_root)
        report = {r[0]: r[1] for r in built.run_sql(f"select * from {built.test_schema}.region_report", fetch="all")}
        totals = {r[0]: r[1] for r in built.run_sql(f"select region, total from {built.test_schema}.region_totals",
                                                      fetch="all")}
        assert report == totals  # a batch model reading a streaming one sees the committed tick

    def test_empty_flag_deploys_nothing(self, built, spark):
        results = run_dbt(["run", "--empty"])
        assert set(actions(results).values()) == {"SKIPPED"}
        assert_equal_to_batch(spark, built.project_root)

    def test_full_refresh_resets_only_the_selected_model(self, built, spark):
        results = run_dbt(["run", "--full-refresh", "-s", "customer_totals"])
        assert actions(results) == {"customer_totals": "RESET"}
        assert_equal_to_batch(spark, built.project_root)

    def test_changed_sql_rebuilds_the_model_and_its_dependents(self, built, spark):
        changed = CUSTOMER_TOTALS.replace("sum(o.amount) as total", "sum(o.amount) as total, max(o.amount) as biggest")
        write_file(changed, built.project_root, "models", "customer_totals.sql")
        results = run_dbt(["run"])
        assert actions(results)["customer_totals"] == "REBUILT"
        assert_equal_to_batch(spark, built.project_root)
        self.shop.apply("add_order", 0, 123)
        self.shop.apply("drop_order", 3, 0)
        self.shop.write(built.project_root)
        run_dbt(["build"])
        assert_equal_to_batch(spark, built.project_root)

    def test_unsupported_sql_names_the_construct_and_the_model(self, built):
        write_file("{{ config(materialized='streaming_view') }}\nselect *\nfrom {{ ref('orders') }}\n  limit 3",
                   built.project_root, "models", "first_orders.sql")
        try:
            results, log = run_dbt_and_capture(["run", "-s", "first_orders"], expect_pass=False)
        finally:
            os.remove(os.path.join(built.project_root, "models", "first_orders.sql"))
        assert "streaming model test" in log and "first_orders" in log
        assert "unsupported in a streaming view: LIMIT / OFFSET without ORDER BY" in log
        # the model as dbt names its relation, and the line in the model's file (Jinja kept the lines)
        assert ".first_orders', line 4, col 9 of models/first_orders.sql)" in log and "__first_orders" not in log

    def test_a_model_failing_on_a_row_stops_only_itself(self, built, spark):
        """A model raising an error on one row (dbt-spark runs Spark without ANSI mode, so a
        division by zero is NULL there; `raise_error` and `assert_true` still fail): `dbt
        build` reports that model as an error naming the cause, the other streaming models
        pass and are right; once the row is gone, the next build rebuilds the model and
        every model equals batch."""
        path = os.path.join(built.project_root, "models", "order_checked.sql")
        write_file(ORDER_CHECKED, path)
        self.shop.orders[9999] = [9999, 777, 5.0, "placed"]
        self.shop.write(built.project_root)
        try:
            results, log = run_dbt_and_capture(["build"], expect_pass=False)
            status = {r.node.name: str(r.status) for r in results if r.node.resource_type == "model"}
            assert status["order_checked"] == "error" and "USER_RAISED_EXCEPTION" in log, status
            assert all(status[m] == "success" for m in STREAMING), status
            p = Project(spark, os.path.join(str(built.project_root), "stream_state"))
            try:
                problems = {m: d for m, d in check_project(p).items() if d and not m.endswith(".order_checked")}
                assert p.failed.keys() == {f"{built.test_schema}.order_checked"}
            finally:
                p.close()
            assert not problems, problems

            del self.shop.orders[9999]
            self.shop.write(built.project_root)
            run_dbt(["build"])
            p = Project(spark, os.path.join(str(built.project_root), "stream_state"))
            try:
                assert p.failed == {} and not any(check_project(p).values())
            finally:
                p.close()
        finally:
            os.remove(path)
        self.shop.apply("add_order", 1, 5)
        self.shop.write(built.project_root)
        run_dbt(["build"])  # the model leaves the state with the next tick
        assert_equal_to_batch(spark, built.project_root)


class TestTheNextInvocationTakesUpTheProject:
    """`dbt run`s made one after another in one process (``dbtRunner``): each takes up the
    project the last one set down, rather than defining its circuit again, and still reads
    every change, writes back a catalog view someone dropped and moves the time."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"orders.csv": "id,customer_id,amount,status\n1,1,2.5,placed\n2,1,4.0,shipped\n3,2,1.0,placed\n"}

    @pytest.fixture(scope="class")
    def models(self):
        return {"order_totals.sql": "{{ config(materialized='streaming_view') }}\n"
                                    "select customer_id, count(*) as n, sum(amount) as total "
                                    "from {{ ref('orders') }} group by customer_id"}

    def test_runs_take_up_the_project(self, project, spark):
        from dbt_incremental_stream.project import project as projects

        location = os.path.join(str(project.project_root), "stream_state")
        view, stamp = f"{project.test_schema}.order_totals", f"{project.test_schema}.order_stamp"

        def totals() -> list[tuple]:
            return sorted(tuple(r) for r in spark.table(view).collect())

        def batch() -> list[tuple]:
            return sorted(tuple(r) for r in spark.sql(
                f"select customer_id, count(*), sum(amount) from {project.test_schema}.orders "
                f"group by customer_id").collect())

        run_dbt(["seed"])
        run_dbt(["run"])
        kept, _ = projects._SET_DOWN[location]
        assert totals() == batch()

        write_file("id,customer_id,amount,status\n1,1,2.5,placed\n3,2,7.0,placed\n4,3,1.5,placed\n",
                   project.project_root, "seeds", "orders.csv")
        run_dbt(["seed"])
        run_dbt(["run"])
        assert projects._SET_DOWN[location][0] is kept  # taken up, then set down again
        assert totals() == batch()

        spark.sql(f"DROP VIEW {view}")
        results = run_dbt(["run"])  # nothing changed: no tick, still the view is back
        assert results[0].adapter_response["code"] == "UNCHANGED"
        assert projects._SET_DOWN[location][0] is kept and totals() == batch()

        write_file("{{ config(materialized='streaming_view') }}\n"
                   "select max(current_timestamp()) as at from {{ ref('orders') }}",
                   project.project_root, "models", "order_stamp.sql")
        run_dbt(["run"])
        first = spark.table(stamp).collect()[0]["at"]
        run_dbt(["run"])
        assert projects._SET_DOWN[location][0] is kept
        assert spark.table(stamp).collect()[0]["at"] > first  # the time moves with each run
