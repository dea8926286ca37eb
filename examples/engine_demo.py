"""A few ticks of an online shop through the engine: the view changes with every tick
and always equals the batch query on all input so far.

    python examples/engine_demo.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dbt_incremental_stream import Pipeline  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import session  # noqa: E402

REVENUE = """
SELECT c.region, COUNT(*) AS orders, SUM(o.amount) AS revenue, MAX(o.amount) AS largest
FROM orders o JOIN customers c ON o.customer_id = c.id
WHERE o.status <> 'cancelled'
GROUP BY c.region
"""

TICKS = [
    ("two customers, three orders", {
        "customers": [((1, "ann", "eu"), 1), ((2, "bob", "us"), 1)],
        "orders": [((10, 1, 25.0, "paid"), 1), ((11, 1, 40.0, "paid"), 1), ((12, 2, 15.5, "paid"), 1)]}),
    ("order 11 is cancelled (an update: delete + insert)", {
        "orders": [((11, 1, 40.0, "paid"), -1), ((11, 1, 40.0, "cancelled"), 1)]}),
    ("bob moves to eu; a new order for bob", {
        "customers": [((2, "bob", "us"), -1), ((2, "bob", "eu"), 1)],
        "orders": [((13, 2, 99.9, "paid"), 1)]}),
]


def main() -> None:
    spark = session("local[2]")
    pipe = Pipeline(spark, tempfile.mkdtemp(prefix="demo-state-"))
    pipe.add_source("orders", "id INT, customer_id INT, amount DECIMAL(10,2), status STRING")
    pipe.add_source("customers", "id INT, name STRING, region STRING")
    pipe.add_view("revenue_by_region", REVENUE)
    print(pipe.explain("revenue_by_region"), "\n")
    for title, changes in TICKS:
        out = pipe.step(changes)
        print(f"== tick {pipe.tick}: {title}")
        print("changes (_w = +1 insert, -1 retract):")
        out["revenue_by_region"].orderBy("region", "_w").show(truncate=False)
        print("view contents:")
        pipe.snapshot("revenue_by_region").orderBy("region").show(truncate=False)
        for table in ("orders", "customers"):
            pipe.snapshot(table).createOrReplaceTempView(f"{table}")
        print("the same SQL in batch over all input so far:")
        spark.sql(REVENUE).orderBy("region").show(truncate=False)
    pipe.close()


if __name__ == "__main__":
    main()
