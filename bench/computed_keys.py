"""A join on a computed key: ticks that change either side, against a join on a column.

    python bench/computed_keys.py [--orders 1000000,4000000] [--changes 1000] [--moved 10]
                                  [--ticks 4] [--forms arrow,dataframe] [--batch-runs 2]

State: ``orders`` (N rows, each with its customer's id and its code as the order system
writes it, ``c123``) joined with ``customers`` (10,000 rows, code ``C123``) and aggregated
by region, three ways in turn over the same data and ticks:

- ``computed``: ``ON upper(o.code) = c.code`` on the default placement. The planner
  computes the key as a column of orders before the join, so orders' state is arranged
  by it and a tick of customers probes it;
- ``computed, DataFrame evaluator``: the same view on ``placement='dataframe'``, which is
  how every tick that changed customers ran before (the key was an expression over
  orders' state: nothing to probe, the tick joined the customers' change with all orders);
- ``column``: ``ON o.cust = c.id``, the plain key, as a reference.

Each tick changes ``--changes`` orders (half deleted, half new) and moves ``--moved``
customers to another region, handed over in each of ``--forms`` in turn ("arrow" or
"dataframe": ``spark.createDataFrame`` of Python rows plus a ``select``, as user code
makes one). Batch is Spark recomputing the computed view over the final data (adaptive
execution on), whose result every variant must equal. Per tick: Spark jobs / stages /
tasks (status tracker) and the pipeline's time split. Prints a table and saves
bench/results/computed_keys.png.
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

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from bench.join_aggregate import (BATCH_CONF, SparkWork, configure, log_plot, order_changes,  # noqa: E402
                                  print_table, print_variant)
from dbt_incremental_stream import Pipeline  # noqa: E402
from dbt_incremental_stream.differential import compare  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import TICK_CONF, session  # noqa: E402

CUSTOMERS = 10_000
REGIONS = 50
VIEW = ("SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS revenue FROM orders o JOIN customers c "
        "ON {on} GROUP BY c.region")
VARIANTS = {  # label → (ON, placement)
    "computed": ("upper(o.code) = c.code", "auto"),
    "computed, DataFrame evaluator": ("upper(o.code) = c.code", "dataframe"),
    "column": ("o.cust = c.id", "auto"),
}
ORDERS_DDL = "id BIGINT, cust INT, code STRING, amount DOUBLE"
CUSTOMERS_DDL = "id INT, code STRING, region STRING"


def order_table(ids: list[int], weights: list[int]) -> pa.Table:
    """Orders by id: the values are a function of it, as :func:`initial` makes them."""
    i = np.asarray(ids, np.int64)
    cust = (i % CUSTOMERS).astype(np.int32)
    return pa.table({"id": i, "cust": cust, "code": [f"c{c}" for c in cust.tolist()],
                     "amount": (i % 997) / 10.0, "_w": np.asarray(weights, np.int64)})


def customer_table(rows: list[tuple[int, int]], weights: list[int]) -> pa.Table:
    """Customers as (id, region number) rows."""
    return pa.table({"id": pa.array([c for c, _ in rows], pa.int32()), "code": [f"C{c}" for c, _ in rows],
                     "region": [f"r{r}" for _, r in rows], "_w": pa.array(weights, pa.int64())})


def handed_over(spark, form: str, table: pa.Table, ddl: str):
    """A table's change as ``form`` hands it over: Arrow, or a DataFrame of Python rows."""
    if form == "arrow":
        return table
    names = table.column_names
    rows = list(zip(*(table.column(n).to_pylist() for n in names)))
    df = spark.createDataFrame(rows, f"{ddl}, w BIGINT")
    return df.select(*names[:-1], F.col("w").alias("_w"))


def initial(spark, orders: int):
    ids = spark.range(orders)
    o = ids.select(F.col("id"), (F.col("id") % CUSTOMERS).cast("int").alias("cust"),
                   F.concat(F.lit("c"), (F.col("id") % CUSTOMERS).cast("string")).alias("code"),
                   ((F.col("id") % 997) / 10.0).alias("amount"))
    c = spark.range(CUSTOMERS).select(F.col("id").cast("int").alias("id"),
                                      F.concat(F.lit("C"), F.col("id").cast("string")).alias("code"),
                                      F.concat(F.lit("r"), (F.col("id") % REGIONS).cast("string")).alias("region"))
    return o, c


def workload(orders: int, changes: int, moved: int, ticks: int) -> list[tuple[pa.Table, pa.Table]]:
    """Each tick's (orders, customers) change, the same for every variant."""
    rng = random.Random(7)
    region = {c: c % REGIONS for c in range(CUSTOMERS)}
    changed, out = order_changes(orders, changes), []
    for _ in range(ticks):
        gone, new = next(changed)
        who = rng.sample(range(CUSTOMERS), moved)
        old = [(c, region[c]) for c in who]
        for c in who:
            region[c] = (region[c] + 1 + rng.randrange(REGIONS - 1)) % REGIONS
        out.append((order_table(gone + new, [-1] * len(gone) + [1] * len(new)),
                    customer_table(old + [(c, region[c]) for c in who], [-1] * moved + [1] * moved)))
    return out


