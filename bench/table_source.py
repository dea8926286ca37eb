"""A dbt project over a large Parquet table source: `dbt run` of a streaming model after a
small change to the table, against rebuilding the same model as a dbt `table`.

    python bench/table_source.py [--orders 5000000] [--change 0.001] [--table-runs 2] [--stream-runs 3]

The table source ``raw.orders`` (``--orders`` rows, Parquet, as a dbt seed, an ingestion
job or ``INSERT INTO`` leaves one) joins ``raw.customers`` (10,000 rows) and is aggregated
per region, once as a ``streaming_view`` and once as a ``table`` (the baseline: what
`dbt run` of the batch model costs). In one process and one Spark session (``dbtRunner``),
it times the first `dbt run` of each model, then, after each change, `dbt run` of the
streaming model and of the table model, and checks they are equal:

- **append**: ``--change`` of the rows added as one new file (``INSERT INTO``-like), then
  `dbt run` of the streaming model, ``--stream-runs`` times (the median reported); the
  streaming run reads the new file alone. Each run takes up the project the last one set
  down (runs in one process); one more run opens it anew, as a run in a new process does;
- **rewrite**: the table rewritten whole with ``--change`` of its rows changed (deleted and
  inserted anew with another amount); the streaming run compares the table whole (in the
  driver when its Parquet files are local and small enough, else by Spark).

Each run is reported as the whole `dbt run` and as dbt's own execution time of the model
(run_results). Prints a table and saves bench/results/table_source.png.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dbt.cli.main import dbtRunner  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from dbt_incremental_stream.differential import compare  # noqa: E402
from dbt_incremental_stream.project.project import close_set_down  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import session  # noqa: E402

CUSTOMERS = 10_000
MODEL = """SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS revenue, AVG(o.amount) AS avg_amount
FROM {{ source('raw', 'orders') }} o JOIN {{ source('raw', 'customers') }} c ON o.cust = c.id
GROUP BY c.region
"""
PROFILE = """bench:
  target: dev
  outputs:
    dev:
      type: incremental_stream
      schema: bench
      master: "local[2]"
      state_location: stream_state
      threads: 1
      spark_conf:
        spark.sql.shuffle.partitions: "2"
"""
PROJECT = """name: bench
version: "1.0"
config-version: 2
profile: bench
model-paths: ["models"]
"""
SOURCES = """version: 2
sources:
  - name: raw
    schema: raw
    tables:
      - name: orders
      - name: customers
