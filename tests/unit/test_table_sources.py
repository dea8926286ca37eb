"""Table sources: a table whose files were only added is read by its new files alone; any
other change (rewritten, a file gone, partitioned, a view) is compared whole: in the driver
for local Parquet files, else by Spark. Either way,
after every run each model equals its SQL in batch (DuckDB) over the table as it is."""
from __future__ import annotations

from pathlib import Path

from dbt_incremental_stream.differential import check_project
from dbt_incremental_stream.project import Model, Project, inputs

SCHEMA = "id INT, cust INT, amount DOUBLE, note STRING"


def rows(lo: int, hi: int) -> list[tuple]:
    return [(i, i % 4, None if i % 7 == 0 else i * 0.5, None if i % 5 == 0 else f"n{i % 3}") for i in range(lo, hi)]


def run(spark, location: Path, model: Model) -> dict[str, str]:
    """One ``dbt run`` of the model (a new project instance, as each run is); the model
    checked against batch; how each table source was read."""
    project = Project(spark, str(location))
    try:
        done = project.run_model(model)
        assert not any(check_project(project).values()), check_project(project)
        return {rel: how for t in done["ticks"] for rel, how in t["tables"].items()}
    finally:
        project.close()


def test_added_files_are_read_alone_and_other_changes_whole(spark, tmp_path, monkeypatch):
    spark.sql("CREATE DATABASE IF NOT EXISTS tsrc")
    spark.sql("CREATE DATABASE IF NOT EXISTS tsout")  # dbt creates the model's schema
    spark.createDataFrame(rows(0, 40), SCHEMA).write.mode("overwrite").format("parquet").saveAsTable("tsrc.orders")
    model = Model("tsout.by_cust", "SELECT cust, COUNT(*) AS n, SUM(amount) AS s, COUNT(DISTINCT note) AS d "
                                   "FROM tsrc.orders GROUP BY cust")
    location = tmp_path / "state"
    assert run(spark, location, model) == {"tsrc.orders": "read whole, in the driver"}  # the first read

    spark.createDataFrame(rows(40, 45), SCHEMA).coalesce(1).write.mode("append").saveAsTable("tsrc.orders")
    assert run(spark, location, model) == {"tsrc.orders": "1 added files, in the driver"}
    spark.createDataFrame(rows(0, 3), SCHEMA).repartition(2).write.mode("append").saveAsTable("tsrc.orders")
    assert run(spark, location, model) == {"tsrc.orders": "2 added files, in the driver"}  # duplicates of old rows, too
    assert run(spark, location, model) == {}  # nothing moved: nothing read

    table = spark.table("tsrc.orders")
    kept = [r for r in table.collect() if r["id"] % 3]  # a rewrite: rows deleted
    spark.createDataFrame(kept, SCHEMA).write.mode("overwrite").saveAsTable("tsrc.orders_tmp")
    spark.table("tsrc.orders_tmp").write.mode("overwrite").saveAsTable("tsrc.orders")
    assert run(spark, location, model) == {"tsrc.orders": "compared whole, in the driver"}

    files = sorted(spark.table("tsrc.orders").inputFiles())  # a file gone, another added
    Path(files[0].removeprefix("file:").replace("///", "/", 1)).unlink()
    spark.createDataFrame(rows(100, 104), SCHEMA).write.mode("append").saveAsTable("tsrc.orders")
    spark.sql("REFRESH TABLE tsrc.orders")
    assert run(spark, location, model) == {"tsrc.orders": "compared whole, in the driver"}

    monkeypatch.setattr(inputs, "DRIVER_TABLE_BYTES", 1000)  # too large for the driver: Spark compares
    spark.createDataFrame([r for r in spark.table("tsrc.orders").collect() if r["id"] % 4],
                          SCHEMA).write.mode("overwrite").saveAsTable("tsrc.orders_tmp")
    spark.table("tsrc.orders_tmp").write.mode("overwrite").saveAsTable("tsrc.orders")
    assert run(spark, location, model) == {"tsrc.orders": "compared whole, by Spark"}


