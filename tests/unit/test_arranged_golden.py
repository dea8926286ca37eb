"""Golden files of the arranged plan (``fixtures/arranged/*.sql``): SQL in → the view's
incremental circuit with what a small tick does at each node (``Pipeline.explain``'s last
section: the arrangements of each state node, what a join probes, what Arrow computes and
what is left to Spark), or why the view is not on arrangements. The plan asks Spark the
types of the sources' columns and expressions, so this is the Spark tier; the SQL front
end's and the circuit's golden files are in ``tests/fast``. Same format and
``UPDATE_GOLDEN=1`` as there."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from dbt_incremental_stream.runtime.pipeline import Pipeline
from tests.fast.test_golden import _check

FIXTURES = Path(__file__).parent / "fixtures" / "arranged"
SOURCES = {
    "orders": "id BIGINT, cust BIGINT, amount DECIMAL(10,2), status STRING",
    "customers": "id BIGINT, name STRING, region STRING",
    "items": "order_id BIGINT, sku STRING, price DOUBLE",
    "events": "id BIGINT, ts TIMESTAMP, v DOUBLE",
}


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.sql")), ids=lambda p: p.stem)
def test_arranged_plan_fixtures(spark, tmp_path, path):
    made = itertools.count()

    def output(sql: str) -> str:
        pipe = Pipeline(spark, str(tmp_path / f"state{next(made)}"))
        try:
            for name, schema in SOURCES.items():
                pipe.add_source(name, schema)
            pipe.add_view("v", sql)
            return pipe.explain("v").split("\n", 1)[1].split("\n-- view v: ", 2)[2]
        finally:
            pipe.close()

    _check(path, output)