"""


def project(root: Path) -> None:
    (root / "models").mkdir(parents=True)
    (root / "profiles.yml").write_text(PROFILE)
    (root / "dbt_project.yml").write_text(PROJECT)
    (root / "models" / "sources.yml").write_text(SOURCES)
    (root / "models" / "revenue_stream.sql").write_text("{{ config(materialized='streaming_view') }}\n" + MODEL)
    (root / "models" / "revenue_table.sql").write_text("{{ config(materialized='table') }}\n" + MODEL)


def dbt(root: Path, model: str) -> tuple[float, float]:
    """`dbt run` of one model: (the whole invocation, dbt's execution time of the model)."""
    start = time.perf_counter()
    res = dbtRunner().invoke(["run", "-s", model, "--project-dir", str(root), "--profiles-dir", str(root), "--quiet"])
    whole = time.perf_counter() - start
    if not res.success:
        raise SystemExit(f"dbt run -s {model} failed: {res.exception or res.result}")
    return whole, float(res.result.results[0].execution_time)


def orders(ids):
    return ids.select(F.col("id").cast("bigint").alias("id"), (F.col("id") % CUSTOMERS).cast("int").alias("cust"),
                      (F.col("id") % 997 / 10.0).cast("double").alias("amount"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=5_000_000)
    ap.add_argument("--change", type=float, default=0.001)
    ap.add_argument("--table-runs", type=int, default=2)
    ap.add_argument("--stream-runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-table-"))
    os.chdir(work)  # the metastore and warehouse go here
    root = work / "project"
    project(root)
    spark = session("local[2]", {"spark.sql.shuffle.partitions": "2"}, hive=True)
    spark.sql("CREATE DATABASE IF NOT EXISTS raw")
    orders(spark.range(args.orders)).write.format("parquet").saveAsTable("raw.orders")
    spark.range(CUSTOMERS).select(F.col("id").cast("int").alias("id"),
                                  F.concat(F.lit("r"), (F.col("id") % 50).cast("string")).alias("region")
                                  ).write.format("parquet").saveAsTable("raw.customers")
    changed = max(1, int(args.orders * args.change))
    rows: list[tuple[str, str, tuple[float, float]]] = []
    rows.append(("first build", "streaming", dbt(root, "revenue_stream")))
    rows.append(("first build", "table", dbt(root, "revenue_table")))

    def append() -> None:
        nonlocal end
        orders(spark.range(end, end + changed)).coalesce(1).write.mode("append").saveAsTable("raw.orders")
        end += changed

    def median(runs: list[tuple[float, float]]) -> tuple[float, float]:
        return statistics.median(t[0] for t in runs), statistics.median(t[1] for t in runs)

    def compare_runs(change: str, streaming: Callable[[], tuple[float, float]], runs: int = 1) -> None:
        rows.append((change, "streaming" + (" (median)" if runs > 1 else ""), median([streaming()
                                                                                    for _ in range(runs)])))
        table = [dbt(root, "revenue_table") for _ in range(args.table_runs)]
        rows.append((change, "table (median)", median(table)))
        problem = compare([tuple(r) for r in spark.table("bench.revenue_stream").collect()],
                          [tuple(r) for r in spark.table("bench.revenue_table").collect()])
        if problem:
            raise SystemExit(f"{change}: streaming and table differ: {problem}")

    end = args.orders

    def appended() -> tuple[float, float]:
        append()
        return dbt(root, "revenue_stream")

    def appended_anew() -> tuple[float, float]:
        close_set_down()  # as in a new process: the project is opened, its circuit defined
        return appended()

    compare_runs(f"append {changed:,} rows as a new file", appended, args.stream_runs)
    compare_runs(f"append {changed:,} rows as a new file, project opened anew", appended_anew)
    whole = spark.table("raw.orders")
    step = max(1, args.orders // changed)
    rewritten = whole.select("id", "cust", F.when(F.col("id") % step == 0, F.col("amount") + 1.0)
                             .otherwise(F.col("amount")).alias("amount"))
    rewritten.write.format("parquet").saveAsTable("raw.orders_next")
    spark.sql("DROP TABLE raw.orders")
    spark.sql("ALTER TABLE raw.orders_next RENAME TO raw.orders")
    compare_runs(f"rewrite with {changed:,} rows changed", lambda: dbt(root, "revenue_stream"))

    print(f"\n{args.orders:,} orders in a Parquet table source; every streaming result equal to the table's\n")
    print("| change | model | dbt run (s) | model execution (s) | table / streaming (dbt run) | "
          "table / streaming (execution) |")
    print("|---|---|---|---|---|---|")
    for i, (change, model, (whole_s, model_s)) in enumerate(rows):
        ratio = ""
        if model.startswith("table"):
            stream = rows[i - 1][2]
            ratio = f"{whole_s / stream[0]:.1f}x | {model_s / stream[1]:.1f}x"
        else:
            ratio = " | "
        print(f"| {change} | {model} | {whole_s:.2f} | {model_s:.2f} | {ratio} |")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    Path(args.out).mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(9, 3.5))
    labels = [f"{c}: {m}" for c, m, _ in rows]
    ax.barh(labels[::-1], [t[0] for _, _, t in rows][::-1])
    ax.set_xlabel("dbt run (s)")
    ax.set_title(f"{args.orders:,}-row Parquet table source")
    fig.tight_layout()
    fig.savefig(Path(args.out) / "table_source.png")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
