"""State size on disk and peak memory per 1M input rows, for the main query shapes.

    python bench/memory.py [--rows 1000000] [--per-tick 200000] [--shapes filter,aggregate,...]

Each shape runs in a fresh process (so peaks do not carry over): a Spark session
(``local[2]``, the engine's defaults: heap sized from the machine), a pipeline with that one view
over ``events`` (``--rows`` rows fed in ticks of ``--per-tick``; 10,000 keys, 20
categories) and ``dim`` (10,000 rows, 50 regions), then one more tick of 1,000 changes.
Measured: the state directory's size after the last tick (everything a restart needs),
the peak resident memory of the whole process tree (the Python driver, the JVM and its
Python workers, sampled every 100 ms) and the same at idle, after the session started.
Linux only (reads /proc). Prints a table and saves bench/results/memory.png.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SHAPES = {
    "filter + project": "SELECT id, amount * 2 AS doubled FROM events WHERE amount > 50",
    "aggregate (10k groups)": "SELECT key, COUNT(*) AS n, SUM(amount) AS total, MAX(amount) AS top FROM events "
                              "GROUP BY key",
    "join (with a 10k-row table)": "SELECT e.id, e.amount, d.region FROM events e JOIN dim d ON e.key = d.id",
    "join + aggregate": "SELECT d.region, COUNT(*) AS n, SUM(e.amount) AS total FROM events e JOIN dim d "
                        "ON e.key = d.id GROUP BY d.region",
    "count distinct": "SELECT category, COUNT(DISTINCT key) AS keys FROM events GROUP BY category",
    "top 3 per key (window)": "SELECT key, id, amount FROM (SELECT key, id, amount, ROW_NUMBER() OVER "
                              "(PARTITION BY key ORDER BY amount DESC, id) AS rn FROM events) WHERE rn <= 3",
}
KEYS, CATEGORIES, REGIONS = 10_000, 20, 50
PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            statm = Path(f"/proc/{entry}/statm").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = int(statm.split()[1]) * PAGE
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


class Peak(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.running = 0, True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, tree_rss(os.getpid()))
            time.sleep(0.1)


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def child(shape: str, rows: int, per_tick: int) -> dict:
    """One shape, in this process."""
    from pyspark.sql import functions as F

    from dbt_incremental_stream import Pipeline
    from dbt_incremental_stream.runtime.spark.session import session

    work = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    spark = session("local[2]", {"spark.sql.warehouse.dir": str(work / "warehouse")})
    spark.range(1).count()
    idle = tree_rss(os.getpid())
    sampler = Peak()
    sampler.start()
    pipe = Pipeline(spark, str(work / "state"))
    pipe.add_source("events", "id BIGINT, key BIGINT, category STRING, amount DOUBLE")
    pipe.add_source("dim", "id BIGINT, region STRING")
    pipe.add_view("v", SHAPES[shape])

    def events(ids):
        return ids.select(F.col("id"), (F.col("id") * 7919 % KEYS).alias("key"),
                          F.concat(F.lit("c"), (F.col("id") % CATEGORIES).cast("string")).alias("category"),
                          ((F.col("id") * 31 % 1000) / 10.0).alias("amount"), F.lit(1).cast("bigint").alias("_w"))

    started = time.perf_counter()
    pipe.step({"dim": spark.range(KEYS).select("id", F.concat(F.lit("r"), (F.col("id") % REGIONS).cast("string"))
                                                .alias("region"), F.lit(1).cast("bigint").alias("_w"))})
    for first in range(0, rows, per_tick):
        pipe.step({"events": events(spark.range(first, min(rows, first + per_tick)))})
    load = time.perf_counter() - started
    removed = events(spark.range(0, 500)).withColumn("_w", F.lit(-1).cast("bigint"))
    pipe.step({"events": removed.unionByName(events(spark.range(rows, rows + 500)))})
    out_rows = pipe.snapshot("v").count()
    sampler.running = False
    sampler.join()
    result = {"shape": shape, "rows": rows, "state_bytes": du(work / "state"), "peak": sampler.peak, "idle": idle,
              "load_seconds": load, "out_rows": out_rows}
    pipe.close()
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-tick", type=int, default=200_000)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rows, args.per_tick)))
        return
    results = []
    for shape in args.shapes.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", shape, "--rows", str(args.rows),
                              "--per-tick", str(args.per_tick)], check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
        r = results[-1]
        print(f"  {shape}: state {r['state_bytes'] / 2**20:.1f} MiB, peak {r['peak'] / 2**20:.0f} MiB", file=sys.stderr)
    scale = 1_000_000 / args.rows
    from dbt_incremental_stream.runtime.spark.session import local_driver_memory

    heap = local_driver_memory("local[2]") or "1g"
    print(f"\n{args.rows:,} input rows in ticks of {args.per_tick:,}, then a tick of 1,000 changes; local[2], "
          f"driver heap {heap}; per 1M input rows\n")
    print("| shape | state on disk (MiB) | peak RSS, all processes (MiB) | idle RSS (MiB) | peak above idle (MiB) "
          "| load (s) | view rows |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['shape']} | {r['state_bytes'] * scale / 2**20:.1f} | {r['peak'] / 2**20:,.0f} | "
              f"{r['idle'] / 2**20:,.0f} | {(r['peak'] - r['idle']) / 2**20:,.0f} | {r['load_seconds']:.1f} | "
              f"{r['out_rows']:,} |")
    plot(results, scale)


def plot(results: list[dict], scale: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.5), sharey=True)
    names = [r["shape"] for r in results]
    a.barh(names, [r["state_bytes"] * scale / 2**20 for r in results])
    a.set_xlabel("state on disk per 1M rows (MiB)")
    b.barh(names, [(r["peak"] - r["idle"]) / 2**20 for r in results], color="tab:orange")
    b.set_xlabel("peak RSS above idle (MiB)")
    fig.tight_layout()
    out = HERE / "results" / "memory.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"\nsaved {out}")


if __name__ == "__main__":
    main()
