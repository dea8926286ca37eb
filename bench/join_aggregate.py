"""Incremental tick vs batch recompute for a join + aggregate view, same Spark session.

    python bench/join_aggregate.py [--orders 1000000] [--changes 1000] [--ticks 5]

State: ``orders`` (N rows) joined with ``customers`` and aggregated by region. Each tick
changes ``--changes`` rows of orders (half deletes of existing rows, half inserts). The
batch baseline is what a dbt ``table`` model does: read both tables, join, aggregate,
write the result. Ticks run with the engine's tick settings (no adaptive execution);
batch runs with adaptive execution on, each side in its best configuration. Prints a
table and saves bench/results/join_aggregate.png.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import functions as F  # noqa: E402

from dbt_incremental_stream import Pipeline  # noqa: E402
from dbt_incremental_stream.differential import compare  # noqa: E402
from dbt_incremental_stream.runtime.session import session  # noqa: E402

VIEW = ("SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS revenue, AVG(o.amount) AS avg_amount "
        "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY c.region")
CUSTOMERS = 10_000


def order_rows(spark, ids):
    """Rows of orders for the given id DataFrame (column ``id``): values are a function of id."""
    return ids.select(F.col("id").cast("bigint").alias("id"), (F.col("id") % CUSTOMERS).cast("int").alias("cust"),
                      ((F.col("id") % 997) / 10.0).alias("amount"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--batch-runs", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()

    spark = session("local[2]")
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    pipe = Pipeline(spark, str(work / "state"))
    pipe.add_source("orders", "id BIGINT, cust INT, amount DOUBLE")
    pipe.add_source("customers", "id INT, region STRING")
    pipe.add_view("revenue", VIEW)

    customers = spark.range(CUSTOMERS).select(F.col("id").cast("int").alias("id"),
                                             F.concat(F.lit("r"), (F.col("id") % 50).cast("string")).alias("region"))
    t = time.perf_counter()
    pipe.step({"orders": order_rows(spark, spark.range(args.orders)).withColumn("_w", F.lit(1)),
               "customers": customers.withColumn("_w", F.lit(1))})
    load = time.perf_counter() - t

    rng = random.Random(7)
    live = set(range(args.orders))
    next_id = args.orders
    ticks = []
    for _ in range(args.ticks):
        gone = rng.sample(sorted(live), args.changes // 2) if len(live) < 50_000 else \
            list({rng.randrange(next_id) for _ in range(args.changes)} & live)[: args.changes // 2]
        live.difference_update(gone)
        new = list(range(next_id, next_id + args.changes - len(gone)))
        next_id += len(new)
        live.update(new)
        ids = spark.createDataFrame([(i, -1) for i in gone] + [(i, 1) for i in new], "id BIGINT, _w INT")
        delta = order_rows(spark, ids).join(ids, "id")
        t = time.perf_counter()
        pipe.step({"orders": delta})
        ticks.append(time.perf_counter() - t)

    # the batch baseline over the same data, as plain Parquet tables
    tables = work / "tables"
    pipe.snapshot("orders").write.parquet(str(tables / "orders"))
    customers.write.parquet(str(tables / "customers"))
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    spark.conf.set("spark.sql.shuffle.partitions", "8")
    batch = []
    for i in range(args.batch_runs):
        spark.read.parquet(str(tables / "orders")).createOrReplaceTempView("orders")
        spark.read.parquet(str(tables / "customers")).createOrReplaceTempView("customers")
        t = time.perf_counter()
        spark.sql(VIEW).write.mode("overwrite").parquet(str(work / f"batch_result_{i}"))
        batch.append(time.perf_counter() - t)
    want = spark.read.parquet(str(work / "batch_result_0")).collect()
    got = pipe.snapshot("revenue").collect()
    problem = compare([tuple(r) for r in got], [tuple(r) for r in want])
    equal = problem is None

    tick_median, batch_median = statistics.median(ticks), statistics.median(batch)
    rows = [
        ("state rows (orders)", f"{len(live):,}"),
        ("initial load tick (s)", f"{load:.2f}"),
        (f"incremental tick, {args.changes} changed rows: median (s)", f"{tick_median:.2f}"),
        ("incremental ticks (s)", " ".join(f"{x:.2f}" for x in ticks)),
        ("batch recompute: median (s)", f"{batch_median:.2f}"),
        ("batch runs (s)", " ".join(f"{x:.2f}" for x in batch)),
        ("speed-up (batch / tick)", f"{batch_median / tick_median:.1f}x"),
        ("incremental result equals batch", str(equal)),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(["incremental tick\n(median)", "batch recompute\n(median)"], [tick_median, batch_median],
           color=["tab:green", "tab:gray"])
    ax.set_ylabel("seconds")
    ax.set_title(f"join+aggregate, {len(live):,} rows of state, {args.changes} changes/tick")
    fig.tight_layout()
    fig.savefig(out / "join_aggregate.png", dpi=100)
    print(f"plot: {out / 'join_aggregate.png'}")
    pipe.close()
    shutil.rmtree(work, ignore_errors=True)
    if not equal:
        sys.exit(f"incremental result differs from batch: {problem}")


if __name__ == "__main__":
    main()