def run_variant(spark, work: Path, label: str, orders: int, ticks: list, forms: list[str]) -> dict:
    on, placement = VARIANTS[label]
    pipe = Pipeline(spark, str(work / "state"), placement=placement)
    pipe.add_source("orders", ORDERS_DDL)
    pipe.add_source("customers", CUSTOMERS_DDL)
    pipe.add_view("revenue", VIEW.format(on=on))
    configure(spark, TICK_CONF)
    o, c = initial(spark, orders)
    t = time.perf_counter()
    pipe.step({"orders": o.withColumn("_w", F.lit(1)), "customers": c.withColumn("_w", F.lit(1))})
    load = time.perf_counter() - t
    spark_work = SparkWork(spark)
    seen = []
    for n, (do, dc) in enumerate(ticks):
        form = forms[n % len(forms)]
        deltas = {"orders": handed_over(spark, form, do, ORDERS_DDL),
                  "customers": handed_over(spark, form, dc, CUSTOMERS_DDL)}
        spark_work()
        t = time.perf_counter()
        pipe.step(deltas)
        took = time.perf_counter() - t
        last = pipe.last_tick
        seen.append({"form": form, "tick": took, "work": spark_work(), "split": last.seconds,
                     "path": last.path if last.path != "dataframe" else f"dataframe ({last.why})"})
    got = [tuple(r) for r in pipe.snapshot("revenue").collect()]
    final = pipe.snapshot("orders"), pipe.snapshot("customers")
    return {"label": label, "load": load, "ticks": seen, "got": got, "final": final, "pipe": pipe}


def batch(spark, work: Path, final, runs: int) -> tuple[list[float], list]:
    tables = work / "tables"
    for name, df in zip(("orders", "customers"), final):
        df.write.mode("overwrite").parquet(str(tables / name))
    configure(spark, BATCH_CONF)
    times = []
    for i in range(runs):
        for name in ("orders", "customers"):
            spark.read.parquet(str(tables / name)).createOrReplaceTempView(name)
        t = time.perf_counter()
        spark.sql(VIEW.format(on=VARIANTS["computed"][0])).write.mode("overwrite").parquet(str(work / f"batch{i}"))
        times.append(time.perf_counter() - t)
    return times, [tuple(r) for r in spark.read.parquet(str(work / "batch0")).collect()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orders", default="1000000,4000000")
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--moved", type=int, default=10)
    ap.add_argument("--ticks", type=int, default=4, help="ticks per form, after a first (warm-up) tick")
    ap.add_argument("--forms", default="arrow,dataframe")
    ap.add_argument("--batch-runs", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    forms = args.forms.split(",")
    sizes = [int(s) for s in args.orders.split(",")]
    spark = session(app_name="computed-keys-bench")
    results = []
    for orders in sizes:
        ticks = workload(orders, args.changes, args.moved, 1 + args.ticks * len(forms))
        row = {"orders": orders, "variants": {}}
        for label in VARIANTS:
            work = Path(tempfile.mkdtemp(prefix="computed-keys-"))
            try:
                r = run_variant(spark, work, label, orders, ticks, ["arrow"] + forms * args.ticks)
                if label == "computed":
                    row["batch"], want = batch(spark, work, r["final"], args.batch_runs)
                r["pipe"].close()
                r["equal"] = None
                row["variants"][label] = r
            finally:
                shutil.rmtree(work, ignore_errors=True)
        for r in row["variants"].values():
            problem = compare(r["got"], want)
            r["equal"] = problem is None
            print_variant(orders, r["label"], r["load"], r["ticks"], problem)
        results.append(row)
    report(results, forms, Path(args.out))


def report(results: list[dict], forms: list[str], out: Path) -> None:
    header = ["orders", "variant", "form", "tick (s)", "batch (s)", "batch / tick", "jobs / stages / tasks",
              "split (s)", "load (s)", "equal"]
    rows = []
    lines: dict[str, list[float]] = {}
    for row in results:
        b = statistics.median(row["batch"])
        for label, r in row["variants"].items():
            for form in forms:
                mine = [s for s in r["ticks"][1:] if s["form"] == form]
                tick = statistics.median(s["tick"] for s in mine)
                work = tuple(statistics.median(s["work"][k] for s in mine) for k in range(3))
                split = {k: statistics.median(s["split"].get(k, 0.0) for s in mine) for k in mine[0]["split"]}
                rows.append([f"{row['orders']:,}", label, form, f"{tick:.3f}", f"{b:.2f}", f"{b / tick:.1f}x",
                             "/".join(f"{w:.0f}" for w in work),
                             ", ".join(f"{k} {v:.2f}" for k, v in split.items() if v >= 0.005),
                             f"{r['load']:.1f}", "yes" if r["equal"] else "NO"])
                lines.setdefault(f"{label} ({form})", []).append(tick)
    print_table(header, rows)
    for row in results:
        v = row["variants"]
        for form in forms:
            def tick(label: str) -> float:
                return statistics.median(s["tick"] for s in v[label]["ticks"][1:] if s["form"] == form)
            print(f"{row['orders']:,} orders, {form}: DataFrame evaluator / computed "
                  f"{tick('computed, DataFrame evaluator') / tick('computed'):.1f}x, computed / column "
                  f"{tick('computed') / tick('column'):.2f}")
    lines["batch"] = [statistics.median(r["batch"]) for r in results]
    styles = iter(["o-", "s--", "^-", "v--", "d-", "x--", "*-"])
    log_plot(out / "computed_keys.png", "join on a computed key: a tick of both sides", "orders",
             [r["orders"] for r in results], [(label, next(styles), ys) for label, ys in lines.items()])


if __name__ == "__main__":
    main()
