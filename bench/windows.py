"""Window functions per customer: small ticks on Arrow kernels against Spark's window.

    python bench/windows.py [--orders 1000000,4000000] [--changes 1000] [--ticks 4] [--batch-runs 2]
                            [--views rankings|running|moving|moments|running_moments|mixed|by_spark|distinct]

State: ``orders`` (N rows; 100,000 customers, so about N / 100,000 orders each) and views
over it, ticked together. ``--views rankings`` (the default):

- ``ranked``: ``RANK()`` and ``DENSE_RANK()`` of each order by amount within its customer;
- ``share``: each order's share of its customer's total, ``amount / SUM(amount) OVER
  (PARTITION BY cust)``, and ``COUNT(*) OVER (PARTITION BY cust)``.

``--views running``: ``running``, each customer's running total, count and largest amount
by order id (``SUM(amount) OVER (PARTITION BY cust ORDER BY id)``, ``COUNT(*)`` over ``ROWS
BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``, ``MAX(amount)``). ``--views moving``:
``moving``, a moving average over the customer's last 7 orders (``ROWS BETWEEN 6 PRECEDING
AND CURRENT ROW``), a sum over the orders whose id is within 500,000 before (``RANGE
BETWEEN 500000 PRECEDING AND CURRENT ROW``) and the smallest of 5 orders around each.
``--views moments``: ``spread``, each customer's ``STDDEV``, ``VAR_POP`` and ``COUNT`` of
its amounts (``GROUP BY cust``), and ``spread_each``, each order with its customer's
``STDDEV_POP(amount) OVER (PARTITION BY cust)``. ``--views running_moments``: ``drift``,
each customer's running ``STDDEV`` of its amounts by order id and the ``VAR_POP`` of its
last 7 orders (``ROWS BETWEEN 6 PRECEDING AND CURRENT ROW``). ``--views mixed``: ``mixed``,
functions of three window specifications in one SELECT: each order's ``RANK()`` by amount,
its customer's running total by order id and its customer's order count. ``--views
by_spark``: ``quantiles``, windows Arrow has no kernel for (each customer's median amount,
``percentile(amount, 0.5) OVER (PARTITION BY cust)``, and its running distinct count of
amounts, ``approx_count_distinct(amount) OVER (PARTITION BY cust ORDER BY id)``): Spark's
window in the driver (one variant: there is no Arrow form to turn off), in tasks Spark's
window between two stages of the tick's job. ``--views distinct``: ``distinct``, each
customer's ``SUM(DISTINCT amount)``, ``AVG(DISTINCT amount)``, ``MAX(amount)`` and
``COUNT(*)`` (``GROUP BY cust``: beside a MAX, the touched customers' orders are
re-aggregated; before, by Spark's aggregate over them in the driver, and on the DataFrame
evaluator in tasks).

Four variants over the same data and ticks:

- ``Arrow, driver``: the default placement; the touched customers' orders are read from
  the arrangement and the windows computed by Arrow kernels (``windows.ranks``,
  ``windows.totals``);
- ``Spark window, driver (before)``: the same, but the windows computed as before, by a
  Spark job over the touched customers' orders (the arranged plan's window forms turned
  off in this process; for ``moments`` and ``distinct``, the variances, deviations and
  sums of distinct values too: Spark's own aggregate over the touched groups' rows);
- ``Arrow, tasks``: ``placement='tasks'``, every tick one Spark job whose tasks run the
  same kernels;
- ``DataFrame evaluator (before, for tasks)``: ``placement='dataframe'``, where a tick in
  tasks went before (a task cannot run a Spark window).

Each tick changes ``--changes`` orders (half deleted, half new), as Arrow. Batch is Spark
computing both views over the final data (adaptive execution on), whose result every
variant must equal exactly (``compare_exact``: the twin's rule, floats to 1e-9 relative).
Per tick: Spark jobs / stages / tasks (status tracker) and the pipeline's time split.
Prints a table and saves bench/results/windows.png.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from bench.join_aggregate import (BATCH_CONF, SparkWork, configure, log_plot, order_changes,  # noqa: E402
                                  print_table, print_variant)
from dbt_incremental_stream import Pipeline  # noqa: E402
from dbt_incremental_stream.differential import compare_exact  # noqa: E402
from dbt_incremental_stream.runtime import plan  # noqa: E402
from dbt_incremental_stream.runtime.arrow import kernels  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import TICK_CONF, session  # noqa: E402

CUSTOMERS = 100_000
VIEW_SETS = {
    "rankings": {
        "ranked": "SELECT id, cust, RANK() OVER (PARTITION BY cust ORDER BY amount DESC) AS r, "
                  "DENSE_RANK() OVER (PARTITION BY cust ORDER BY amount DESC) AS dr FROM orders",
        "share": "SELECT id, cust, amount / SUM(amount) OVER (PARTITION BY cust) AS share, "
                 "COUNT(*) OVER (PARTITION BY cust) AS n FROM orders",
    },
    "moving": {
        "moving": "SELECT id, cust, AVG(amount) OVER (PARTITION BY cust ORDER BY id ROWS BETWEEN 6 PRECEDING AND "
                  "CURRENT ROW) AS week, SUM(amount) OVER (PARTITION BY cust ORDER BY id RANGE BETWEEN 500000 "
                  "PRECEDING AND CURRENT ROW) AS near, MIN(amount) OVER (PARTITION BY cust ORDER BY id ROWS BETWEEN "
                  "2 PRECEDING AND 2 FOLLOWING) AS low FROM orders",
    },
    "moments": {
        "spread": "SELECT cust, STDDEV(amount) AS sd, VAR_POP(amount) AS vp, COUNT(*) AS n FROM orders GROUP BY cust",
        "spread_each": "SELECT id, cust, STDDEV_POP(amount) OVER (PARTITION BY cust) AS sd FROM orders",
    },
    "running_moments": {
        "drift": "SELECT id, cust, STDDEV(amount) OVER (PARTITION BY cust ORDER BY id) AS sd, VAR_POP(amount) "
                 "OVER (PARTITION BY cust ORDER BY id ROWS BETWEEN 6 PRECEDING AND CURRENT ROW) AS week FROM orders",
    },
    "mixed": {
        "mixed": "SELECT id, cust, RANK() OVER (PARTITION BY cust ORDER BY amount DESC) AS r, SUM(amount) OVER "
                 "(PARTITION BY cust ORDER BY id) AS total, COUNT(*) OVER (PARTITION BY cust) AS n FROM orders",
    },
    "distinct": {
        "distinct": "SELECT cust, SUM(DISTINCT amount) AS sd, AVG(DISTINCT amount) AS ad, MAX(amount) AS top, "
                    "COUNT(*) AS n FROM orders GROUP BY cust",
    },
    "by_spark": {
        "quantiles": "SELECT id, cust, percentile(amount, 0.5) OVER (PARTITION BY cust) AS median, "
                     "approx_count_distinct(amount) OVER (PARTITION BY cust ORDER BY id) AS kinds FROM orders",
    },
    "running": {
        "running": "SELECT id, cust, SUM(amount) OVER (PARTITION BY cust ORDER BY id) AS total, "
                   "COUNT(*) OVER (PARTITION BY cust ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) "
                   "AS k, MAX(amount) OVER (PARTITION BY cust ORDER BY id) AS top FROM orders",
    },
}
VARIANTS = {  # label → (placement, the arranged plan's window forms on)
    "Arrow, driver": ("auto", True),
    "Spark window, driver (before)": ("auto", False),
    "Arrow, tasks": ("tasks", True),
    "DataFrame evaluator (before, for tasks)": ("dataframe", True),
}
ORDERS_DDL = "id BIGINT, cust INT, amount DOUBLE"


def order_table(ids: list[int], weights: list[int]) -> pa.Table:
    """Orders by id: the values are a function of it, as :func:`initial` makes them."""
    i = np.asarray(ids, np.int64)
    return pa.table({"id": i, "cust": (i % CUSTOMERS).astype(np.int32), "amount": (i % 997 + 1) / 10.0,
                     "_w": np.asarray(weights, np.int64)})


def workload(orders: int, changes: int, ticks: int) -> list[pa.Table]:
    """Each tick's change of orders, the same for every variant."""
    changed = order_changes(orders, changes)
    return [order_table(gone + new, [-1] * len(gone) + [1] * len(new)) for gone, new in
            (next(changed) for _ in range(ticks))]


