"""A big initial load of a three-view project with the embedded default session.

    python bench/big_load.py [--orders 10000000] [--changes 1000] [--ticks 3] [--placements auto,dataframe]

The project: ``revenue`` (orders ⋈ customers ⋈ products, aggregated by region and
category), ``customer_stats`` (COUNT DISTINCT and MAX per customer) and ``top_categories``
(the top 3 categories per region over ``revenue``: a window over an aggregate). The
session is the engine's default (``session()``: local[2], Spark's memory sized from the
machine). It loads ``--orders`` orders in one tick (100,000 customers, 1,000 products),
then runs ``--ticks`` ticks of ``--changes`` changes, and checks every view against the
same SQL run by Spark in batch over the snapshots; once per ``--placements`` (the load on
arrangements in Spark tasks, and by the DataFrame evaluator), each in a state location of
its own. Measured: load time, peak resident
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


def run(spark, work: Path, placement: str, args: argparse.Namespace) -> dict:
    """Load ``--orders`` orders in one tick with the pipeline's ``placement``, then the
    ticks and the batch rebuild over the snapshots; what was measured."""
    import os

    from pyspark.sql import functions as F

    from dbt_incremental_stream import Pipeline
    from dbt_incremental_stream.differential import compare

    idle = tree_rss(os.getpid())
    sampler = Peak()
    sampler.start()

    def orders(ids, weight: int = 1):
        return ids.select(F.col("id"), (F.col("id") * 7919 % CUSTOMERS).cast("int").alias("cust"),
                          (F.col("id") * 104729 % PRODUCTS).cast("int").alias("product"),
                          ((F.col("id") * 31 % 10000) / 100.0).alias("amount"),
                          F.lit(weight).cast("bigint").alias("_w"))

    pipe = Pipeline(spark, str(work / "state"), placement=placement)
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
    load_peak, load_path = sampler.peak, pipe.last_tick.path
    if pipe.last_tick.why:
        print(f"{placement}: the load took the {load_path} path: {pipe.last_tick.why}")

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
    for name in VIEWS:
        spark.catalog.dropTempView(name)
    sampler.running = False
    sampler.join()
    pipe.close()
    return {"placement": placement, "path": load_path, "load": load, "load_peak": load_peak, "peak": sampler.peak,
            "idle": idle, "state": du(work / "state"), "ticks": ticks, "batch": batch_seconds, "problems": problems}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=10_000_000)
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--ticks", type=int, default=3)
    ap.add_argument("--placements", default="auto,dataframe",
                    help="the pipeline placements to load with, in turn (auto: the load in Spark tasks on "
                         "arrangements; dataframe: the DataFrame evaluator)")
    args = ap.parse_args()

    from dbt_incremental_stream.runtime.spark.session import session

    spark = session()
    spark.range(1).count()
    results = []
    for placement in args.placements.split(","):
        work = Path(tempfile.mkdtemp(prefix="bench-big-"))
        try:
            results.append(run(spark, work, placement, args))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    conf = spark.sparkContext.getConf()
    print(f"session: {conf.get('spark.master')}, driver memory {conf.get('spark.driver.memory', '1g (default)')}")
    print("orders | placement (load path) | load (s) | peak RSS during load (MiB) | peak RSS (MiB) | idle (MiB) | "
          f"state (MiB) | tick, {args.changes} changes (s) | batch rebuild of the 3 views (s) | equal to batch")
    for r in results:
        ticks = r["ticks"]
        print(f"{args.orders:,} | {r['placement']} ({r['path']}) | {r['load']:.1f} | {r['load_peak'] / 2**20:,.0f} | "
              f"{r['peak'] / 2**20:,.0f} | {r['idle'] / 2**20:,.0f} | {r['state'] / 2**20:,.0f} | "
              f"{' '.join(f'{s:.2f} ({p})' for s, p in ticks)} (median {statistics.median(s for s, _ in ticks):.2f}) | "
              f"{r['batch']:.1f} | {all(p is None for p in r['problems'].values())}")
        for name, problem in r["problems"].items():
            if problem is not None:
                print(f"{r['placement']} {name}: {problem}")
    if len(results) > 1:
        print(" ".join(f"load {r['placement']} / {results[0]['placement']}: {r['load'] / results[0]['load']:.2f}"
                       for r in results[1:]))
    spark.stop()
    if any(p is not None for r in results for p in r["problems"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
