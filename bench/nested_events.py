"""JSON events with an array column from Kafka: a small tick that explodes it, against the same tick over flat rows.

    python bench/nested_events.py [--events 100000] [--per-tick 1000] [--ticks 5]

A local broker holds ``--events`` JSON events on topic ``events``, each with one to four
tags (``tags ARRAY<STRING>``) and a map of counters (``props MAP<STRING, INT>``). Topic
``flat`` holds the same events flattened as a user without generators would write them:
one message per event and tag (``tag STRING``). Two projects, one view each, count events
and sum their amounts by tag:

- nested: ``... FROM raw.events LATERAL VIEW explode(tags) t AS tag GROUP BY tag``;
- flat: ``... FROM raw.flat GROUP BY tag`` (the baseline).

The first tick builds each view's state from the backlog. Then each tick adds
``--per-tick`` new events to both topics and ticks both projects. Per tick: the time,
Spark's jobs / stages / tasks (0 when the tick runs in the driver), and the time's split
(Kafka read and decode, driver, state write, commit). Both views must be equal after every
tick, and equal to Spark batch of the nested view over all events, which is timed too.
Prints a table and saves bench/plots/nested_events.png.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql.types import StructType  # noqa: E402

from bench.join_aggregate import SparkWork, log_plot, print_table  # noqa: E402
from dbt_incremental_stream.connectors.broker import LocalBroker  # noqa: E402
from dbt_incremental_stream.connectors.kafka import KafkaSettings, KafkaSource  # noqa: E402
from dbt_incremental_stream.project import Model, Project  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import session  # noqa: E402
from devkit.kafka import create_topics, produce  # noqa: E402

TAGS = [f"tag{i}" for i in range(200)]
NESTED_DDL = "id BIGINT, user_id INT, amount DOUBLE, tags ARRAY<STRING>, props MAP<STRING, INT>"
FLAT_DDL = "id BIGINT, user_id INT, amount DOUBLE, tag STRING"
VIEWS = {
    "nested": "SELECT tag, COUNT(*) AS n, SUM(amount) AS revenue FROM raw.events "
              "LATERAL VIEW explode(tags) t AS tag GROUP BY tag",
    "flat": "SELECT tag, COUNT(*) AS n, SUM(amount) AS revenue FROM raw.flat GROUP BY tag",
}


def events(rng: random.Random, start: int, n: int) -> list[dict]:
    return [{"id": i, "user_id": rng.randrange(10_000), "amount": rng.randrange(1, 10_000) / 100,
             "tags": rng.sample(TAGS, rng.randint(1, 4)), "props": {"clicks": rng.randrange(10)}}
            for i in range(start, start + n)]


def messages(batch: list[dict]) -> tuple[list, list]:
    """The events as JSON messages, nested and flat."""
    nested = [(None, json.dumps(e).encode()) for e in batch]
    flat = [(None, json.dumps({"id": e["id"], "user_id": e["user_id"], "amount": e["amount"], "tag": t}).encode())
            for e in batch for t in e["tags"]]
    return nested, flat


def answer(spark, relation: str) -> list[tuple]:
    return sorted((r.tag, r.n, round(r.revenue, 6)) for r in spark.table(relation).collect())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--per-tick", type=int, default=1_000)
    parser.add_argument("--ticks", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(7)
    work = Path(tempfile.mkdtemp(prefix="nested-events-"))
    spark = session("local[2]", {"spark.sql.warehouse.dir": str(work / "warehouse")})
    spark.sql("CREATE SCHEMA IF NOT EXISTS bench")
    all_events = events(rng, 0, args.events)
    rows: dict[str, list[dict]] = {name: [] for name in VIEWS}
    try:
        with LocalBroker() as bootstrap:
            settings = KafkaSettings({"bootstrap.servers": bootstrap})
            sources = {"nested": KafkaSource("raw.events", "events", StructType.fromDDL(NESTED_DDL)),
                       "flat": KafkaSource("raw.flat", "flat", StructType.fromDDL(FLAT_DDL))}
            for topic in ("events", "flat"):
                create_topics(bootstrap, topic, partitions=2)
            nested, flat = messages(all_events)
            produce(bootstrap, "events", nested)
            produce(bootstrap, "flat", flat)
            projects = {}
            for name, sql in VIEWS.items():
                projects[name] = Project(spark, str(work / name), kafka=settings)
                projects[name].deploy(Model(f"bench.{name}", sql), streams=[sources[name]])
            work_done = SparkWork(spark)
            for tick in range(args.ticks + 1):
                if tick:
                    batch = events(rng, len(all_events), args.per_tick)
                    all_events += batch
                    nested, flat = messages(batch)
                    produce(bootstrap, "events", nested)
                    produce(bootstrap, "flat", flat)
                for name, project in projects.items():
                    work_done()
                    started = time.perf_counter()
                    project.new_frontier()
                    assert project.advance(), f"{name}: no tick"
                    seconds = time.perf_counter() - started
                    jobs = work_done()
                    report = project.last
                    rows[name].append({"seconds": seconds, "work": jobs, "path": report.path,
                                       "rows": sum(report.rows_in.values()), "split": report.split})
                want = answer(spark, "bench.flat")
                assert answer(spark, "bench.nested") == want, f"tick {tick}: the views differ"
            for project in projects.values():
                project.close()
        spark.createDataFrame([(e["id"], e["user_id"], e["amount"], e["tags"], e["props"]) for e in all_events],
                              NESTED_DDL).createOrReplaceTempView("batch_events")
        batch_sql = VIEWS["nested"].replace("raw.events", "batch_events")
        batch_seconds = []
        for _ in range(3):
            started = time.perf_counter()
            got = sorted((r.tag, r.n, round(r.revenue, 6)) for r in spark.sql(batch_sql).collect())
            batch_seconds.append(time.perf_counter() - started)
        assert got == want, "the views differ from Spark batch"
        batch = min(batch_seconds)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{args.events:,} JSON events (1-4 tags each), {args.per_tick:,} new events a tick, local[2]\n")
    table = []
    medians = {}
    for name, ticks in rows.items():
        small = ticks[1:]
        medians[name] = statistics.median(t["seconds"] for t in small)
        split = {k: statistics.median(t["split"].get(k, 0.0) for t in small)
                 for k in ("read", "spark", "driver", "write", "outputs", "commit", "publish")}
        table.append([name, f"{ticks[0]['seconds']:.2f} s", f"{medians[name]:.3f} s",
                      "/".join(str(x) for x in small[-1]["work"]), ",".join(sorted({t["path"] for t in small})),
                      f"{statistics.median(t['rows'] for t in small):,.0f}",
                      " ".join(f"{k} {v:.3f}" for k, v in split.items()), f"{batch / medians[name]:.1f}x"])
    print_table(["view", "first tick", "tick p50", "jobs/stages/tasks", "path", "records in", "split (s)",
                 "batch / tick"], table)
    print(f"\nnested / flat tick: {medians['nested'] / medians['flat']:.2f}x; Spark batch of the nested view: "
          f"{batch:.2f} s")
    plot(rows, batch)


def plot(rows: dict[str, list[dict]], batch: float) -> None:
    ticks = list(range(1, len(rows["nested"])))
    lines = [(f"{name} tick", "o-", [t["seconds"] for t in view[1:]]) for name, view in rows.items()]
    log_plot(Path(__file__).resolve().parent / "plots" / "nested_events.png", "JSON events with an array column",
             "tick", ticks, lines + [("Spark batch (nested view)", "--", [batch] * len(ticks))], xscale="linear")


if __name__ == "__main__":
    main()
