"""TPC-DS's 99 queries as views in one pipeline: refresh ticks on the fact tables, each view against Spark batch.

    python bench/tpcds.py [--sf 0.1] [--ticks 3] [--per-tick 100] [--queries 1,2,3]

DuckDB's dsdgen makes the data (``devkit/tpcds.py``); 2% of each fact table's rows are held
back. One pipeline holds every source and every query as a view (a project of that size
runs them together). The first tick loads the data. Each refresh tick then inserts
``--per-tick`` held-back rows into each of the seven fact tables and deletes as many
current ones. After every tick each view is compared with Spark's batch answer over the
same data (the twin harness's exact comparison, :class:`.Twin`).

Per tick: the tick's time (the pipeline's step), Spark's jobs / stages / tasks, the path
(``arranged``: on arrangements in the driver), and Spark batch of all the views over the
same data (the baseline, as a ratio: batch / tick). Batch runs each view's SQL over the
sources as in-memory tables (no scan of files), so the ratio is a floor. Also the
process's peak memory maps, threads, open files and RSS. Prints a table and saves
bench/plots/tpcds.png.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.join_aggregate import SparkWork, log_plot, print_table  # noqa: E402
from dbt_incremental_stream.differential import Mismatch, Twin  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import session  # noqa: E402
from devkit import tpcds  # noqa: E402


def resources() -> dict[str, int]:
    """This process's memory maps, threads, open files, and peak RSS in MiB."""
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    return {"maps": maps, "threads": threading.active_count(), "files": len(os.listdir("/proc/self/fd")),
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=0.1)
    parser.add_argument("--ticks", type=int, default=3)
    parser.add_argument("--per-tick", type=int, default=100)
    parser.add_argument("--queries", default="", help="query numbers (default: all 99)")
    args = parser.parse_args()
    con = tpcds.connect(args.sf)
    every = tpcds.queries(con)
    chosen = [int(n) for n in args.queries.split(",")] if args.queries else sorted(every)
    views = {f"q{n:02d}": every[n] for n in chosen}
    schemas = tpcds.schemas(con)
    refresh = tpcds.Refresh(con)
    work = Path(tempfile.mkdtemp(prefix="tpcds-"))
    spark = session("local[2]", {"spark.sql.warehouse.dir": str(work / "warehouse")})
    ticks: list[dict] = []
    peak = {"maps": 0, "threads": 0, "files": 0, "rss_mib": 0}
    try:
        twin = Twin(spark, str(work / "twin"), schemas, views, placements=("auto",))
        pipe = twin.pipelines["auto"]
        spark_work = SparkWork(spark)
        unequal: dict[str, str] = {}
        for tick in range(args.ticks + 1):
            if tick == 0:
                changes = {t: [(r, 1) for r in refresh.rows(t)[1]] for t in schemas}
            else:
                changes = refresh.tick(args.per_tick)
            spark_work()
            started = time.perf_counter()
            try:
                twin.step(changes, check=False)
            except Mismatch as e:  # a crash of the step: reported with the views, the twin steps on
                unequal.setdefault("(crash)", f"tick {tick}: {str(e)[:500]}")
            seconds = time.perf_counter() - started
            work_done = spark_work()
            last = pipe.last_tick
            for finding in twin.check():
                unequal.setdefault(finding.view or "(crash)", f"tick {tick}: {finding}")
            started = time.perf_counter()
            twin.oracle.answers(list(views))  # the views over the sources, built by the check: the queries alone
            batch = time.perf_counter() - started
            ticks.append({"tick": tick, "seconds": seconds, "work": work_done, "batch": batch,
                          "path": last.path if last else "?", "why": last.why if last else None,
                          "rows": sum(len(c) for c in changes.values())})
            for k, v in resources().items():
                peak[k] = max(peak[k], v)
            print(f"  tick {tick}: {seconds:.2f} s ({ticks[-1]['path']}), batch {batch:.2f} s", file=sys.stderr)
        rejected = dict(twin.rejected)
        failed = dict(pipe.failed)
        twin.close()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    accepted = [v for v in views if v not in rejected]
    equal = [v for v in accepted if v not in unequal]
    print(f"\nTPC-DS at scale {args.sf}, {len(views)} queries in one pipeline, {args.per_tick} rows inserted and "
          f"as many deleted per fact table a tick, local[2]\n")
    print(f"accepted: {len(accepted)} of {len(views)}; equal to Spark batch after every tick: {len(equal)}")
    for v, why in rejected.items():
        print(f"  refused {v}: {why}")
    for v, why in unequal.items():
        print(f"  not equal {v}: {why[:300]}")
    for v, why in failed.items():
        print(f"  set aside {v}: {why[:300]}")
    rows = [[str(t["tick"]), f"{t['rows']:,}", f"{t['seconds']:.2f} s", "/".join(map(str, t["work"])), t["path"],
             f"{t['batch']:.2f} s", f"{t['batch'] / t['seconds']:.1f}x"] for t in ticks]
    print()
    print_table(["tick", "rows changed", "tick", "jobs/stages/tasks", "path", "batch, all views", "batch / tick"], rows)
    print(f"\npeak: {peak['maps']:,} memory maps, {peak['threads']} threads, {peak['files']} open files, "
          f"{peak['rss_mib']:,} MiB RSS (the Python process)")
    for t in ticks:
        if t["why"]:
            print(f"  tick {t['tick']} not in the driver: {t['why'][:300]}")
    plot(ticks)


def plot(ticks: list[dict]) -> None:
    refresh = [t for t in ticks if t["tick"]]
    log_plot(Path(__file__).resolve().parent / "plots" / "tpcds.png", "TPC-DS, 99 views in one pipeline", "tick",
             [t["tick"] for t in refresh], [("refresh tick, all views", "o-", [t["seconds"] for t in refresh]),
                                            ("Spark batch, all views", "s--", [t["batch"] for t in refresh])],
             xscale="linear")


if __name__ == "__main__":
    main()
