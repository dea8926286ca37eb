from __future__ import annotations

from dbt_incremental_stream.cli import main


def test_explain_and_check(tmp_path, capsys):
    sql = tmp_path / "revenue.sql"
    sql.write_text("SELECT c.region, SUM(o.amount) AS s FROM orders o JOIN customers c ON o.cust = c.id "
                   "GROUP BY c.region")
    sources = ["--source", "orders=id INT, cust INT, amount DECIMAL(10, 2)", "--source", "customers=id INT, region STRING"]
    assert main(["explain", str(sql), *sources]) == 0
    out = capsys.readouterr().out
    assert "GroupDiff" in out and "Input orders(id, cust, amount)" in out
    bad = tmp_path / "bad.sql"
    bad.write_text("SELECT id FROM orders\nGROUP BY ROLLUP (id)")
    assert main(["check", str(bad), *sources]) == 1
    assert "ROLLUP" in capsys.readouterr().err
