"""Nexmark through Kafka: this engine vs Spark Structured Streaming (and pydbsp), side by side.

    python bench/nexmark.py [--events 60000] [--per-tick 10000] [--queries q0,q1,...] [--engines dbsp,sss,pydbsp]

Events come from the Nexmark generator (bench/nexmark_events.py), JSON on three topics of a
local broker (person, auction, bid). For each query and each engine the events are
produced in rounds of ``--per-tick`` (in event order, all three kinds), and after each
round the engine catches up; a round's time is its tick latency (end to end: Kafka in,
view maintained, Kafka out), events/s is events / the rounds' total time.

- **this engine**: a project with the query as its one streaming view and an
  insert_delete Kafka sink, one :meth:`Project.advance` per round; after the last round
  the view is compared with DuckDB over all input (``check_project``).
- **Spark Structured Streaming** (same session, same Python data source reading Kafka
  through executors, ``foreachBatch`` sink producing JSON to Kafka): the query as
  written, in the first output mode Spark accepts (append, update, complete); where it
  accepts none, Spark's own error is the reason. Its result is compared with DuckDB
  where the mode allows (append: all rows; complete: the last batch).
- **pydbsp** (the pure-Python DBSP, in its own Python 3.12 virtualenv, in process with no
  Kafka): bench/nexmark_pydbsp.py, for the queries it expresses; skipped if its
  virtualenv is missing (``make bench-nexmark`` creates it).

Prints a table and saves bench/results/nexmark.png.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import sqlglot  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402
from sqlglot import exp  # noqa: E402

from bench.join_aggregate import SparkWork  # noqa: E402
from dbt_incremental_stream.connectors.broker import LocalBroker  # noqa: E402
from devkit.kafka import create_topics, produce  # noqa: E402
from dbt_incremental_stream.connectors.datasource import KafkaRangeSource  # noqa: E402
from dbt_incremental_stream.connectors.kafka import CLIENT_LOGS, KafkaSettings, KafkaSource, KafkaTopics  # noqa: E402
from dbt_incremental_stream.connectors.sinks import KafkaSink  # noqa: E402
from dbt_incremental_stream.differential import Oracle, check_project, compare  # noqa: E402
from dbt_incremental_stream.project import Model, Project  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import session  # noqa: E402
from nexmark_events import SCHEMAS, Generator  # noqa: E402
from nexmark_queries import QUERIES, READS  # noqa: E402

PARTITIONS = {"person": 1, "auction": 1, "bid": 2}
SIDE_INPUT = "key bigint, value string"
SIDE_ROWS = [(k, f"side-{k % 97}") for k in range(10_000)]
PYDBSP_PYTHON = HERE.parent / ".venv-pydbsp" / "bin" / "python"

Rounds = list[dict[str, list[bytes]]]


def encode(events: int, per_tick: int, seed: int, rate: float) -> tuple[Rounds, dict[str, list[tuple]]]:
    """The events as JSON messages in rounds, and as rows (for DuckDB)."""
    rounds: Rounds = []
    rows: dict[str, list[tuple]] = defaultdict(list)
    for i, event in enumerate(Generator(seed, rate).events(events)):
        if i % per_tick == 0:
            rounds.append(defaultdict(list))
        rounds[-1][event.kind].append(json.dumps(event.row, default=datetime.isoformat).encode())
        rows[event.kind].append(tuple(event.row.values()))
    return rounds, rows


def topics(bootstrap: str, prefix: str, reads: list[str]) -> dict[str, str]:
    names = {s: f"{prefix}.{s}" for s in reads if s in PARTITIONS}
    for s, t in names.items():
        create_topics(bootstrap, t, partitions=PARTITIONS[s])
    return names


def renamed(sql: str, template: str) -> str:
    """``sql`` reading each input ``s`` as ``template.format(s=s)``."""
    tree = sqlglot.parse_one(sql, read="spark")
    ctes = {c.alias for c in tree.find_all(exp.CTE)}
    for t in list(tree.find_all(exp.Table)):
        if t.name in INPUTS and not t.db and t.name not in ctes:
            t.replace(exp.to_table(template.format(s=t.name), alias=t.alias or None))
    return tree.sql("spark")


INPUTS = {*SCHEMAS, "side_input"}


def stats(query: str, engine: str, events: int, seconds: list[float], **extra: Any) -> dict:
    ordered = sorted(seconds)
    return {"query": query, "engine": engine, "events": events, "rate": events / sum(seconds),
            "p50": statistics.median(ordered), "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "first": seconds[0], "last": seconds[-1], "seconds": seconds, **extra}


# --- this engine ---------------------------------------------------------------------------


def run_engine(spark, work: Path, bootstrap: str, name: str, rounds: Rounds) -> dict:
    settings = KafkaSettings({"bootstrap.servers": bootstrap})
    names = topics(bootstrap, f"dbsp-{name}", READS[name])
    out = f"dbsp-{name}.out"
    create_topics(bootstrap, out, partitions=1)
    streams = [KafkaSource(f"nx.{s}", t, StructType.fromDDL(SCHEMAS[s])) for s, t in names.items()]
    project = Project(spark, str(work / f"dbsp-{name}"), kafka=settings)
    project.deploy(Model(f"nx.{name}", renamed(QUERIES[name], "nx.{s}"), sink=KafkaSink(out, "insert_delete")),
                   streams=streams)
    seconds, events, out_rows, paths, stages, splits = [], 0, 0, [], [], []
    spark_work = SparkWork(spark)
    for batch in rounds:
        for s, t in names.items():
            produce(bootstrap, t, [(None, v) for v in batch[s]])
        spark_work()
        started = time.perf_counter()
        project.new_frontier()
        while True:  # one tick reads the whole round (no max_records); loop only if a source is left behind
            if project.advance():
                out_rows += sum(project.last.rows_out.values())
                paths.append(project.pipe.last_tick.path)
                splits.append(project.last.split)
            if not project.behind:
                break
        seconds.append(time.perf_counter() - started)
        stages.append(spark_work()[1])
        events += sum(len(v) for v in batch.values())
    problems = check_project(project)
    project.close()
    return stats(name, "this engine", events, seconds, out_rows=out_rows,
                 stages=statistics.median(stages[1:] or stages),
                 arranged=f"{paths[1:].count('arranged')}/{len(paths[1:])}",
                 split={k: statistics.median(s.get(k, 0.0) for s in splits[1:] or splits) for k in splits[-1]},
                 equal="yes" if not any(problems.values()) else f"NO: {list(problems.values())[0][:200]}")


# --- Spark Structured Streaming ------------------------------------------------------------


class _Offsets(InputPartition):
    def __init__(self, partition: int, start: int, end: int):
        self.partition, self.start, self.end = partition, start, end


class KafkaStream(DataSource):
    """A Structured Streaming source over a topic, reading through the engine's batch
    reader (same decoding, same executors), so that both engines pay the same source cost."""

    @classmethod
    def name(cls) -> str:
        return "nexmark_kafka_stream"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(dict(self.options), schema)


class _StreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str], schema: StructType):
        self.options, self.width = options, len(schema.fields)
        self.source = KafkaSource.from_json(json.loads(options["source"]))
        self.settings = KafkaSettings({"bootstrap.servers": options["kafka.bootstrap.servers"]})

    def initialOffset(self) -> dict:
        return {}

    def latestOffset(self) -> dict:
        topics = KafkaTopics(self.settings)
        try:
            ranges, _ = topics.ranges(self.source, {})
        finally:
            topics.close()
        return {str(p): end for p, (_, end) in ranges.items()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_Offsets(int(p), int(start.get(p, 0)), int(e)) for p, e in end.items() if e > start.get(p, 0)]

    def read(self, partition: _Offsets) -> Iterator[pa.RecordBatch]:
        reader = KafkaRangeSource(dict(self.options, ranges=json.dumps(
            {str(partition.partition): [partition.start, partition.end]}))).reader(StructType())
        for part in reader.partitions():
            for batch in reader.read(part):  # Arrow batches of the source's columns, then the tags
                good = batch.filter(pc.is_null(batch.column("_reason")))  # not dead letters
                yield good.select(good.schema.names[:self.width])


def spark_reason(e: Exception) -> str:
    """An analysis error's class, or its first sentence."""
    first = str(e).strip().splitlines()[0]
    named = re.match(r"\[([A-Z_.]+)\]", first)
    return named.group(1) if named else first.split(". ")[0].rstrip(";.")[:110]


