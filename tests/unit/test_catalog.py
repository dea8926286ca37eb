"""Catalog views: a tick's new files are published without analysis when the columns stay,
and by DDL when they change, the view went away, or plans are cached."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dbt_incremental_stream.catalog import Catalog, relations, schema_exists, schemas
from dbt_incremental_stream.process import WORKERS

AB = StructType([StructField("a", LongType()), StructField("b", StringType())])


@pytest.fixture
def files(tmp_path):
    def write(name: str, **columns: list) -> str:
        """A query of a new Parquet file with these columns."""
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table(columns), path)
        return f"SELECT {', '.join(columns)} FROM parquet.`{path}`"
    return write


def _jobs(spark) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup())


def test_new_files_same_columns_are_one_catalog_write(spark, files):
    spark.sql("CREATE SCHEMA IF NOT EXISTS cat1")
    catalog = Catalog(spark)
    catalog.publish({"cat1.v": (files("t1", a=[1], b=["x"]), AB)})
    assert [tuple(r) for r in spark.table("cat1.v").collect()] == [(1, "x")]
    second = files("t2", a=[2, 3], b=["y", "z"])
    before = _jobs(spark)
    catalog.publish({"cat1.v": (second, AB)})
    assert _jobs(spark) == before  # no analysis, no schema-inference job
    assert sorted(tuple(r) for r in spark.table("cat1.v").collect()) == [(2, "y"), (3, "z")]
    catalog.publish({"cat1.v": (files("t3", a=[4], b=["w"]), AB)})  # the kept definition written again
    assert [tuple(r) for r in spark.table("cat1.v").collect()] == [(4, "w")]
    fresh = Catalog(spark)  # the next `dbt run`: finds the view as the last one left it
    before = _jobs(spark)
    fresh.publish({"cat1.v": (files("t4", a=[5], b=["v"]), AB)})
    assert _jobs(spark) == before
    assert [tuple(r) for r in spark.table("cat1.v").collect()] == [(5, "v")]


def test_changed_columns_dropped_view_and_cached_plans_go_through_ddl(spark, files):
    spark.sql("CREATE SCHEMA IF NOT EXISTS cat2")
    catalog = Catalog(spark)
    catalog.publish({"cat2.v": (files("u1", a=[1], b=["x"]), AB)})
    ac = StructType([StructField("a", LongType()), StructField("c", LongType())])
    catalog.publish({"cat2.v": (files("u2", a=[1], c=[7]), ac)})
    assert spark.table("cat2.v").columns == ["a", "c"]
    assert [tuple(r) for r in spark.table("cat2.v").collect()] == [(1, 7)]

    spark.sql("DROP VIEW cat2.v")  # by another client: the kept definition is stale
    catalog.publish({"cat2.v": (files("u3", a=[2], c=[8]), ac)})
    assert [tuple(r) for r in spark.table("cat2.v").collect()] == [(2, 8)]

    spark.sql("CACHE TABLE cat2.v")
    try:
        catalog.publish({"cat2.v": (files("u4", a=[3], c=[9]), ac)})
        assert [tuple(r) for r in spark.table("cat2.v").collect()] == [(3, 9)]
    finally:
        spark.sql("UNCACHE TABLE IF EXISTS cat2.v")
        spark.catalog.clearCache()


def test_views_are_published_by_the_same_threads_every_tick(spark, files):
    """A Python thread calling Spark is a JVM thread of its own, and the Hive metastore
    client keeps a connection per JVM thread that touched it, forever: the views of every
    tick are written by the same few threads, not by threads made per tick."""
    import threading

    spark.sql("CREATE SCHEMA IF NOT EXISTS cat3")
    catalog = Catalog(spark)

    def publishers() -> set[int]:
        return {t.ident for t in threading.enumerate() if t.name.startswith("dbt-stream-publish")}

    seen = []
    for tick in range(3):
        catalog.publish({f"cat3.v{i}": (files(f"p{tick}{i}", a=[tick], b=["x"]), AB) for i in range(3)})
        seen.append(publishers())
    assert seen[0] and seen[0] <= seen[1] <= seen[2] and len(seen[2]) <= WORKERS["publish"]


def test_schemas_and_relations_are_listed_as_show_statements_list_them(spark):
    """What a `dbt run` lists before it runs (dbt-spark reads a relation's type, provider
    and columns from the description): read from the session catalog, the same as SHOW."""
    spark.sql("CREATE SCHEMA IF NOT EXISTS cat_list")
    spark.range(3).write.saveAsTable("cat_list.plain")
    spark.range(3).selectExpr("id", "id % 2 AS p").write.partitionBy("p").saveAsTable("cat_list.parted")
    spark.sql("CREATE TABLE cat_list.text (a INT, s STRING) USING csv")
    spark.sql("CREATE VIEW cat_list.v COMMENT 'over plain' AS SELECT id FROM cat_list.plain")
    spark.range(1).createOrReplaceTempView("cat_list_temporary")  # listed by SHOW in every schema, with none
    shown = {(r[0], r[1]): r[3] for r in spark.sql("SHOW TABLE EXTENDED IN cat_list LIKE '*'").collect() if r[0]}
    listed = relations(spark, "CAT_LIST")
    assert listed is not None and len(listed) == 4
    assert {(schema, name): info for schema, name, info in listed} == shown
    assert relations(spark, "cat_list_missing") == []
    spark.sql("CREATE SCHEMA IF NOT EXISTS cat_empty")
    assert relations(spark, "cat_empty") == []
    assert schemas(spark) == [r[0] for r in spark.sql("SHOW DATABASES").collect()]
    assert schema_exists(spark, "cat_list") and not schema_exists(spark, "cat_list_missing")
