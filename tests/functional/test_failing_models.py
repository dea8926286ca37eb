"""Models whose SQL fails on a row, through real `dbt run`s over a Kafka source: a division
by zero and a cast overflow (Spark's ANSI mode, which a profile turns on through
`spark_conf`: dbt-spark turns it off), and a decimal that does not fit its column, each
between good records. The other models advance and are right, the bad record is
dead-lettered with its reason, the failing models are errors naming the cause, and once
the bad rows are updated or deleted the next `dbt run` makes every model equal to batch.
A model reading a failing one keeps its last contents too (dbt skips it)."""
from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from devkit.kafka import create_topics, produce
from dbt_incremental_stream.differential import check_project
from dbt_incremental_stream.project import Project

TOPIC = "failing.items"
SOURCES = f"""
version: 2
sources:
  - name: raw
    schema: failing_raw
    tables:
      - name: items
        meta:
          kafka: {{topic: {TOPIC}, format: json, envelope: upsert, key: [id]}}
        columns:
          - {{name: id, data_type: bigint}}
          - {{name: qty, data_type: int}}
          - {{name: price, data_type: "decimal(10,2)"}}
"""
MODELS = {
    "unit_price.sql": "select id, price / qty as unit from {{ source('raw', 'items') }}",
    "priciest.sql": "select max(unit) as top from {{ ref('unit_price') }}",
    "small.sql": "select id, cast(qty as tinyint) as q from {{ source('raw', 'items') }}",
    "totals.sql": "select count(*) as n, sum(price) as total from {{ source('raw', 'items') }}",
}


def send(kafka: str, docs: list[dict]) -> None:
    """Upserts by id; a document with the id alone deletes it."""
    produce(kafka, TOPIC, [({"id": d["id"]}, None if len(d) == 1 else d) for d in docs])


def statuses(results) -> dict[str, str]:
    return {r.node.name: str(r.status) for r in results if r.node.resource_type == "model"}


class TestFailingModelsOnKafka:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self, kafka):
        return {"type": "incremental_stream", "threads": 1, "master": "local[2]", "state_location": "stream_state",
                "kafka": {"bootstrap_servers": kafka}, "spark_conf": {"spark.sql.ansi.enabled": "true"}}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+materialized": "streaming_view"}}

    @pytest.fixture(scope="class")
    def models(self):
        return {"sources.yml": SOURCES, **MODELS}

    def check(self, project, spark) -> dict[str, str]:
        """Every model that did not fail equals batch; what failed, by model name."""
        p = Project(spark, f"{project.project_root}/stream_state")
        try:
            failed = {rel.split(".")[-1]: why for rel, why in p.failed.items()}
            problems = {m: d for m, d in check_project(p).items() if d and m.split(".")[-1] not in failed}
        finally:
            p.close()
        assert not problems, problems
        return failed

    def test_bad_rows_stop_only_their_models_until_they_go(self, project, kafka, spark):
        create_topics(kafka, TOPIC, partitions=1)
        send(kafka, [{"id": 1, "qty": 2, "price": "10.00"}])
        assert set(statuses(run_dbt(["run"])).values()) == {"success"}
        assert self.check(project, spark) == {}

        send(kafka, [{"id": 2, "qty": 0, "price": "5.00"}, {"id": 3, "qty": 300, "price": "1.00"},
                     {"id": 4, "qty": 1, "price": "123456789012.00"}, {"id": 5, "qty": 4, "price": "2.00"}])
        results, log = run_dbt_and_capture(["run"], expect_pass=False)
        got = statuses(results)
        assert got == {"unit_price": "error", "priciest": "skipped", "small": "error", "totals": "success"}, got
        assert "DIVIDE_BY_ZERO" in log and "CAST_OVERFLOW" in log and "reads" in log
        failed = self.check(project, spark)  # totals counts ids 1, 2, 3 and 5
        assert failed["unit_price"].startswith("DIVIDE_BY_ZERO") and failed["small"].startswith("CAST_OVERFLOW")
        assert failed["priciest"].endswith("unit_price, which failed")
        assert spark.sql(f"select n, total from {project.test_schema}.totals").collect()[0][:] == (4, 18)
        dead = spark.sql("select offset, reason from failing_raw.items__dead_letters").collect()
        assert [r[0] for r in dead] == [3] and "'price'" in dead[0][1] and "digits before the point" in dead[0][1]

        send(kafka, [{"id": 2, "qty": 1, "price": "5.00"}, {"id": 3}])  # one bad row updated, one deleted
        assert set(statuses(run_dbt(["run"])).values()) == {"success"}
        assert self.check(project, spark) == {}