def test_a_partitioned_table_is_compared_whole(spark, tmp_path):
    spark.sql("CREATE DATABASE IF NOT EXISTS tsrc")
    spark.sql("CREATE DATABASE IF NOT EXISTS tsout")  # dbt creates the model's schema
    spark.createDataFrame(rows(0, 20), SCHEMA).write.mode("overwrite").partitionBy("cust").saveAsTable("tsrc.parted")
    model = Model("tsout.parted_sum", "SELECT cust, SUM(amount) AS s, COUNT(*) AS n FROM tsrc.parted GROUP BY cust")
    location = tmp_path / "state"
    assert run(spark, location, model) == {"tsrc.parted": "read whole, by Spark"}  # a partition's values are in paths
    spark.createDataFrame(rows(20, 30), SCHEMA).write.mode("append").partitionBy("cust").saveAsTable("tsrc.parted")
    assert run(spark, location, model) == {"tsrc.parted": "compared whole, by Spark"}


TYPED = "id INT, at TIMESTAMP, day DATE, price DECIMAL(30,6), x DOUBLE, s STRING"


def typed(lo: int, hi: int) -> list[tuple]:
    from datetime import date, datetime, timedelta
    from decimal import Decimal

    base = datetime(1901, 3, 10, 2, 30)  # before 1970 and across DST changes in New York
    xs = [float("nan"), -0.0, 0.0, 1e308, None]
    return [(i, base + timedelta(days=37 * i, minutes=i), date(1999, 12, 31) + timedelta(days=i),
             Decimal(f"{i * 1234567890123}.{i:06d}"), xs[i % len(xs)], None if i % 4 == 0 else f"é{i}")
            for i in range(lo, hi)]


def test_added_files_read_in_the_driver_keep_spark_values(spark, tmp_path, local_new_york):
    """Added Parquet files, and a rewritten table, read by pyarrow in the driver give the
    values Spark reads from them: instants in a non-UTC session zone (before 1970, across DST), dates, wide
    decimals, NaN and -0.0, NULLs; the model equals batch after each run."""
    spark.sql("CREATE DATABASE IF NOT EXISTS tsrc")
    spark.sql("CREATE DATABASE IF NOT EXISTS tsout")
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        spark.createDataFrame(typed(0, 30), TYPED).write.mode("overwrite").format("parquet").saveAsTable("tsrc.typed")
        model = Model("tsout.typed_by_day", "SELECT day, MAX(at) AS last, SUM(price) AS total, COUNT(x) AS n, "
                                            "MIN(s) AS s, HOUR(MIN(at)) AS h FROM tsrc.typed GROUP BY day")
        location = tmp_path / "state"
        run(spark, location, model)
        for lo in (30, 60):
            spark.createDataFrame(typed(lo, lo + 30), TYPED).coalesce(1).write.mode("append").saveAsTable("tsrc.typed")
            assert run(spark, location, model) == {"tsrc.typed": "1 added files, in the driver"}
        # rewritten whole, a third of its rows gone and some anew: compared in the driver
        # with what the pipeline holds, every value as Spark reads it (else rows that did
        # not change would not cancel, and the model would differ from batch)
        kept = [r for r in spark.table("tsrc.typed").collect() if r["id"] % 3] + typed(200, 210)
        spark.createDataFrame(kept, TYPED).write.mode("overwrite").saveAsTable("tsrc.typed_tmp")
        spark.table("tsrc.typed_tmp").write.mode("overwrite").saveAsTable("tsrc.typed")
        assert run(spark, location, model) == {"tsrc.typed": "compared whole, in the driver"}
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


def test_added_orc_files_are_read_by_spark(spark, tmp_path):
    spark.sql("CREATE DATABASE IF NOT EXISTS tsrc")
    spark.sql("CREATE DATABASE IF NOT EXISTS tsout")
    spark.createDataFrame(rows(0, 20), SCHEMA).write.mode("overwrite").format("orc").saveAsTable("tsrc.orc_orders")
    model = Model("tsout.orc_sum", "SELECT note, SUM(amount) AS s, COUNT(*) AS n FROM tsrc.orc_orders GROUP BY note")
    location = tmp_path / "state"
    run(spark, location, model)
    more = spark.createDataFrame(rows(20, 30), SCHEMA).coalesce(1)
    more.write.mode("append").format("orc").saveAsTable("tsrc.orc_orders")
    assert run(spark, location, model) == {"tsrc.orc_orders": "1 added files, by Spark"}


