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
from dbt_incremental_stream.runtime.session import TICK_CONF, session  # noqa: E402

VIEW = ("SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS revenue, AVG(o.amount) AS avg_amount "
        "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY c.region")
CUSTOMERS = 10_000
#: Spark's defaults for batch queries: adaptive execution, whole-stage code generation
BATCH_CONF = {"spark.sql.adaptive.enabled": "true", "spark.sql.shuffle.partitions": "8",
              "spark.sql.codegen.wholeStage": "true"}


def configure(spark, conf: dict[str, str]) -> None:
    """Switch the running session's SQL settings (the others are fixed at start-up)."""
    for key, value in conf.items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)


def order_rows(spark, ids):
    """Rows of orders for the given id DataFrame (column ``id``): values are a function of id."""
    return ids.select(F.col("id").cast("bigint").alias("id"), (F.col("id") % CUSTOMERS).cast("int").alias("cust"),
                      ((F.col("id") % 997) / 10.0).alias("amount"))


def run(spark, work: Path, orders: int, changes: int, ticks: int, batch_runs: int) -> dict:
    """One state size: load, ``ticks`` incremental ticks, then batch recomputes of the same data."""
    pipe = Pipeline(spark, str(work / "state"))
    pipe.add_source("orders", "id BIGINT, cust INT, amount DOUBLE")
    pipe.add_source("customers", "id INT, region STRING")
    pipe.add_view("revenue", VIEW)
    configure(spark, TICK_CONF)  # the engine's tick settings

    customers = spark.range(CUSTOMERS).select(F.col("id").cast("int").alias("id"),
                                             F.concat(F.lit("r"), (F.col("id") % 50).cast("string")).alias("region"))
    t = time.perf_counter()
    pipe.step({"orders": order_rows(spark, spark.range(orders)).withColumn("_w", F.lit(1)),
               "customers": customers.withColumn("_w", F.lit(1))})
    load = time.perf_counter() - t

    rng = random.Random(7)
    next_id, deleted = orders, set()
    tick_times = []
    for _ in range(ticks):
        gone = [i for i in {rng.randrange(orders) for _ in range(changes)} if i not in deleted][: changes // 2]
        deleted.update(gone)
        new = list(range(next_id, next_id + changes - len(gone)))
        next_id += len(new)
        ids = spark.createDataFrame([(i, -1) for i in gone] + [(i, 1) for i in new], "id BIGINT, _w INT")
        delta = order_rows(spark, ids).join(ids, "id")
        t = time.perf_counter()
        pipe.step({"orders": delta})
        tick_times.append(time.perf_counter() - t)

    # the batch baseline over the same data, as plain Parquet tables, in batch's best settings
    tables = work / "tables"
    pipe.snapshot("orders").write.parquet(str(tables / "orders"))
    customers.write.parquet(str(tables / "customers"))
    configure(spark, BATCH_CONF)
    batch_times = []
    for i in range(batch_runs):
        spark.read.parquet(str(tables / "orders")).createOrReplaceTempView("orders")
        spark.read.parquet(str(tables / "customers")).createOrReplaceTempView("customers")
        t = time.perf_counter()
        spark.sql(VIEW).write.mode("overwrite").parquet(str(work / f"batch_result_{i}"))
        batch_times.append(time.perf_counter() - t)
    want = spark.read.parquet(str(work / "batch_result_0")).collect()
    got = pipe.snapshot("revenue").collect()
    problem = compare([tuple(r) for r in got], [tuple(r) for r in want])
    pipe.close()
    return {"rows": orders - len(deleted) + (next_id - orders), "load": load, "ticks": tick_times,
            "batch": batch_times, "problem": problem}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", default="1000000", help="state sizes, comma separated (e.g. 1000000,4000000)")
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--batch-runs", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()

    spark = session("local[2]")
    sizes = [int(x) for x in args.orders.split(",")]
    results = []
    for n in sizes:
        work = Path(tempfile.mkdtemp(prefix="bench-"))
        try:
            results.append(run(spark, work, n, args.changes, args.ticks, args.batch_runs))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    header = ["state rows", "load (s)", f"tick, {args.changes} changes: median (s)", "ticks (s)",
              "batch: median (s)", "batch runs (s)", "batch / tick", "equal to batch"]
    table = [[f"{r['rows']:,}", f"{r['load']:.2f}", f"{statistics.median(r['ticks']):.2f}",
              " ".join(f"{x:.2f}" for x in r["ticks"]), f"{statistics.median(r['batch']):.2f}",
              " ".join(f"{x:.2f}" for x in r["batch"]),
              f"{statistics.median(r['batch']) / statistics.median(r['ticks']):.2f}x", str(r["problem"] is None)]
             for r in results]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(header)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in table:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = [r["rows"] for r in results]
    ax.plot(xs, [statistics.median(r["ticks"]) for r in results], "o-", label=f"incremental tick ({args.changes} changes)")
    ax.plot(xs, [statistics.median(r["batch"]) for r in results], "s-", label="batch recompute")
    ax.set_xlabel("rows of state (orders)")
    ax.set_ylabel("seconds (median)")
    ax.set_title("join + aggregate view, local[2]")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "join_aggregate.png", dpi=100)
    print(f"plot: {out / 'join_aggregate.png'}")
    bad = [r["problem"] for r in results if r["problem"] is not None]
    if bad:
        sys.exit(f"incremental result differs from batch: {bad[0]}")


if __name__ == "__main__":
    main()
