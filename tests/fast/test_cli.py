from __future__ import annotations

from dbt_incremental_stream.cli import main


def test_explain_and_check(tmp_path, capsys):
    sql = tmp_path / "revenue.sql"
    sql.write_text("SELECT c.region, SUM(o.amount) AS s FROM orders o JOIN customers c ON o.cust = c.id "
                   "GROUP BY c.region")
    sources = ["--source", "orders=id INT, cust INT, amount DECIMAL(10, 2)",
               "--source", "customers=id INT, region STRING"]
    assert main(["explain", str(sql), *sources]) == 0
    out = capsys.readouterr().out
    assert "GroupDiff" in out and "Input orders(id, cust, amount)" in out
    bad = tmp_path / "bad.sql"
    bad.write_text("SELECT id FROM orders\nTABLESAMPLE (10 PERCENT)")
    assert main(["check", str(bad), *sources]) == 1
    assert "TABLESAMPLE" in capsys.readouterr().err


def test_check_knows_the_time_and_the_one_row_relation(tmp_path, capsys):
    """A query reading the time or with a SELECT without FROM is checked as `dbt run`
    plans it (the pipeline adds those inputs), not rejected as reading unknown relations."""
    sql = tmp_path / "spine.sql"
    sql.write_text("WITH p AS (SELECT 0 AS g UNION ALL SELECT 1) SELECT o.id, p.g, current_date() AS d "
                   "FROM orders o CROSS JOIN p")
    assert main(["check", str(sql), "--source", "orders=id INT, cust INT"]) == 0
    assert "can run incrementally" in capsys.readouterr().out


def test_compiled_sql_comes_from_target_compiled_when_the_manifest_lacks_it(tmp_path):
    """`dbt run` and `dbt show` write manifest.json before compiling: the compiled file counts."""
    import json

    from dbt_incremental_stream.dbt_manifest import DbtProject

    node = {"resource_type": "model", "name": "v", "schema": "s", "alias": "v", "columns": {}, "package_name": "p",
            "original_file_path": "models/v.sql", "config": {"materialized": "streaming_view"}}
    (tmp_path / "target" / "compiled" / "p" / "models").mkdir(parents=True)
    (tmp_path / "target" / "manifest.json").write_text(json.dumps({
        "nodes": {"model.p.v": node},
        "sources": {"source.p.raw.t": {"schema": "raw", "name": "t", "columns": {"a": {}, "b": {}}}}}))
    assert not DbtProject(tmp_path).verdict("v").ok
    (tmp_path / "target" / "compiled" / "p" / "models" / "v.sql").write_text("select a, sum(b) as b from raw.t "
                                                                             "group by a")
    assert DbtProject(tmp_path).verdict("v").ok


def test_models_agree_with_dbt_run_on_seeds_and_batch_tables(tmp_path):
    """A seed read through source() with no columns declared keeps its CSV header's (a
    byte-order mark is not part of a name); a streaming model over a batch table whose SQL
    the engine cannot plan reads the columns that SQL selects; a model reading the time."""
    import json

    from dbt_incremental_stream.dbt_manifest import DbtProject

    (tmp_path / "seeds").mkdir()
    (tmp_path / "seeds" / "countries.csv").write_text("\ufeffcountry,region\nfr,eu\n", encoding="utf-8")

    def model(name, materialized, sql):
        return {"resource_type": "model", "name": name, "schema": "s", "alias": name, "columns": {},
                "package_name": "p", "original_file_path": f"models/{name}.sql", "compiled_code": sql,
                "config": {"materialized": materialized}}

    seed = {"resource_type": "seed", "name": "countries", "schema": "raw", "alias": "countries", "columns": {},
            "package_name": "p", "original_file_path": "seeds/countries.csv", "config": {}}
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "manifest.json").write_text(json.dumps({
        "nodes": {"seed.p.countries": seed,
                  "model.p.by_region": model("by_region", "streaming_view",
                                             "select region, count(*) as n from raw.countries group by region"),
                  "model.p.rolled": model("rolled", "table", "select region, country, count(*) as n "
                                          "from raw.countries tablesample (50 percent) group by region, country"),
                  "model.p.over_table": model("over_table", "streaming_view",
                                              "select region, sum(n) as n from s.rolled group by region"),
                  "model.p.today": model("today", "streaming_view",
                                         "select country, current_date() as d from raw.countries "
                                         "where current_timestamp() > timestamp'2020-01-01 00:00:00'")},
        "sources": {"source.p.raw.countries": {"schema": "raw", "name": "countries", "columns": {}}}}))
    project = DbtProject(tmp_path)
    assert project.verdict("by_region").ok, project.verdict("by_region").reason
    assert not project.verdict("rolled").ok  # TABLESAMPLE: the engine does not plan it, dbt builds it as a table
    assert project.verdict("over_table").ok, project.verdict("over_table").reason
    assert project.verdict("today").ok, project.verdict("today").reason  # reads the time, as dbt run plans it


def test_models_says_when_the_manifest_is_older_than_the_models(tmp_path, capsys):
    """`dbt-stream models` reads what `dbt compile` left in target/: a model edited since
    is named, with how to compile again for the right profile and target."""
    import json
    import os

    node = {"resource_type": "model", "name": "v", "schema": "s", "alias": "v", "columns": {}, "package_name": "p",
            "original_file_path": "models/v.sql", "compiled_code": "select 1 as one",
            "config": {"materialized": "streaming_view"}}
    (tmp_path / "target").mkdir()
    (tmp_path / "models").mkdir()
    (tmp_path / "target" / "manifest.json").write_text(json.dumps({"nodes": {"model.p.v": node}, "sources": {}}))
    (tmp_path / "models" / "v.sql").write_text("select 2 as two")
    compiled_at = (tmp_path / "target" / "manifest.json").stat().st_mtime
    os.utime(tmp_path / "models" / "v.sql", (compiled_at - 5, compiled_at - 5))
    assert main(["models", "--project-dir", str(tmp_path)]) == 0
    assert "changed since" not in capsys.readouterr().err
    later = compiled_at + 5
    os.utime(tmp_path / "models" / "v.sql", (later, later))
    assert main(["models", "--project-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "models/v.sql" in err and "dbt compile" in err and "--target" in err


def test_broker_on_a_taken_port_says_so(capsys):
    """`dbt-stream broker` on a port another process listens on (a broker started before):
    exit 1 and why, not a readiness check answered by the other process."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["broker", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is in use" in err and "--port" in err
