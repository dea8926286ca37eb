"""Many small ticks in a row over large state, and an arrangement that grows from empty.

    python bench/long_run.py [--orders 10000000] [--changes 1000] [--ticks 500] [--grow 10000000]

Part 1: the join + aggregate view of ``join_aggregate.py`` over ``--orders`` rows, then
``--ticks`` ticks in a row of ``--changes`` changed orders each (half deletes, half
inserts, as Arrow), back to back. A tick that also merges runs in its commit stands out:
the table gives p50, p90, p99 and the slowest tick, the tick split of the slowest, and
the issue's bound p99 / p50 <= 2. Part 2: the same pipeline started on no orders, then fed
``--grow`` orders in ticks of 1M (Spark tasks): how many buckets the orders' arrangements
end with (an arrangement created empty starts with one). Saves bench/results/long_run.png.
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pyspark.sql import functions as F  # noqa: E402

from join_aggregate import CUSTOMERS, VIEW, SparkWork, configure, order_rows, order_table  # noqa: E402
from dbt_incremental_stream import Pipeline  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import TICK_CONF, session  # noqa: E402


def pipeline(spark, work: Path) -> Pipeline:
    pipe = Pipeline(spark, str(work / "state"))
    pipe.add_source("orders", "id BIGINT, cust INT, amount DOUBLE")
    pipe.add_source("customers", "id INT, region STRING")
    pipe.add_view("revenue", VIEW)
    configure(spark, TICK_CONF)
    return pipe


def customers(spark):
    return spark.range(CUSTOMERS).select(F.col("id").cast("int").alias("id"),
                                         F.concat(F.lit("r"), (F.col("id") % 50).cast("string")).alias("region"),
                                         F.lit(1).alias("_w"))


def buckets(pipe: Pipeline) -> dict[str, int]:
    """The orders' arrangements: buckets by key."""
    node = pipe.circuit.source_state("orders").id
    return {",".join(k): len(a.runs) for k, a in pipe.store.arrangements.get(node, {}).items()}


def long_run(spark, work: Path, orders: int, changes: int, ticks: int) -> dict:
    pipe = pipeline(spark, work)
    t = time.perf_counter()
    pipe.step({"orders": order_rows(spark, spark.range(orders)).withColumn("_w", F.lit(1)),
               "customers": customers(spark)})
    load = time.perf_counter() - t
    rng = random.Random(7)
    next_id, deleted = orders, set()
    times, splits, counts, paths = [], [], [], []
    work_done = SparkWork(spark)
    for _ in range(ticks):
        gone = [i for i in {rng.randrange(orders) for _ in range(changes)} if i not in deleted][: changes // 2]
        deleted.update(gone)
        new = list(range(next_id, next_id + changes - len(gone)))
        next_id += len(new)
        delta = order_table(gone + new, [-1] * len(gone) + [1] * len(new))
        work_done()
        t = time.perf_counter()
        pipe.step({"orders": delta})
        times.append(time.perf_counter() - t)
        splits.append(pipe.last_tick.seconds)
        paths.append(pipe.last_tick.path)
        counts.append(work_done())
    pipe.store.settle()  # the merges running beside the ticks
    out = {"load": load, "times": times, "splits": splits, "paths": paths, "counts": counts,
           "buckets": buckets(pipe)}
    pipe.close()
    return out


def grow(spark, work: Path, total: int, step: int = 1_000_000) -> dict:
    pipe = pipeline(spark, work)
    empty = order_rows(spark, spark.range(0)).withColumn("_w", F.lit(1))
    pipe.step({"orders": empty, "customers": customers(spark)})
    start = buckets(pipe)
    times = []
    for lo in range(0, total, step):
        ids = list(range(lo, min(total, lo + step)))
        t = time.perf_counter()
        pipe.step({"orders": order_table(ids, [1] * len(ids))})
        times.append(time.perf_counter() - t)
    path = pipe.last_tick.path
    pipe.store.settle()
    pipe.step({"orders": order_table([], [])})  # a tick that folds in what the merges made
    out = {"start": start, "end": buckets(pipe), "times": times, "path": path}
    pipe.close()
    return out


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=10_000_000)
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--ticks", type=int, default=500)
    ap.add_argument("--grow", type=int, default=10_000_000, help="orders fed from empty (0: skip)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    spark = session("local[2]")
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        r = long_run(spark, work / "long", args.orders, args.changes, args.ticks)
        g = grow(spark, work / "grow", args.grow) if args.grow else None
    finally:
        shutil.rmtree(work, ignore_errors=True)

    times = r["times"]
    p50, p90, p99 = (pct(times, p) for p in (50, 90, 99))
    slowest = max(range(len(times)), key=times.__getitem__)
    print(f"load of {args.orders:,} orders: {r['load']:.1f} s; {args.ticks} ticks of {args.changes} changes")
    print("p50 (s) | p90 (s) | p99 (s) | max (s) | p99 / p50 | slowest tick's split (s) | jobs/stages/tasks "
          "(max) | paths | buckets")
    print(f"{p50:.3f} | {p90:.3f} | {p99:.3f} | {times[slowest]:.3f} | {p99 / p50:.2f} | "
          + " ".join(f"{k} {v:.3f}" for k, v in r["splits"][slowest].items())
          + f" | {' / '.join(str(max(c[i] for c in r['counts'])) for i in range(3))}"
          + f" | {','.join(sorted(set(r['paths'])))} | {r['buckets']}")
    commits = [s.get("commit", 0.0) for s in r["splits"]]
    print(f"commit: p50 {pct(commits, 50):.3f} s, p99 {pct(commits, 99):.3f} s, max {max(commits):.3f} s")
    if g is not None:
        print(f"grown from empty to {args.grow:,} orders in ticks of 1M ({g['path']}): buckets {g['start']} -> "
              f"{g['end']}; ticks (s) " + " ".join(f"{t:.1f}" for t in g["times"]))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    Path(args.out).mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(range(1, len(times) + 1), times, lw=0.8, label="tick")
    ax.plot(range(1, len(times) + 1), commits, lw=0.8, label="commit")
    ax.axhline(p50, color="grey", ls="--", lw=0.8, label=f"p50 {p50:.3f} s")
    ax.axhline(p99, color="red", ls="--", lw=0.8, label=f"p99 {p99:.3f} s")
    ax.set_xlabel("tick")
    ax.set_ylabel("seconds")
    ax.set_title(f"{args.ticks} ticks of {args.changes} changes over {args.orders:,} orders")
    ax.legend()
    fig.tight_layout()
    fig.savefig(Path(args.out) / "long_run.png")


if __name__ == "__main__":
    main()