def test_one_dbt_run_moves_the_time_once(spark, tmp_path):
    """Two models reading the time over an unchanged table: the first model of a run ticks
    (the time moved), the second finds the project up to date; a run where a table changed
    between its models (a batch model rebuilt it) ticks again for the change."""
    spark.sql("CREATE DATABASE IF NOT EXISTS tclock")
    spark.sql("CREATE DATABASE IF NOT EXISTS tclockout")
    spark.createDataFrame(rows(0, 10), SCHEMA).write.mode("overwrite").format("parquet").saveAsTable("tclock.orders")
    recent = Model("tclockout.recent", "SELECT id FROM tclock.orders WHERE current_date() >= DATE'2020-01-01'")
    stamped = Model("tclockout.stamped", "SELECT cust, COUNT(*) AS n, MAX(current_timestamp()) AS at "
                                         "FROM tclock.orders GROUP BY cust")
    location = str(tmp_path / "state")
    for run_ in range(2):
        project = Project(spark, location)
        try:
            first, second = project.run_model(recent), project.run_model(stamped)
            assert "(up to date)" not in first["message"], first["message"]
            assert second["message"].endswith("(up to date)") or run_ == 0, second["message"]
            if run_ == 1:
                spark.createDataFrame(rows(10, 12), SCHEMA).coalesce(1).write.mode("append") \
                    .saveAsTable("tclock.orders")
                third = project.run_model(recent)
                assert "(up to date)" not in third["message"], third["message"]
            assert not any(check_project(project).values()), check_project(project)
        finally:
            project.close()


