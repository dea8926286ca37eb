"""A view added to a pipeline that already ran: the tick that builds it, on arrangements
vs the DataFrame evaluator, against Spark's batch of the view, same session.

    python bench/backfill.py [--orders 50000,1000000] [--runs 2]

State: ``orders`` (N rows) and ``customers`` (10,000), loaded by a first tick that builds
a first view (orders per customer). Then the join + aggregate view of join_aggregate.py is
added (what ``dbt run`` does for a new streaming model) and one tick of 1,000 changes
builds it: its state nodes take all retained input plus the tick's change as their delta.
Each run builds the view over the loaded state once with the default placement (on
arrangements: in the driver up to 100k input rows, else in Spark tasks) and once with
``placement='dataframe'`` (the DataFrame evaluator's backfill, the path every such tick
took before). The baseline is what a dbt ``table`` model does: Spark's batch of the view
over the same rows, read from Parquet and written to Parquet. Per build: seconds, Spark
jobs / stages / tasks (status tracker), the pipeline's split of the tick, its path, and
whether the view equals batch. Prints a table and saves bench/results/backfill.png.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import functions as F  # noqa: E402

from bench.join_aggregate import (  # noqa: E402
    BATCH_CONF,
    CUSTOMERS,
    VIEW,
    SparkWork,
    configure,
    log_plot,
    order_rows,
    order_table,
    print_table,
)
from dbt_incremental_stream import Pipeline  # noqa: E402
from dbt_incremental_stream.differential import compare  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import TICK_CONF, session  # noqa: E402

FIRST = "SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust"
MODES = ("auto", "dataframe")  # where the tick that builds the view runs
CHANGES = 1_000


def pipeline(spark, location: Path, placement: str = "auto") -> Pipeline:
    pipe = Pipeline(spark, str(location), placement=placement)
    pipe.add_source("orders", "id BIGINT, cust INT, amount DOUBLE")
    pipe.add_source("customers", "id INT, region STRING")
    pipe.add_view("per_customer", FIRST)
    return pipe


def run(spark, work: Path, orders: int, runs: int, batch_runs: int) -> dict:
    """One state size: the load, then ``runs`` builds of the new view per mode, then batch."""
    configure(spark, TICK_CONF)
    customers = spark.range(CUSTOMERS).select(F.col("id").cast("int").alias("id"),
                                             F.concat(F.lit("r"), (F.col("id") % 50).cast("string")).alias("region"))
    base = pipeline(spark, work / "base")
    t = time.perf_counter()
    base.step({"orders": order_rows(spark, spark.range(orders)).withColumn("_w", F.lit(1)),
               "customers": customers.withColumn("_w", F.lit(1))})
    load = time.perf_counter() - t
    base.close()
    # the tick that adds the view: half deletes of loaded rows, half new rows
    gone = list(range(0, orders, max(1, orders // (CHANGES // 2))))[: CHANGES // 2]
    change = order_table(gone + list(range(orders, orders + CHANGES - len(gone))),
                         [-1] * len(gone) + [1] * (CHANGES - len(gone)))

    builds: dict[str, list[dict]] = {m: [] for m in MODES}
    work_counter = SparkWork(spark)
    snapshot = None
    shutil.copytree(work / "base", work / "loaded")  # a manifest names its files by absolute path:
    for i in range(runs):  # each build runs where the state was loaded, put back after it
        for mode in MODES:
            location = work / "base"
            pipe = pipeline(spark, location, mode)
            pipe.add_view("revenue", VIEW)
            work_counter()
            t = time.perf_counter()
            pipe.step({"orders": change})
            seconds = time.perf_counter() - t
            last = pipe.last_tick
            builds[mode].append({"seconds": seconds, "counts": work_counter(), "split": last.seconds,
                                 "path": last.path, "rows": [tuple(r) for r in pipe.snapshot("revenue").collect()]})
            if snapshot is None:
                snapshot = work / "orders"
                pipe.snapshot("orders").write.parquet(str(snapshot))
            pipe.close()
            shutil.rmtree(location)
            shutil.copytree(work / "loaded", location)

    tables = work / "tables"
    customers.write.parquet(str(tables / "customers"))
    configure(spark, BATCH_CONF)
    batch = []
    for i in range(batch_runs):
        spark.read.parquet(str(snapshot)).createOrReplaceTempView("orders")
        spark.read.parquet(str(tables / "customers")).createOrReplaceTempView("customers")
        t = time.perf_counter()
        spark.sql(VIEW).write.mode("overwrite").parquet(str(work / f"batch_result_{i}"))
        batch.append(time.perf_counter() - t)
    want = [tuple(r) for r in spark.read.parquet(str(work / "batch_result_0")).collect()]
    for mode in MODES:
        for b in builds[mode]:
            b["problem"] = compare(b.pop("rows"), want)
    return {"orders": orders, "load": load, "builds": builds, "batch": batch}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", default="50000,1000000", help="rows of retained orders, comma separated")
    ap.add_argument("--runs", type=int, default=2, help="builds of the view per mode")
    ap.add_argument("--batch-runs", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()

    spark = session("local[2]")
    results = []
    for n in [int(x) for x in args.orders.split(",")]:
        work = Path(tempfile.mkdtemp(prefix="bench-"))
        try:
            results.append(run(spark, work, n, args.runs, args.batch_runs))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def median(r: dict, mode: str) -> float:
        return statistics.median(b["seconds"] for b in r["builds"][mode])

    header = ["orders", "load (s)", "mode", "build median (s)", "builds (s)", "batch median (s)",
              "build / batch", "dataframe / this", "jobs / stages / tasks (median)", "split, median (s)", "path",
              "equal"]
    table = []
    for r in results:
        for mode in MODES:
            bs = r["builds"][mode]
            keys = next((b["split"] for b in bs if b["split"]), {})
            table.append([
                f"{r['orders']:,}", f"{r['load']:.1f}", mode, f"{median(r, mode):.2f}",
                " ".join(f"{b['seconds']:.2f}" for b in bs), f"{statistics.median(r['batch']):.2f}",
                f"{median(r, mode) / statistics.median(r['batch']):.2f}x",
                f"{median(r, 'dataframe') / median(r, mode):.1f}x",
                " / ".join(str(int(statistics.median(b["counts"][i] for b in bs))) for i in range(3)),
                " ".join(f"{k} {statistics.median(b['split'].get(k, 0.0) for b in bs):.2f}" for k in keys),
                ",".join(sorted({b["path"] for b in bs})), str(all(b["problem"] is None for b in bs))])
    print_table(header, table)

    log_plot(Path(args.out) / "backfill.png", "a join + aggregate view added later, local[2]", "retained orders",
             [r["orders"] for r in results],
             [(f"tick that builds the view ({mode})", "o-", [median(r, mode) for r in results]) for mode in MODES]
             + [("batch of the view", "s-", [statistics.median(r["batch"]) for r in results])])
    bad = [b["problem"] for r in results for bs in r["builds"].values() for b in bs if b["problem"] is not None]
    if bad:
        sys.exit(f"a built view differs from batch: {bad[0]}")


if __name__ == "__main__":
    main()
