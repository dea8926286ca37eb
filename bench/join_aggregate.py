"""Incremental tick vs batch recompute for a join + aggregate view, same Spark session.

    python bench/join_aggregate.py [--orders 1000000,4000000,10000000] [--changes 1000] [--ticks 7]
                                   [--forms arrow,dataframe,pandas,rows]

State: ``orders`` (N rows) joined with ``customers`` and aggregated by region. Each tick
changes ``--changes`` rows of orders (half deletes of existing rows, half inserts), handed
to the pipeline in each of ``--forms`` in turn, ``--ticks`` ticks each, over the same
state: an Arrow table (what a source decoded in Arrow hands it), a DataFrame as a user
makes one (``spark.createDataFrame`` of the rows, or of a pandas DataFrame, plus a
``select``), or Python rows. The batch
baseline is what a dbt ``table`` model does: read both tables, join, aggregate, write the
result. Ticks run with the engine's tick settings (no adaptive execution); batch runs with
adaptive execution on, each side in its best configuration. Per tick it counts the Spark
jobs, stages and tasks (status tracker) and splits the time as the pipeline reports it
(``Pipeline.last_tick``), and for a tick in Spark tasks the seconds its tasks spent reading,
computing, shipping and writing (summed over the tasks). Prints a table and saves
bench/results/join_aggregate.png.
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
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from dbt_incremental_stream import Pipeline  # noqa: E402
from dbt_incremental_stream.differential import compare  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import TICK_CONF, session  # noqa: E402

VIEW = ("SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS revenue, AVG(o.amount) AS avg_amount "
        "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY c.region")
CUSTOMERS = 10_000
#: Spark's defaults for batch queries: adaptive execution, whole-stage code generation
BATCH_CONF = {"spark.sql.adaptive.enabled": "true", "spark.sql.shuffle.partitions": "8",
              "spark.sql.codegen.wholeStage": "true"}


def configure(spark, conf: dict[str, str]) -> None:
    """Switch the running session's SQL settings (the others are fixed at start-up)."""
    for key, value in conf.items():
        if key.startswith("spark.sql.") and spark.conf.isModifiable(key):
            spark.conf.set(key, value)


def order_rows(spark, ids):
    """Rows of orders for the given id DataFrame (column ``id``): values are a function of id."""
    return ids.select(F.col("id").cast("bigint").alias("id"), (F.col("id") % CUSTOMERS).cast("int").alias("cust"),
                      ((F.col("id") % 997) / 10.0).alias("amount"))


def order_table(ids: list[int], weights: list[int]) -> pa.Table:
    """The same rows as :func:`order_rows`, built in Arrow."""
    i = np.asarray(ids, np.int64)
    return pa.table({"id": i, "cust": (i % CUSTOMERS).astype(np.int32), "amount": (i % 997) / 10.0,
                     "_w": np.asarray(weights, np.int64)})


def handed_over(spark, form: str, table: pa.Table):
    """A tick's change to orders in ``form``: "arrow", "rows" ((values, weight) pairs),
    "dataframe" (made from Python rows, with a projection, as user code makes one) or
    "pandas" (a DataFrame made from a pandas one, with the same projection)."""
    if form == "arrow":
        return table
    if form == "pandas":
        df = spark.createDataFrame(table.rename_columns(["id", "cust", "amount", "w"]).to_pandas())
        return df.select("id", "cust", "amount", F.col("w").alias("_w"))
    rows = [(i, c, a, w) for i, c, a, w in zip(*(table.column(n).to_pylist() for n in table.column_names))]
    if form == "rows":
        return [((i, c, a), w) for i, c, a, w in rows]
    df = spark.createDataFrame(rows, "id BIGINT, cust INT, amount DOUBLE, w BIGINT")
    return df.select("id", "cust", "amount", F.col("w").alias("_w"))


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Rows as a plain-text table, columns as wide as their widest cell."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))


