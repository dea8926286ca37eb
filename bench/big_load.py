"""A big initial load of a three-view project with the embedded default session.

    python bench/big_load.py [--orders 10000000] [--changes 1000] [--ticks 3]

The project: ``revenue`` (orders ⋈ customers ⋈ products, aggregated by region and
category), ``customer_stats`` (COUNT DISTINCT and MAX per customer) and ``top_categories``
(the top 3 categories per region over ``revenue``: a window over an aggregate). The
session is the engine's default (``session()``: local[2], Spark's memory sized from the
machine). It loads ``--orders`` orders in one tick (100,000 customers, 1,000 products),
then runs ``--ticks`` ticks of ``--changes`` changes, and checks every view against the
same SQL run by Spark in batch over the snapshots. Measured: load time, peak resident
memory of the whole process tree (driver, JVM, Python workers; sampled every 100 ms),
state on disk, tick times and the batch rebuild of all three views. Prints a table.
"""
from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from memory import Peak, du, tree_rss  # noqa: E402

VIEWS = {
    "revenue": "SELECT c.region, p.category, COUNT(*) AS n, SUM(o.amount) AS revenue FROM orders o "
               "JOIN customers c ON o.cust = c.id JOIN products p ON o.product = p.id GROUP BY c.region, p.category",
    "customer_stats": "SELECT cust, COUNT(DISTINCT product) AS products, MAX(amount) AS top FROM orders GROUP BY cust",
    "top_categories": "SELECT region, category, revenue FROM (SELECT region, category, revenue, ROW_NUMBER() OVER "
                      "(PARTITION BY region ORDER BY revenue DESC, category) AS rn FROM revenue) WHERE rn <= 3",
}
CUSTOMERS, PRODUCTS, REGIONS, CATEGORIES = 100_000, 1_000, 20, 30


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=10_000_000)
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--ticks", type=int, default=3)
    args = ap.parse_args()

    import os

    from pyspark.sql import functions as F

    from dbt_incremental_stream import Pipeline
    from dbt_incremental_stream.differential import compare
    from dbt_incremental_stream.runtime.session import session

    work = Path(tempfile.mkdtemp(prefix="bench-big-"))
    spark = session()
    spark.range(1).count()
    idle = tree_rss(os.getpid())
    sampler = Peak()
    sampler.start()

    def orders(ids, weight: int = 1):
        return ids.select(F.col("id"), (F.col("id") * 7919 % CUSTOMERS).cast("int").alias("cust"),
                          (F.col("id") * 104729 % PRODUCTS).cast("int").alias("product"),
                          ((F.col("id") * 31 % 10000) / 100.0).alias("amount"),
                          F.lit(weight).cast("bigint").alias("_w"))

    pipe = Pipeline(spark, str(work / "state"))
    pipe.add_source("orders", "id BIGINT, cust INT, product INT, amount DOUBLE")
    pipe.add_source("customers", "id INT, region STRING")
    pipe.add_source("products", "id INT, category STRING")
    for name, sql in VIEWS.items():
        pipe.add_view(name, sql)
    t = time.perf_counter()
    pipe.step({
        "orders": orders(spark.range(args.orders)),
        "customers": spark.range(CUSTOMERS).select(F.col("id").cast("int"), F.concat(
            F.lit("r"), (F.col("id") % REGIONS).cast("string")).alias("region"), F.lit(1).cast("bigint").alias("_w")),
        "products": spark.range(PRODUCTS).select(F.col("id").cast("int"), F.concat(
            F.lit("c"), (F.col("id") % CATEGORIES).cast("string")).alias("category"),
            F.lit(1).cast("bigint").alias("_w")),
    })
    load = time.perf_counter() - t
    load_peak = sampler.peak

    rng = random.Random(3)
    next_id, gone = args.orders, set()
    ticks = []
    for _ in range(args.ticks):
        dels = [i for i in {rng.randrange(args.orders) for _ in range(args.changes // 2)} if i not in gone]
        gone.update(dels)
        ins = args.changes - len(dels)
        delta = orders(spark.createDataFrame([(i,) for i in dels], "id BIGINT"), -1).unionByName(
            orders(spark.range(next_id, next_id + ins)))
        next_id += ins
        t = time.perf_counter()
        pipe.step({"orders": delta})
        ticks.append((time.perf_counter() - t, pipe.last_tick.path))

    for source in ("orders", "customers", "products"):
        pipe.snapshot(source).write.parquet(str(work / "tables" / source))
    t = time.perf_counter()
    for source in ("orders", "customers", "products"):
        spark.read.parquet(str(work / "tables" / source)).createOrReplaceTempView(source)
    for name, sql in VIEWS.items():
        spark.sql(sql).write.mode("overwrite").parquet(str(work / "batch" / name))
        spark.read.parquet(str(work / "batch" / name)).createOrReplaceTempView(name)
    batch_seconds = time.perf_counter() - t
    problems = {name: compare([tuple(r) for r in pipe.snapshot(name).collect()],
                              [tuple(r) for r in spark.table(name).collect()]) for name in VIEWS}
    sampler.running = False
    sampler.join()
    state = du(work / "state")
    conf = spark.sparkContext.getConf()
    print(f"session: {conf.get('spark.master')}, driver memory {conf.get('spark.driver.memory', '1g (default)')}")
    print("orders | load (s) | peak RSS during load (MiB) | peak RSS (MiB) | idle (MiB) | state (MiB) | "
          f"tick, {args.changes} changes (s) | batch rebuild of the 3 views (s) | equal to batch")
    print(f"{args.orders:,} | {load:.1f} | {load_peak / 2**20:,.0f} | {sampler.peak / 2**20:,.0f} | "
          f"{idle / 2**20:,.0f} | {state / 2**20:,.0f} | "
          f"{' '.join(f'{s:.2f} ({p})' for s, p in ticks)} (median {statistics.median(s for s, _ in ticks):.2f}) | "
          f"{batch_seconds:.1f} | {all(p is None for p in problems.values())}")
    for name, problem in problems.items():
        if problem is not None:
            print(f"{name}: {problem}")
    pipe.close()
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    if any(p is not None for p in problems.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