def group_columns(columns: list[str], sql: str) -> list[int]:
    """Positions of the output columns a query groups by (what identifies an update-mode row)."""
    select = sqlglot.parse_one(sql, read="spark")
    exprs = [e.unalias() for e in select.expressions]
    out = []
    for g in select.args["group"].expressions:
        if isinstance(g, exp.Literal):
            out.append(int(g.name) - 1)
        else:
            out.append(next(i for i, e in enumerate(exprs) if e == g or columns[i] == g.name))
    return out


def run_sss(spark, work: Path, bootstrap: str, name: str, rounds: Rounds, oracle: Oracle) -> dict:
    names = topics(bootstrap, f"sss-{name}", READS[name])
    out = f"sss-{name}.out"
    create_topics(bootstrap, out, partitions=1)
    for s, t in names.items():
        source = KafkaSource(f"nx.{s}", t, StructType.fromDDL(SCHEMAS[s]))
        (spark.readStream.format(KafkaStream.name()).schema(source.schema)
         .option("source", json.dumps(source.to_json())).option("kafka.bootstrap.servers", bootstrap)
         .load().createOrReplaceTempView(f"sss_{s}"))
    frame = spark.sql(renamed(QUERIES[name], "sss_{s}"))
    batches: list[list[tuple]] = []
    producer = Producer({"bootstrap.servers": bootstrap, **CLIENT_LOGS, "linger.ms": 5})

    def sink(batch, _id: int) -> None:
        rows = [tuple(r) for r in batch.collect()]
        for r in rows:
            producer.produce(out, value=json.dumps(r, default=str).encode())
        producer.flush(60)
        batches.append(rows)

    failures = []
    for mode in ("append", "update", "complete"):
        try:
            query = (frame.writeStream.foreachBatch(sink).outputMode(mode)
                     .option("checkpointLocation", str(work / f"sss-{name}-{mode}")).start())
            break
        except Exception as e:  # Spark names why it cannot run the query in this mode
            failures.append(f"{mode}: {spark_reason(e)}")
    else:
        return {"query": name, "engine": "structured streaming", "unsupported": "; ".join(failures)}
    seconds, events = [], 0
    try:
        for batch in rounds:
            for s, t in names.items():
                produce(bootstrap, t, [(None, v) for v in batch[s]])
            started = time.perf_counter()
            query.processAllAvailable()
            seconds.append(time.perf_counter() - started)
            events += sum(len(v) for v in batch.values())
    finally:
        query.stop()
    want = oracle.query(f'SELECT * FROM "{name}"')
    if mode == "append":
        equal = compare([r for b in batches for r in b], want)
    elif mode == "complete":
        equal = compare(batches[-1] if batches else [], want)
    else:  # update: each group's last emitted row
        key = group_columns(frame.columns, QUERIES[name])
        equal = compare(list({tuple(r[i] for i in key): r for b in batches for r in b}.values()), want)
    return stats(name, "structured streaming", events, seconds, mode=mode,
                 out_rows=sum(len(b) for b in batches), equal="yes" if equal is None else f"NO: {equal[:200]}")