def run_variant(spark, work: Path, label: str, views: dict[str, str], orders: int, ticks: list[pa.Table]) -> dict:
    placement, forms_on = VARIANTS[label]
    with mock.patch.object(plan.Plan, "_window", plan.Plan._window if forms_on else lambda self, op: None), \
            mock.patch.object(kernels, "MOMENTS", kernels.MOMENTS if forms_on else frozenset()), \
            mock.patch.object(kernels, "_ONCE", kernels._ONCE if forms_on else ()):
        pipe = Pipeline(spark, str(work / "state"), placement=placement)
        pipe.add_source("orders", ORDERS_DDL)
        for name, sql in views.items():
            pipe.add_view(name, sql)
        configure(spark, TICK_CONF)
        t = time.perf_counter()
        pipe.step({"orders": spark.range(orders).select(
            F.col("id"), (F.col("id") % CUSTOMERS).cast("int").alias("cust"),
            ((F.col("id") % 997 + 1) / 10.0).alias("amount"), F.lit(1).alias("_w"))})
        load = time.perf_counter() - t
        spark_work = SparkWork(spark)
        seen = []
        for delta in ticks:
            spark_work()
            t = time.perf_counter()
            pipe.step({"orders": delta})
            took = time.perf_counter() - t
            last = pipe.last_tick
            seen.append({"tick": took, "work": spark_work(), "split": last.seconds,
                         "path": last.path if last.path != "dataframe" else f"dataframe ({last.why})"})
        got = {name: pipe.snapshot(name).toArrow() for name in views}
        final = pipe.snapshot("orders")
    return {"label": label, "load": load, "ticks": seen, "got": got, "final": final, "pipe": pipe}