def log_plot(path: Path, title: str, xlabel: str, xs: list[int], lines: list[tuple[str, str, list[float]]],
             xscale: str = "log") -> None:
    """Seconds against ``xs``, the seconds' axis log (and ``xs``' unless ``xscale`` says
    otherwise), a line per (label, marker style, seconds); saved at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, style, ys in lines:
        ax.plot(xs, ys, style, label=label)
    ax.set_xscale(xscale)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds (median, log)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def order_changes(orders: int, changes: int, seed: int = 7) -> Iterator[tuple[list[int], list[int]]]:
    """Each tick's change of ``orders`` orders, forever: (ids deleted, ids inserted), up to
    half of ``changes`` deleting orders not deleted yet, the rest new ids after the last."""
    rng = random.Random(seed)
    next_id, deleted = orders, set()
    while True:
        gone = [i for i in {rng.randrange(orders) for _ in range(changes)} if i not in deleted][: changes // 2]
        deleted.update(gone)
        new = list(range(next_id, next_id + changes - len(gone)))
        next_id += len(new)
        yield gone, new


def print_variant(orders: int, label: str, load: float, ticks: list[dict], problem: str | None) -> None:
    """One variant's line of progress: its load, its ticks (after the first, which warms
    caches; with the form each was handed over in, where it has one), its paths."""
    print(f"  {orders:,} orders, {label}: load {load:.1f} s, ticks "
          + ", ".join(f"{s['form'] + ' ' if 'form' in s else ''}{s['tick']:.2f}" for s in ticks[1:])
          + f"; {'equal' if problem is None else 'DIFFERENT: ' + problem}; paths "
          + ", ".join(sorted({s['path'] for s in ticks[1:]})), flush=True)


class SparkWork:
    """Jobs, stages and tasks Spark ran since the last call (from the status tracker)."""

    def __init__(self, spark):
        self.tracker = spark.sparkContext.statusTracker()
        self.seen = set(self.tracker.getJobIdsForGroup())

    def __call__(self) -> tuple[int, int, int]:
        jobs = set(self.tracker.getJobIdsForGroup()) - self.seen
        self.seen |= jobs
        stages = [s for j in jobs if (info := self.tracker.getJobInfo(j)) for s in info.stageIds]
        tasks = sum(info.numTasks for s in stages if (info := self.tracker.getStageInfo(s)))
        return len(jobs), len(stages), tasks


def run(spark, work: Path, orders: int, changes: int, ticks: int, forms: list[str], batch_runs: int) -> dict:
    """One state size: load, ``ticks`` incremental ticks per form, then batch recomputes of the same data."""
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

    changed, rows = order_changes(orders, changes), orders
    tick_times, counts, splits, in_tasks, paths, handed = [], [], [], [], [], []
    spark_work = SparkWork(spark)
    for form in [f for _ in range(ticks) for f in forms]:
        gone, new = next(changed)
        rows += len(new) - len(gone)
        delta = handed_over(spark, form, order_table(gone + new, [-1] * len(gone) + [1] * len(new)))
        handed.append(form)
        spark_work()
        t = time.perf_counter()
        pipe.step({"orders": delta})
        tick_times.append(time.perf_counter() - t)
        counts.append(spark_work())
        splits.append(pipe.last_tick.seconds)
        in_tasks.append(pipe.last_tick.in_tasks)
        paths.append(pipe.last_tick.path if pipe.last_tick.path != "dataframe"
                     else f"dataframe ({pipe.last_tick.why})")

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
    state = sum(f.stat().st_size for f in (work / "state").rglob("*") if f.is_file())
    return {"rows": rows, "load": load, "ticks": tick_times,
            "batch": batch_times, "problem": problem, "counts": counts, "splits": splits, "in_tasks": in_tasks,
            "paths": paths, "forms": handed, "state_mib": state / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", default="1000000,4000000,10000000", help="state sizes, comma separated")
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--ticks", type=int, default=7)
    ap.add_argument("--forms", default="arrow,dataframe,pandas,rows",
                    help="how each tick's change is handed over, in turn: arrow, dataframe, pandas, rows")
    ap.add_argument("--batch-runs", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()

    spark = session("local[2]")
    sizes = [int(x) for x in args.orders.split(",")]
    forms = args.forms.split(",")
    results = []
    for n in sizes:
        work = Path(tempfile.mkdtemp(prefix="bench-"))
        try:
            results.append(run(spark, work, n, args.changes, args.ticks, forms, args.batch_runs))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    header = ["state rows", "form", "load (s)", f"tick, {args.changes} changes: median (s)", "ticks (s)",
              "batch: median (s)", "batch / tick", "jobs / stages / tasks per tick (median)",
              "tick split, median (s)", "task seconds by phase, median", "path", "state (MiB)",
              "equal to batch"]

    def of(r: dict, form: str, what: str) -> list:
        return [x for f, x in zip(r["forms"], r[what]) if f == form]

    def split(r: dict, form: str, what: str = "splits") -> str:
        splits = of(r, form, what)
        keys = next((s for s in splits if s), {})
        return " ".join(f"{k} {statistics.median(s.get(k, 0.0) for s in splits):.3f}" for k in keys) or "-"

    def tick(r: dict, form: str) -> float:
        return statistics.median(of(r, form, "ticks"))

    table = [[f"{r['rows']:,}", form, f"{r['load']:.1f}", f"{tick(r, form):.3f}",
              " ".join(f"{x:.2f}" for x in of(r, form, "ticks")), f"{statistics.median(r['batch']):.2f}",
              f"{statistics.median(r['batch']) / tick(r, form):.1f}x",
              " / ".join(str(int(statistics.median(c[i] for c in of(r, form, "counts")))) for i in range(3)),
              split(r, form), split(r, form, "in_tasks"), ",".join(sorted(set(of(r, form, "paths")))),
              f"{r['state_mib']:.0f}",
              str(r["problem"] is None)]
             for r in results for form in forms]
    print_table(header, table)
    for form in forms:
        if len(results) > 1:
            first, last = results[0], results[-1]
            print(f"{form}: tick({last['rows']:,}) / tick({first['rows']:,}) = "
                  f"{tick(last, form) / tick(first, form):.2f}")
        if form != forms[0]:
            print(f"{form} / {forms[0]} tick: " + ", ".join(
                f"{tick(r, form) / tick(r, forms[0]):.2f} at {r['rows']:,}" for r in results))

    log_plot(Path(args.out) / "join_aggregate.png", "join + aggregate view, local[2]", "rows of state (orders)",
             [r["rows"] for r in results],
             [(f"incremental tick ({args.changes} changes as {form})", "o-", [tick(r, form) for r in results])
              for form in forms]
             + [("batch recompute", "s-", [statistics.median(r["batch"]) for r in results])])
    bad = [r["problem"] for r in results if r["problem"] is not None]
    if bad:
        sys.exit(f"incremental result differs from batch: {bad[0]}")


if __name__ == "__main__":
    main()