# --- pydbsp -----------------------------------------------------------------------------


def run_pydbsp(args: argparse.Namespace, work: Path) -> list[dict]:
    if not PYDBSP_PYTHON.exists():
        print(f"pydbsp: skipped, no {PYDBSP_PYTHON} (make bench-nexmark creates it)", file=sys.stderr)
        return []
    out = work / "pydbsp.json"
    subprocess.run([str(PYDBSP_PYTHON), str(HERE / "nexmark_pydbsp.py"), "--events", str(args.events),
                    "--per-tick", str(args.per_tick), "--seed", str(args.seed), "--rate", str(args.rate),
                    "--queries", args.queries, "--json", str(out)], check=True, stdout=sys.stderr)
    results = []
    for r in json.loads(out.read_text()):
        if not r["supported"]:
            results.append({"query": r["query"], "engine": "pydbsp", "unsupported": r["reason"]})
        else:
            results.append(stats(r["query"], "pydbsp", r["events"], r["tick_seconds"], out_rows=r["out_rows"],
                                 equal="yes" if r["equal"] else "NO"))
    return results


# --- the run ------------------------------------------------------------------------------


def batch_oracle(rows: dict[str, list[tuple]], queries: list[str]) -> Oracle:
    """All input in DuckDB, to check Structured Streaming's results (this engine checks its
    own through ``check_project``)."""
    oracle = Oracle()
    for s, ddl in {**SCHEMAS, "side_input": SIDE_INPUT}.items():
        oracle.add_source(s, StructType.fromDDL(ddl))
        oracle.replace(s, rows[s] if s != "side_input" else SIDE_ROWS)
    for q in queries:
        oracle.add_view(q, QUERIES[q])
    return oracle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--per-tick", type=int, default=10_000)
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=float, default=1000.0, help="events per second of event time")
    parser.add_argument("--engines", default="dbsp,sss,pydbsp")
    args = parser.parse_args()
    queries, engines = args.queries.split(","), args.engines.split(",")
    rounds, rows = encode(args.events, args.per_tick, args.seed, args.rate)
    work = Path(tempfile.mkdtemp(prefix="nexmark-"))
    results: list[dict] = []
    spark = session("local[2]", {"spark.sql.warehouse.dir": str(work / "warehouse")})
    spark.dataSource.register(KafkaStream)
    oracle = batch_oracle(rows, queries) if "sss" in engines else None
    spark.sql("CREATE SCHEMA IF NOT EXISTS nx")
    side = spark.createDataFrame(SIDE_ROWS, SIDE_INPUT)
    side.write.mode("overwrite").saveAsTable("nx.side_input")
    side.createOrReplaceTempView("sss_side_input")
    try:
        with LocalBroker() as bootstrap:
            for q in queries:
                if "dbsp" in engines:
                    results.append(run_engine(spark, work, bootstrap, q, rounds))
                    report(results[-1])
                if "sss" in engines:
                    results.append(run_sss(spark, work, bootstrap, q, rounds, oracle))  # type: ignore[arg-type]
                    report(results[-1])
        spark.stop()
        if "pydbsp" in engines:
            results += run_pydbsp(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table(args, results)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "nexmark.json").write_text(json.dumps(results, indent=1))
    plot(results)


