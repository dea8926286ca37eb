"""TPC-H: incremental tick vs Spark batch recompute, per query, in the same run.

    python bench/tpch.py [--sf 1] [--queries 1,3,6] [--ticks 3] [--batch-runs 3] [--forms rows,dataframe]
                         [--placements auto,dataframe] [--refresh 0.001]

For each query: a pipeline with just that view is loaded with the data, then ``--ticks``
refresh ticks per form each insert 0.1% new orders (with their lineitems), delete 0.1% of
the orders (with theirs) and update a few rows of orders, lineitem, customer and
partsupp, handed over in each of ``--forms`` in turn: "rows" ((values, weight) pairs, as
a producer hands them) or "dataframe" (``spark.createDataFrame`` of those rows, as user
code makes one). Each form's median tick time is compared with the median time Spark
takes to run the same query in batch (adaptive execution and code generation on, result
computed in full) over the same final data, whose result the view must equal. With
several ``--placements`` each query runs once per placement ("auto": the driver or, past
100k changed rows, Spark tasks; "dataframe": the DataFrame evaluator, the baseline), each
form labelled with it. Prints a table and saves bench/results/tpch.png.
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

import sqlglot  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from bench.join_aggregate import BATCH_CONF, SparkWork, configure  # noqa: E402
from devkit.tpch import TABLES, Refresh, connect, queries, schemas  # noqa: E402
from dbt_incremental_stream import Pipeline  # noqa: E402
from dbt_incremental_stream.differential import compare  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import TICK_CONF, session  # noqa: E402


def export(con, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for t in TABLES:
        con.execute(f"COPY {t} TO '{directory / t}.parquet' (FORMAT PARQUET)")


def used_tables(sql: str) -> list[str]:
    named = {t.name for t in sqlglot.parse_one(sql, read="spark").find_all(sqlglot.exp.Table)}
    return [t for t in TABLES if t in named]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--queries", default=",".join(str(i) for i in range(1, 23)))
    ap.add_argument("--ticks", type=int, default=3)
    ap.add_argument("--batch-runs", type=int, default=3)
    ap.add_argument("--refresh", type=float, default=0.001, help="share of orders inserted and deleted per tick")
    ap.add_argument("--memory", default="12g", help="Spark driver memory (local mode runs in the driver)")
    ap.add_argument("--forms", default="rows", help="how each tick's changes are handed over: rows,dataframe")
    ap.add_argument("--placements", default="auto", help="the pipelines' placements, each run in turn: auto,dataframe")
    args = ap.parse_args()
    chosen = [int(q) for q in args.queries.split(",")]
    forms = args.forms.split(",")

    work = Path(tempfile.mkdtemp(prefix="tpch-bench-"))
    try:
        t = time.perf_counter()
        con = connect(args.sf)
        sqls, ddl = queries(con), schemas(con)
        refresh = Refresh(con)
        export(con, work / "initial")
        n_orders = con.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
        per_tick = max(1, round(n_orders * args.refresh))
        ticks = [refresh.tick(orders=per_tick, updates=max(1, per_tick // 10))
                 for _ in range(args.ticks * len(forms) + 1)]
        export(con, work / "final")
        changed = statistics.median(sum(len(v) for v in tick.values()) for tick in ticks)
        print(f"TPC-H SF {args.sf}: {n_orders:,} orders; {per_tick:,} orders in and out per tick, "
              f"{changed:,.0f} changed rows per tick (data ready in {time.perf_counter() - t:.0f} s)", flush=True)

        spark = session(app_name="tpch-bench", conf={"spark.driver.memory": args.memory})
        rows = []
        for q in chosen:
            placements = args.placements.split(",")
            rows += run_query(spark, work, q, sqls[q], ddl, ticks, args.batch_runs, forms, placements)
            for r in rows[-len(forms) * len(placements):]:
                print(f"  q{q:02d} {r['form']}: tick {r['tick']:.2f} s, batch {r['batch']:.2f} s, "
                      f"load {r['load']:.1f} s, {r['jobs']:.0f} jobs / {r['stages']:.0f} stages per tick, "
                      f"{r['arrangements']} arrangements, {r['path']}, {'equal' if r['equal'] else 'DIFFERENT'}",
                      flush=True)
        report(rows, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def handed_over(spark, form: str, changes: list, ddl: str):
    """One table's changes ((values, weight) pairs) as ``form`` hands them over."""
    if form == "rows":
        return changes
    return spark.createDataFrame([(*values, w) for values, w in changes], f"{ddl}, _w BIGINT")


def run_query(spark, work: Path, q: int, sql: str, ddl: dict[str, str], ticks: list, batch_runs: int,
              forms: list[str], placements: list[str]) -> list[dict]:
    """One query: per placement its load and its ticks in each form in turn, then its
    batch runs; a result per placement and form."""
    tables = used_tables(sql)
    runs = [(p, *ticked(spark, work, q, sql, ddl, ticks, forms, p)) for p in placements]
    batch_times, want = batch_run(spark, work, sql, tables, batch_runs)
    out = []
    for placement, load, seen, keys, got in runs:
        for form in forms:
            mine = [s for s in seen if s[0] == form]
            times, work_done, splits = [s[1] for s in mine], [s[2] for s in mine], [s[4] for s in mine]
            out.append({"q": q, "form": form if len(placements) == 1 else f"{form}, {placement}",
                        "tick": statistics.median(times), "ticks": times,
                        "batch": statistics.median(batch_times), "load": load, "equal": compare(got, want) is None,
                        "stages": statistics.median(w[1] for w in work_done),
                        "jobs": statistics.median(w[0] for w in work_done), "arrangements": keys,
                        "path": "/".join(sorted({s[3] for s in mine})),
                        "split": {k: statistics.median(s.get(k, 0.0) for s in splits) for k in splits[0]}})
    return out


