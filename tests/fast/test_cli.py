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
    bad.write_text("SELECT id FROM orders\nGROUP BY ROLLUP (id)")
    assert main(["check", str(bad), *sources]) == 1
    assert "ROLLUP" in capsys.readouterr().err


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
