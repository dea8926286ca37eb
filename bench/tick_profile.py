"""Where a served tick of the shop project goes: the demo's workload, ticked in this process.

    python bench/tick_profile.py [--ticks 20] [--orders 15] [--history 200] [--profile 20]

Starts a local broker, ``dbt build``s examples/shop in a temporary copy (as ``make demo``
does, after ``--history`` orders), then opens the deployed project the way ``dbt-stream
serve`` does and runs ``--ticks`` ticks, each after sending ``--orders`` orders (with their
payments, customer and product changes). Prints, per tick and as medians: the tick's time
split (read: Kafka ranges and decoding; spark / driver / write: the pipeline; outputs:
sink, changelogs; commit; publish: catalog views) and the Spark jobs and stages it ran.
``--profile N`` adds the N functions with the most cumulative time over all ticks
(cProfile); ``--fresh`` opens the project anew before each tick, as each ``dbt run`` does.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.join_aggregate import SparkWork  # noqa: E402
from dbt_incremental_stream.connectors.broker import LocalBroker  # noqa: E402
from devkit.kafka import create_topics  # noqa: E402
from examples.demo import SINK, Feed  # noqa: E402
from devkit.shop import TOPICS  # noqa: E402

BIN = Path(sys.executable).parent
PARTS = ("read", "spark", "driver", "write", "outputs", "commit", "publish")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--orders", type=int, default=15, help="orders sent before each tick (the demo: 15)")
    parser.add_argument("--history", type=int, default=200,
                        help="orders sent before the build: the state a long-served project has (5,000 ticks: 100,000)")
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions by cumulative time")
    parser.add_argument("--fresh", action="store_true",
                        help="open the project anew before each tick, as each `dbt run` does")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tick-profile-"))
    project_dir = work / "shop"
    shutil.copytree(ROOT / "examples" / "shop", project_dir, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    with LocalBroker() as bootstrap:
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
        create_topics(bootstrap, *TOPICS, SINK)
        feed = Feed(bootstrap)
        feed.send(orders=args.orders, rounds=max(1, args.history // args.orders))  # as served: in rounds
        if subprocess.run([str(BIN / "dbt"), "build", "--quiet"], cwd=project_dir).returncode != 0:
            return 1
        from dbt.adapters.incremental_stream.serve import credentials

        from dbt_incremental_stream.project import Project
        from dbt_incremental_stream.runtime.spark.session import session

        creds = credentials(project_dir, None, None)
        os.chdir(project_dir)
        spark = session(creds.master, {**creds.server_side_parameters, **creds.spark_conf}, hive=True)
        project = Project(spark, creds.state_path(project_dir), kafka=creds.kafka_settings,
                          max_records=creds.max_records_per_tick)
        work_done = SparkWork(spark)
        profiler = cProfile.Profile()
        rows = []
        print(f"{'tick':>5} {'path':>10} {'total':>6} " + " ".join(f"{p:>7}" for p in PARTS) + "   jobs stages")
        for i in range(args.ticks + 1):
            feed.send(orders=args.orders)
            time.sleep(0.2)  # the records are in the log
            work_done()
            if args.fresh and i:
                project.close()
                project = Project(spark, creds.state_path(project_dir), kafka=creds.kafka_settings,
                                  max_records=creds.max_records_per_tick)
            project.new_frontier()
            if i:
                profiler.enable()
            started = time.perf_counter()
            project.advance()
            seconds = time.perf_counter() - started
            if i:
                profiler.disable()
            jobs, stages, _ = work_done()
            report, path = project.last, project.pipe.last_tick.path
            if not i:  # the first tick warms caches
                continue
            rows.append((seconds, report.split, jobs, stages, path))
            print(f"{report.tick:>5} {path:>10} {seconds:6.2f} "
                  + " ".join(f"{report.split.get(p, 0.0):7.3f}" for p in PARTS) + f"   {jobs:>4} {stages:>6}")
        print(f"{'p50':>5} {'':>10} {statistics.median(r[0] for r in rows):6.2f} "
              + " ".join(f"{statistics.median(r[1].get(p, 0.0) for r in rows):7.3f}" for p in PARTS)
              + f"   {statistics.median(r[2] for r in rows):>4} {statistics.median(r[3] for r in rows):>6}")
        if args.profile:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
        project.close()
        spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
