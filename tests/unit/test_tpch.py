"""All 22 TPC-H queries as streaming views, equal to DuckDB after every refresh tick."""
from __future__ import annotations

from dbt_incremental_stream.differential import Differential
from devkit.tpch import TABLES, Refresh, connect, queries, schemas

SCALE = 0.002  # 3,000 orders, 12,000 lineitems


def test_tpch_queries_equal_batch_after_every_refresh(spark, tmp_path):
    con = connect(SCALE)
    views = {f"q{n:02d}": sql for n, sql in queries(con).items()}
    assert len(views) == 22
    refresh = Refresh(con)
    diff = Differential(spark, str(tmp_path / "state"), schemas(con), views)
    try:
        diff.step({t: [(r, 1) for r in refresh.rows(t)] for t in TABLES})
        for _ in range(2):  # each refresh inserts, deletes and updates
            diff.step(refresh.tick(orders=15, updates=4))
            assert diff.pipeline.last_tick.path == "arranged", diff.pipeline.last_tick.why
        answered = [v for v in views if diff.oracle.query(f'SELECT COUNT(*) FROM "{v}"')[0][0] > 0]
        assert len(answered) >= 18, f"too few queries have rows at this scale: {answered}"
    finally:
        diff.close()