def report(r: dict) -> None:
    what = r.get("unsupported") or f"{r['rate']:,.0f} events/s, p50 {r['p50']:.2f}s, equal {r['equal']}"
    if "split" in r:
        what += " (median tick: " + ", ".join(f"{k} {v:.2f}" for k, v in r["split"].items()) + ")"
    print(f"  {r['query']} {r['engine']}: {what}", file=sys.stderr)


def table(args: argparse.Namespace, results: list[dict]) -> None:
    print(f"\nNexmark: {args.events:,} events ({args.rate:g}/s of event time), rounds of {args.per_tick:,}, "
          f"local[2], {os.cpu_count()} cores\n")
    print("| query | engine | events/s | tick p50 (s) | tick p99 (s) | first / last tick (s) | rows out | "
          "Spark stages per tick | arranged ticks | equal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(results, key=lambda r: (int(r["query"][1:]), r["engine"])):
        if "unsupported" in r:
            print(f"| {r['query']} | {r['engine']} | cannot: {r['unsupported']} | | | | | | | |")
        else:
            mode = f" ({r['mode']})" if "mode" in r else ""
            print(f"| {r['query']} | {r['engine']}{mode} | {r['rate']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | "
                  f"{r['first']:.2f} / {r['last']:.2f} | {r['out_rows']:,} | {r.get('stages', '')} | "
                  f"{r.get('arranged', '')} | {r['equal']} |")
    ours = {r["query"]: r for r in results if r["engine"] == "this engine" and "unsupported" not in r}
    theirs = {r["query"]: r for r in results if r["engine"] == "structured streaming" and "unsupported" not in r}
    both = sorted(set(ours) & set(theirs), key=lambda q: int(q[1:]))
    if both:
        faster = [q for q in both if ours[q]["p50"] < theirs[q]["p50"]]
        ratios = ", ".join(f"{q} {theirs[q]['p50'] / ours[q]['p50']:.1f}x" for q in both)
        print(f"\ntick p50 below Structured Streaming's on {len(faster)} of the {len(both)} queries it runs "
              f"(its p50 / ours: {ratios})")


GROWTH = ("q3", "q4", "q7")  # stateful queries whose tick time is plotted against history


def plot(results: list[dict]) -> None:
    """Events/s per query and engine; tick time per round for a few stateful queries."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [r for r in results if "unsupported" not in r]
    queries = sorted({r["query"] for r in ran}, key=lambda q: int(q[1:]))
    engines = sorted({r["engine"] for r in ran})
    fig, (bars, lines) = plt.subplots(1, 2, figsize=(15, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / max(len(engines), 1)
    for i, engine in enumerate(engines):
        rate = {r["query"]: r["rate"] for r in ran if r["engine"] == engine}
        bars.bar([j + i * width for j in range(len(queries))], [rate.get(q, 0) for q in queries], width,
                 label=engine)
    bars.set_xticks([j + width * (len(engines) - 1) / 2 for j in range(len(queries))], queries)
    bars.set_yscale("log")
    bars.set_ylabel("events/s (no bar: cannot express)")
    bars.set_title("Nexmark throughput")
    bars.legend()
    for r in ran:
        if r["query"] in GROWTH:
            lines.plot(range(1, len(r["seconds"]) + 1), r["seconds"], marker=".", label=f"{r['query']} {r['engine']}")
    lines.set_yscale("log")
    lines.set_xlabel("round (history grows)")
    lines.set_ylabel("tick seconds")
    lines.legend(fontsize=7)
    fig.tight_layout()
    out = HERE / "results" / "nexmark.png"
    fig.savefig(out, dpi=120)
    print(f"\nsaved {out}")


if __name__ == "__main__":
    main()