def batch(spark, work: Path, views: dict[str, str], final, runs: int) -> tuple[list[float], dict]:
    final.write.mode("overwrite").parquet(str(work / "orders"))
    configure(spark, BATCH_CONF)
    times = []
    for i in range(runs):
        spark.read.parquet(str(work / "orders")).createOrReplaceTempView("orders")
        t = time.perf_counter()
        for name, sql in views.items():
            spark.sql(sql).write.mode("overwrite").parquet(str(work / f"batch{i}_{name}"))
        times.append(time.perf_counter() - t)
    return times, {name: spark.read.parquet(str(work / f"batch0_{name}")).toArrow() for name in views}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orders", default="1000000,4000000")
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--ticks", type=int, default=4, help="ticks after a first (warm-up) tick")
    ap.add_argument("--batch-runs", type=int, default=2)
    ap.add_argument("--views", choices=sorted(VIEW_SETS), default="rankings")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    views = VIEW_SETS[args.views]
    sizes = [int(s) for s in args.orders.split(",")]
    spark = session(app_name="windows-bench")
    results = []
    for orders in sizes:
        ticks = workload(orders, args.changes, 1 + args.ticks)
        row: dict = {"orders": orders, "variants": {}}
        want: dict = {}
        for label in VARIANTS:
            if args.views == "by_spark" and not VARIANTS[label][1]:
                continue  # the same as the driver's: no Arrow form to turn off
            work = Path(tempfile.mkdtemp(prefix="windows-"))
            try:
                r = run_variant(spark, work, label, views, orders, ticks)
                if not want:
                    row["batch"], want = batch(spark, work, views, r["final"], args.batch_runs)
                r["pipe"].close()
                problems = [p for name in views if (p := compare_exact(r["got"][name], want[name])) is not None]
                r["equal"] = not problems
                row["variants"][label] = r
            finally:
                shutil.rmtree(work, ignore_errors=True)
            print_variant(orders, label, r["load"], r["ticks"], problems[0] if problems else None)
        results.append(row)
    report(results, list(views), Path(args.out) / ("windows.png" if args.views == "rankings"
                                                   else f"windows_{args.views}.png"))


def report(results: list[dict], views: list[str], plot: Path) -> None:
    header = ["orders", "variant", "tick (s)", "batch (s)", "batch / tick", "jobs / stages / tasks", "split (s)",
              "load (s)", "equal"]
    rows = []
    lines: dict[str, list[float]] = {}
    for row in results:
        b = statistics.median(row["batch"])
        for label, r in row["variants"].items():
            mine = r["ticks"][1:]
            tick = statistics.median(s["tick"] for s in mine)
            work = tuple(statistics.median(s["work"][k] for s in mine) for k in range(3))
            split = {k: statistics.median(s["split"].get(k, 0.0) for s in mine) for k in mine[0]["split"]}
            rows.append([f"{row['orders']:,}", label, f"{tick:.3f}", f"{b:.2f}", f"{b / tick:.1f}x",
                         "/".join(f"{w:.0f}" for w in work),
                         ", ".join(f"{k} {v:.2f}" for k, v in split.items() if v >= 0.005),
                         f"{r['load']:.1f}", "yes" if r["equal"] else "NO"])
            lines.setdefault(label, []).append(tick)
    print_table(header, rows)
    for row in results:
        v = row["variants"]

        def tick(label: str) -> float:
            return statistics.median(s["tick"] for s in v[label]["ticks"][1:])
        before = "Spark window, driver (before)"
        driver = ""
        if before in v:
            driver = f"Spark window / Arrow in the driver {tick(before) / tick('Arrow, driver'):.1f}x; "
        print(f"{row['orders']:,} orders: {driver}DataFrame evaluator / tasks "
              f"{tick('DataFrame evaluator (before, for tasks)') / tick('Arrow, tasks'):.1f}x")
    lines["batch"] = [statistics.median(r["batch"]) for r in results]
    styles = iter(["o-", "s--", "^-", "v--", "d-"])
    log_plot(plot, f"window functions per customer ({', '.join(views)}): a tick of 1,000 changed orders", "orders",
             [r["orders"] for r in results], [(label, next(styles), ys) for label, ys in lines.items()])


if __name__ == "__main__":
    main()