def ticked(spark, work: Path, q: int, sql: str, ddl: dict[str, str], ticks: list, forms: list[str],
           placement: str) -> tuple[float, list, int | None, list]:
    """A pipeline of the query on ``placement``: its load time, its ticks (form, seconds,
    Spark's work, path, split), its arrangements, its result."""
    tables = used_tables(sql)
    configure(spark, TICK_CONF)
    pipe = Pipeline(spark, str(work / f"state-q{q}"), placement=placement)
    for t in tables:
        pipe.add_source(t, ddl[t])
    pipe.add_view("q", sql)
    start = time.perf_counter()
    pipe.step({t: spark.read.parquet(str(work / "initial" / f"{t}.parquet")).withColumn("_w", F.lit(1))
               for t in tables})
    load = time.perf_counter() - start
    seen: list[tuple[str, float, tuple[int, int, int], str, dict]] = []
    spark_work = SparkWork(spark)
    for i, tick in enumerate(ticks):
        form = forms[(i - 1) % len(forms)]
        deltas = {t: handed_over(spark, form, tick[t], ddl[t]) for t in tables if tick[t]}
        spark_work()
        start = time.perf_counter()
        pipe.step(deltas)
        if i:  # the first tick after loading warms caches
            seen.append((form, time.perf_counter() - start, spark_work(), pipe.last_tick.path,
                         pipe.last_tick.seconds))
    plan = pipe._arranged.plan()
    keys = len(plan.specs) if plan is not None else None
    got = [tuple(r) for r in pipe.snapshot("q").collect()]
    pipe.close()
    shutil.rmtree(work / f"state-q{q}", ignore_errors=True)
    return load, seen, keys, got


def batch_run(spark, work: Path, sql: str, tables: list[str], batch_runs: int) -> tuple[list[float], list]:
    """Spark's batch times of ``sql`` over the final data, and its result."""
    configure(spark, BATCH_CONF)
    batch_times = []
    for _ in range(batch_runs):
        batch = spark.newSession()
        for t in tables:
            batch.read.parquet(str(work / "final" / f"{t}.parquet")).createOrReplaceTempView(t)
        start = time.perf_counter()
        batch.sql(sql).write.format("noop").mode("overwrite").save()
        batch_times.append(time.perf_counter() - start)
    return batch_times, [tuple(r) for r in batch.sql(sql).collect()]


def report(rows: list[dict], args: argparse.Namespace) -> None:
    print("\n| query | form | tick median (s) | batch median (s) | batch/tick | Spark jobs / stages per tick | "
          "arrangements | tick split (s) | path | equal |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        split = ", ".join(f"{k} {v:.2f}" for k, v in r["split"].items())
        print(f"| q{r['q']:02d} | {r['form']} | {r['tick']:.2f} | {r['batch']:.2f} | {r['batch'] / r['tick']:.2f}x | "
              f"{r['jobs']:.0f} / {r['stages']:.0f} | {r['arrangements']} | {split} | {r['path']} | "
              f"{'yes' if r['equal'] else 'NO'} |")
    forms = list(dict.fromkeys(r["form"] for r in rows))
    for form in forms:
        mine = [r for r in rows if r["form"] == form]
        ratios = [r["batch"] / r["tick"] for r in mine]
        print(f"\n{form}: median batch/tick over {len(mine)} queries: {statistics.median(ratios):.2f}x "
              f"(goal: at least 5x, none below 1x); ticks {statistics.median(r['tick'] for r in mine):.2f} s, "
              f"batch {statistics.median(r['batch'] for r in mine):.2f} s median")
    if len(forms) > 1:
        by = {(r["q"], r["form"]): r["tick"] for r in rows}
        ratios = [by[q, forms[1]] / by[q, forms[0]] for q in dict.fromkeys(r["q"] for r in rows)]
        print(f"{forms[1]} / {forms[0]} tick, median over queries: {statistics.median(ratios):.2f} "
              f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    fig, ax = plt.subplots(figsize=(11, 4))
    first = [r for r in rows if r["form"] == forms[0]]
    xs, width = range(len(first)), 0.8 / (len(forms) + 1)
    ax.bar([x for x in xs], [r["batch"] for r in first], width, label="Spark batch recompute")
    for i, form in enumerate(forms, 1):
        ax.bar([x + i * width for x in xs], [r["tick"] for r in rows if r["form"] == form], width,
               label=f"incremental tick ({form})")
    ax.set_xticks([x + width * len(forms) / 2 for x in xs], [f"q{r['q']}" for r in first])
    ax.set_yscale("log")  # a tick is 10-100x below batch: on a linear axis it sits on zero
    ax.set_ylabel("seconds (log)")
    ax.set_title(f"TPC-H SF {args.sf}, {args.refresh:.1%} refresh per tick")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "tpch.png", dpi=80)
    print(f"plot: {out / 'tpch.png'}")


if __name__ == "__main__":
    main()
