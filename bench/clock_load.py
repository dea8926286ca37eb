"""A project reading the time: its first build, a large catch-up tick and small ticks,
on arrangements against the DataFrame evaluator, in one run.

    python bench/clock_load.py [--events 2000000] [--catchup 1500000] [--ticks 5] [--changes 1000]
                               [--placements auto,dataframe]

The source ``events`` (declared ``expire``) holds ``--events`` events stamped over the
last two days; five views read the time through temporal filters: the last hour's events,
a per-user count and sum over the last 30 minutes, a per-user count over the last day, a
global count over the last 15 minutes and a per-user count and sum of the calendar day
(``CAST(ts AS DATE) = current_date()``). The first tick loads every event (rows below
every window never get stored); the next one comes an hour later with ``--catchup``
events (a consumer catching up after a stop: too many for the driver, so in Spark tasks
on arrangements), and rows leave the state as the windows move; then ``--ticks`` ticks,
a minute apart, of ``--changes`` new events and a tenth as many deletes. Once per
``--placements``, each in a state location of its own: ``auto`` (on arrangements, in the
driver or in tasks by size) and ``dataframe`` (every tick by the DataFrame evaluator,
which first builds of projects reading the time took before). Per phase: seconds, the
path and Spark's jobs / stages / tasks; at the end every view is checked against the
same SQL run by Spark in batch over every event, the time a literal. Prints a table and
saves bench/results/clock_load.png.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from join_aggregate import SparkWork, log_plot, print_table  # noqa: E402

VIEWS = {
    "last_hour": "SELECT id, u, v FROM events WHERE ts > current_timestamp() - INTERVAL 1 HOUR",
    "recent": "SELECT u, COUNT(*) AS n, SUM(v) AS s FROM events "
              "WHERE ts BETWEEN now() - INTERVAL 30 MINUTES AND now() GROUP BY u",
    "today": "SELECT u, COUNT(*) AS n FROM events WHERE ts >= now() - INTERVAL 1 DAY GROUP BY u",
    "quarter": "SELECT COUNT(*) AS n, MAX(v) AS top FROM events WHERE ts > now() - INTERVAL 15 MINUTES",
    "calendar_day": "SELECT u, COUNT(*) AS n, SUM(v) AS s FROM events WHERE CAST(ts AS DATE) = current_date() "
                    "GROUP BY u",
}
USERS = 50_000
T0 = datetime(2026, 3, 2, 12, 0)


def events(spark, first: int, count: int, end: datetime, span: timedelta, weight: int = 1):
    """``count`` events with ids from ``first``, stamped evenly over ``span`` up to ``end``
    (values a function of the id)."""
    from pyspark.sql import functions as F

    step = span.total_seconds() * 1e6 / max(count, 1)
    start = (end - span - datetime(1970, 1, 1)).total_seconds() * 1e6
    ids = spark.range(first, first + count)
    micros = (F.lit(start) + (F.col("id") - first) * F.lit(step)).cast("bigint")
    return ids.select(F.col("id"), F.timestamp_micros(micros).alias("ts"),
                      (F.col("id") * 7919 % USERS).cast("int").alias("u"), (F.col("id") % 97).alias("v"),
                      F.lit(weight).cast("bigint").alias("_w"))


def run(spark, work: Path, placement: str, args: argparse.Namespace) -> dict:
    """The phases with the pipeline's ``placement``; what was measured, and the batch check."""
    from pyspark.sql import functions as F

    from dbt_incremental_stream import Pipeline
    from dbt_incremental_stream.differential import compare

    pipe = Pipeline(spark, str(work / "state"), placement=placement)
    pipe.add_source("events", "id BIGINT, ts TIMESTAMP, u INT, v BIGINT", expire=True)
    for name, sql in VIEWS.items():
        pipe.add_view(name, sql)
    spark_work = SparkWork(spark)
    phases: list[tuple[str, float, str, tuple[int, int, int]]] = []
    fed = []  # every tick's events, for the batch answer

    def step(what: str, delta, now: datetime) -> None:
        fed.append(delta)
        spark_work()
        t = time.perf_counter()
        pipe.step({"events": delta}, now=now)
        took = time.perf_counter() - t
        why = f" ({pipe.last_tick.why})" if pipe.last_tick.why and placement != "dataframe" else ""
        phases.append((what, took, pipe.last_tick.path + why, spark_work()))

    step("first build", events(spark, 0, args.events, T0, timedelta(days=2)), T0)
    now = T0 + timedelta(hours=1)
    step("catch-up tick", events(spark, args.events, args.catchup, now, timedelta(hours=1)), now)
    next_id = args.events + args.catchup
    last = fed[-1]
    for _ in range(args.ticks):
        now += timedelta(minutes=1)
        gone = last.where("id % 10 = 0").limit(args.changes // 10).withColumn("_w", F.lit(-1).cast("bigint"))
        last = events(spark, next_id, args.changes, now, timedelta(minutes=1))
        step("small tick", last.unionByName(gone), now)  # and a tenth as many of the tick before's deleted
        next_id += args.changes

    every = fed[0]
    for delta in fed[1:]:
        every = every.unionByName(delta)
    every.write.parquet(str(work / "events"))
    spark.read.parquet(str(work / "events")).createOrReplaceTempView("all_events")
    literal = f"TIMESTAMP'{now.isoformat(sep=' ')}'"
    spark.sql("SELECT id, ts, u, v FROM all_events GROUP BY id, ts, u, v HAVING SUM(_w) > 0") \
        .createOrReplaceTempView("events")
    problems = {}
    for name, sql in VIEWS.items():
        batch = spark.sql(sql.replace("current_timestamp()", literal).replace("now()", literal)
                          .replace("current_date()", f"CAST({literal} AS DATE)")).collect()
        problems[name] = compare([tuple(r) for r in pipe.snapshot(name).collect()], [tuple(r) for r in batch])
    spark.catalog.dropTempView("events")
    pipe.close()
    return {"placement": placement, "phases": phases, "problems": problems}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--catchup", type=int, default=1_500_000)
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--placements", default="auto,dataframe")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()

    from dbt_incremental_stream.runtime.spark.session import session

    spark = session("local[2]")
    results = []
    for placement in args.placements.split(","):
        work = Path(tempfile.mkdtemp(prefix="bench-clock-"))
        try:
            results.append(run(spark, work, placement, args))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def seconds(r: dict, what: str) -> float:
        return statistics.median(s for w, s, _, _ in r["phases"] if w == what)

    whats = ["first build", "catch-up tick", "small tick"]
    rows = []
    for what in whats:
        for r in results:
            mine = [p for p in r["phases"] if p[0] == what]
            counts = " / ".join(str(int(statistics.median(p[3][i] for p in mine))) for i in range(3))
            paths = ", ".join(sorted({p[2] for p in mine}))
            ratio = seconds(results[-1], what) / seconds(r, what)
            rows.append([what, r["placement"], f"{seconds(r, what):.2f}", f"{ratio:.1f}x", counts, paths])
    print_table(["phase", "placement", "seconds (median)", f"{results[-1]['placement']} / this",
                 "jobs / stages / tasks", "path"], rows)
    for r in results:
        bad = {n: p for n, p in r["problems"].items() if p is not None}
        print(f"{r['placement']}: every view equal to batch: {not bad}" + (f" {bad}" if bad else ""))
    log_plot(Path(args.out) / "clock_load.png", "a project reading the time, local[2]", "phase (1: first build, "
             "2: catch-up, 3: small tick)", [1, 2, 3],
             [(r["placement"], "o-", [seconds(r, w) for w in whats]) for r in results])
    if any(p is not None for r in results for p in r["problems"].values()):
        sys.exit("a view differs from batch")


if __name__ == "__main__":
    main()