def test_files_another_writer_added_or_removed_are_seen(spark, tmp_path):
    """A session keeps a table's file listing until the session itself writes the table:
    files an ingestion job (here pyarrow) added or removed since are still read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spark.sql("CREATE DATABASE IF NOT EXISTS tsrc")
    spark.sql("CREATE DATABASE IF NOT EXISTS tsout")
    spark.createDataFrame(rows(0, 30), SCHEMA).coalesce(1).write.mode("overwrite").format("parquet") \
        .saveAsTable("tsrc.ingested")
    model = Model("tsout.ingested_sum", "SELECT cust, COUNT(*) AS n, SUM(amount) AS s FROM tsrc.ingested GROUP BY cust")
    location = tmp_path / "state"
    assert run(spark, location, model) == {"tsrc.ingested": "read whole, in the driver"}
    directory = Path(spark.table("tsrc.ingested").inputFiles()[0].removeprefix("file:").replace("///", "/", 1)).parent
    added = spark.createDataFrame(rows(30, 36), SCHEMA).toPandas()
    pq.write_table(pa.Table.from_pandas(added, schema=pa.schema(
        [("id", pa.int32()), ("cust", pa.int32()), ("amount", pa.float64()), ("note", pa.string())]),
        preserve_index=False), directory / "part-ingested.parquet")
    assert run(spark, location, model) == {"tsrc.ingested": "1 added files, in the driver"}
    (directory / "part-ingested.parquet").unlink()
    assert run(spark, location, model) == {"tsrc.ingested": "compared whole, in the driver"}


def test_a_project_set_down_is_taken_up_while_its_state_is_as_it_left_it(spark, tmp_path):
    """The next invocation in a process (``dbtRunner``) takes up the project the last one
    set down, when its state location is as it was; a tick committed by another instance
    (another process's run), or a merge's output another instance's open removed, has it
    open anew. Either way every run equals batch."""
    spark.sql("CREATE DATABASE IF NOT EXISTS tsrc")
    spark.sql("CREATE DATABASE IF NOT EXISTS tsout")
    spark.createDataFrame(rows(0, 20), SCHEMA).coalesce(1).write.mode("overwrite").format("parquet") \
        .saveAsTable("tsrc.kept")
    model = Model("tsout.kept_sum", "SELECT cust, COUNT(*) AS n, SUM(amount) AS s FROM tsrc.kept GROUP BY cust")
    location, start = str(tmp_path / "state"), 20

    def append(n: int = 3) -> None:
        nonlocal start
        spark.createDataFrame(rows(start, start + n), SCHEMA).coalesce(1).write.mode("append").saveAsTable("tsrc.kept")
        start += n

    def invocation() -> Project:
        project = Project.take_up(spark, location)
        project.run_model(model)
        assert not any(check_project(project).values()), check_project(project)
        project.set_down()
        return project

    first = invocation()
    append()
    assert invocation() is first
    other = Project(spark, location)  # another process's run commits a tick
    append()
    other.run_model(model)
    other.close()
    second = invocation()
    assert second is not first and second.tick == other.tick
    while not any(part.startswith(("run:", "batch:")) for part in second.pipe.store.footprint()):
        append()  # ticks until a merge runs beside them (its output named by no manifest yet)
        assert invocation() is second
    Project(spark, location).close()  # another process's open removes that output
    append()
    assert invocation() is not second


def test_a_table_spark_listed_once_is_then_listed_without_it(spark, tmp_path, monkeypatch):
    """Once Spark has listed a local Parquet table in this process, later ticks list its
    directory themselves and ask the metastore for its definition: added files are read
    alone with no analysis by Spark; a moved location (a changed definition) or any change
    but added files goes back to Spark. Every tick equals batch."""
    import shutil

    import pyarrow.parquet as pq

    spark.sql("CREATE DATABASE IF NOT EXISTS tsrc")
    spark.sql("CREATE DATABASE IF NOT EXISTS tsout")
    spark.createDataFrame(rows(0, 30), SCHEMA).repartition(2).write.mode("overwrite").format("parquet") \
        .saveAsTable("tsrc.quick")
    model = Model("tsout.quick_sum", "SELECT cust, COUNT(*) AS n, SUM(amount) AS s FROM tsrc.quick GROUP BY cust")
    analysed = []
    listing = inputs._listing
    monkeypatch.setattr(inputs, "_listing", lambda table: analysed.append(1) or listing(table))
    project = Project(spark, str(tmp_path / "state"))

    def tick() -> dict[str, str]:
        done = project.run_model(model)
        spark.catalog.refreshTable("tsrc.quick")  # batch sees the files as they are
        assert not any(check_project(project).values()), check_project(project)
        return {rel: how for t in done["ticks"] for rel, how in t["tables"].items()}

    try:
        assert tick() == {"tsrc.quick": "read whole, in the driver"} and len(analysed) == 1
        spark.createDataFrame(rows(30, 34), SCHEMA).coalesce(1).write.mode("append").saveAsTable("tsrc.quick")
        assert tick() == {"tsrc.quick": "1 added files, in the driver"}
        assert tick() == {}
        assert len(analysed) == 1  # neither tick analysed the table

        files = sorted(spark.table("tsrc.quick").inputFiles())
        moved = tmp_path / "moved"
        moved.mkdir()
        for f in files[1:]:  # the table at a new location, without its first file
            source = Path(f.removeprefix("file:").replace("///", "/", 1))
            shutil.copy(source, moved / source.name)
        spark.sql(f"ALTER TABLE tsrc.quick SET LOCATION 'file://{moved}'")
        assert tick() == {"tsrc.quick": "compared whole, in the driver"} and len(analysed) == 2
        pq.write_table(pq.read_table(moved / Path(files[1]).name), moved / "part-copy.parquet")
        assert tick() == {"tsrc.quick": "1 added files, in the driver"} and len(analysed) == 2
        (moved / "part-copy.parquet").unlink()
        assert tick() == {"tsrc.quick": "compared whole, in the driver"} and len(analysed) == 3
    finally:
        project.close()
