"""Kafka → Spark → Kafka end to end: sustained throughput and tick latency.

    python bench/kafka_e2e.py [--events 200000] [--per-tick 20000] [--partitions 4]

A local broker (the Tansu fixture) holds ``--events`` JSON orders on a topic of
``--partitions`` partitions (and 1,000 customers on an upsert topic). For each query, a
project with that one streaming view (and a Kafka sink) ticks through the backlog at most
``--per-tick`` offsets per tick, the way ``dbt-stream serve`` does, until caught up. Its
first tick builds the view's state (what ``dbt run`` does before serve ticks) and is
reported on its own; throughput is the later ticks' events / their wall time, latency the
p50/p99 of those ticks. The queries:

- filter: ``WHERE amount > 50`` (half the orders), insert_delete sink;
- join + aggregate: orders ⋈ customers by region, upsert sink;
- windowed aggregate: per minute and category (a tumbling window), upsert sink.

Baselines in the same run, to name the limit: the broker's produce rate and a consumer's
read rate (driver, one thread, no decoding), JSON decoding alone (records already in
memory, one core: :class:`ChunkDecoder`), and the same read + JSON decode through the
executors' data source with no view (the source side of a tick), and the sink alone: the
filter's change of ``--per-tick`` / 2 rows encoded (insert_delete JSON) and written to a
topic of ``--partitions`` partitions, once by the driver and once by Spark tasks, a
transaction per partition. Each query's row splits its median tick (read, Spark, driver,
state write, outputs incl. the sink, commit, publish). Also each format and envelope
decoded alone, by the chunk decoder and by the per-record row decoder. Prints a table and
saves bench/results/kafka_e2e.png.
"""
from __future__ import annotations

import argparse
import io
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition  # noqa: E402
from pyspark.sql.types import (DecimalType, LongType, StringType, StructField, StructType,  # noqa: E402
                               TimestampType)

from dbt_incremental_stream.connectors.broker import LocalBroker  # noqa: E402
from dbt_incremental_stream.connectors.datasource import chunk_decoder, kafka_frame  # noqa: E402
from dbt_incremental_stream.connectors.kafka import CLIENT_LOGS, KafkaSettings, KafkaSource, KafkaTopics, read_chunks  # noqa: E402
from dbt_incremental_stream.circuit.operators import WEIGHT  # noqa: E402
from dbt_incremental_stream.connectors.sinks import KafkaSink, TopicWriter  # noqa: E402
from dbt_incremental_stream.project import Model, Project  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import session  # noqa: E402
from devkit.kafka import create_topics, produce  # noqa: E402

CUSTOMERS, REGIONS, CATEGORIES = 1000, ["eu", "us", "apac", "latam"], ["books", "games", "garden", "toys", "tools"]
QUERIES = {
    "filter": ("SELECT id, customer_id, amount FROM raw.orders WHERE amount > 50", "insert_delete", ()),
    "join + aggregate": ("SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS revenue FROM raw.orders o "
                         "JOIN raw.customers c ON o.customer_id = c.id GROUP BY c.region", "upsert", ("region",)),
    "windowed aggregate": ("SELECT date_trunc('minute', ordered_at) AS minute, category, COUNT(*) AS n, "
                           "SUM(amount) AS revenue FROM raw.orders GROUP BY 1, 2", "upsert", ("minute", "category")),
}


def produce_rate(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> float:
    """Records/s the broker took them at."""
    started = time.perf_counter()
    produce(bootstrap, topic, records)
    return len(records) / (time.perf_counter() - started)


def consume_rate(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}", "enable.partition.eof": True,
                  "fetch.wait.max.ms": 10, **CLIENT_LOGS})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    started, seen, open_ = time.perf_counter(), 0, set(range(partitions))
    while open_:
        for msg in c.consume(1000, 0.05):  # returns what is there (consume waits for all 1000 or the timeout)
            if msg.error():
                open_.discard(msg.partition())
            else:
                seen += 1
    c.close()
    assert seen == n, (seen, n)
    return n / (time.perf_counter() - started)


def source_rate(spark, settings: KafkaSettings, source: KafkaSource, n: int) -> float:
    topics = KafkaTopics(settings)
    ranges, _ = topics.ranges(source, {})
    topics.close()
    started = time.perf_counter()
    got = kafka_frame(spark, settings, source, ranges).count()
    assert got == n, (got, n)
    return n / (time.perf_counter() - started)


def decode_rate(settings: KafkaSettings, source: KafkaSource, n: int) -> float:
    """Records/s one core decodes (the records already read into memory)."""
    topics = KafkaTopics(settings)
    ranges, _ = topics.ranges(source, {})
    topics.close()
    chunks = [c for p, (start, end) in ranges.items() for c in read_chunks(settings, source.topic, p, start, end)]
    decoder = chunk_decoder(settings, source)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        got = sum(decoder(c).num_rows for c in chunks)
        best = min(best, time.perf_counter() - started)
    assert got == n, (got, n)
    return n / best


def sink_rates(spark, settings: KafkaSettings, n: int, partitions: int) -> tuple[float, float]:
    """Messages/s of the sink alone, written by the driver and by Spark tasks: ``n`` inserted
    rows of the filter's columns, as insert_delete JSON, a transaction per partition."""
    rng = random.Random(7)
    change = pa.table({"id": pa.array(range(n), pa.int64()),
                       "customer_id": pa.array([rng.randrange(CUSTOMERS) for _ in range(n)], pa.int64()),
                       "amount": pa.array([round(rng.uniform(50, 100), 2) for _ in range(n)], pa.float64()),
                       WEIGHT: pa.array([1] * n, pa.int64())})
    frame = spark.createDataFrame(change).cache()
    frame.count()
    rates = []
    for by in ("driver", "tasks"):
        topic = f"sink_{by}"
        create_topics(settings.bootstrap_servers, topic, partitions=partitions)
        writer, sink, best = TopicWriter(settings, f"bench-{by}"), KafkaSink(topic), float("inf")
        for tick in (1, 2, 3):
            started = time.perf_counter()
            if by == "driver":
                messages = sink.payloads("bench.sink", change, None)
                writer.write(topic, tick, messages)
                written = len(messages)
            else:
                written = writer.write_from_tasks("bench.sink", sink, frame, tick)
            best = min(best, time.perf_counter() - started)
        writer.close()
        assert written == n, (written, n)
        rates.append(n / best)
    frame.unpersist()
    return rates[0], rates[1]


def format_rates(n: int) -> list[tuple[str, float, float]]:
    """Records/s one core decodes into a batch of rows, per format and envelope, by the
    chunk decoder and by the per-record row decoder it falls back to (records in memory,
    chunks of 10,000, best of 3)."""
    import fastavro
    from confluent_kafka import Message

    from dbt_incremental_stream.connectors.formats import avro_record
    from dbt_incremental_stream.connectors.kafka import record

    columns = StructType([StructField("id", LongType()), StructField("customer_id", LongType()),
                          StructField("category", StringType()), StructField("amount", DecimalType(10, 2)),
                          StructField("ordered_at", TimestampType())])
    rng = random.Random(11)
    docs = [{"id": i, "customer_id": rng.randrange(CUSTOMERS), "category": rng.choice(CATEGORIES),
             "amount": f"{rng.uniform(1, 100):.2f}", "ordered_at": f"2026-11-01T10:{i // 60 % 60:02d}:{i % 60:02d}"}
            for i in range(n)]
    schema = avro_record("orders", columns)
    parsed = fastavro.parse_schema(schema)

    def avro(d: dict) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {**d, "amount": Decimal(d["amount"]),
                                                 "ordered_at": datetime.fromisoformat(d["ordered_at"])})
        return out.getvalue()
    cases = {
        ("json", "append"): lambda d: json.dumps(d).encode(),
        ("json", "insert_delete"): lambda d: json.dumps({"insert": d}).encode(),
        ("json", "debezium"): lambda d: json.dumps({"payload": {"before": None, "after": d, "op": "c"}}).encode(),
        ("csv", "append"): lambda d: ",".join(str(v) for v in d.values()).encode(),
        ("avro", "append"): avro,
    }
    out = []
    for (fmt, envelope), encode in cases.items():
        source = KafkaSource("raw.orders", "orders", columns, fmt, envelope,
                             avro_schema=json.dumps(schema) if fmt == "avro" else None)
        decoder = chunk_decoder(KafkaSettings({"bootstrap.servers": "-"}), source)
        msgs = [Message(topic="orders", partition=0, offset=i, value=encode(d)) for i, d in enumerate(docs)]
        chunks = [msgs[i:i + 10_000] for i in range(0, n, 10_000)]
        rates = []
        for decode in (decoder, lambda c: decoder._row_table([record(m) for m in c])):
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                got = sum(decode(c).num_rows for c in chunks)
                best = min(best, time.perf_counter() - started)
            assert got == n, (fmt, envelope, got)
            rates.append(n / best)
        out.append((f"{fmt} {envelope}", rates[0], rates[1]))
    return out


def drain(spark, work: Path, settings: KafkaSettings, name: str, sql: str, envelope: str, key: tuple, n: int,
          per_tick: int, partitions: int, orders: KafkaSource, customers: KafkaSource) -> dict:
    """Tick a one-view project through the whole backlog."""
    topic = f"out_{name.replace(' ', '_').replace('+', '')}"
    create_topics(settings.bootstrap_servers, topic, partitions=partitions)
    project = Project(spark, str(work / topic), kafka=settings, max_records=per_tick)
    relation = f"bench.{topic}"
    project.deploy(Model(relation, sql, sink=KafkaSink(topic, envelope, key)), streams=[orders, customers])
    ticks, started = [], time.perf_counter()
    first = None  # the first tick builds the view's state (what `dbt run` does): not part of the stream
    while True:
        project.new_frontier()
        if project.advance():
            ticks.append(project.last)
            if first is None:
                first, started = time.perf_counter() - started, time.perf_counter()
        if not project.behind and not any(project.last.lag.values()):
            break
    elapsed = time.perf_counter() - started
    project.close()
    stream = ticks[1:] or ticks
    seconds = sorted(t.seconds + t.split.get("publish", 0.0) for t in stream)  # to commit, then publishing
    split = {k: statistics.median(t.split.get(k, 0.0) for t in stream)
             for k in ("read", "spark", "driver", "write", "outputs", "commit", "publish")}
    read = sum(t.offsets.get("raw.orders", 0) for t in ticks)
    assert read == n, (read, n)
    streamed = sum(t.offsets.get("raw.orders", 0) for t in stream)
    return {"query": name, "events": n, "ticks": len(stream), "first": first, "seconds": elapsed,
            "rate": streamed / elapsed,
            "p50": statistics.median(seconds), "p99": seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))],
            "out": sum(sum(t.rows_out.values()) for t in ticks), "split": split}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--per-tick", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--queries", default=",".join(QUERIES))
    args = parser.parse_args()
    rng = random.Random(5)
    start = datetime(2026, 11, 1)
    orders_msgs = [(None, json.dumps({"id": i, "customer_id": rng.randrange(CUSTOMERS),
                                      "category": rng.choice(CATEGORIES),
                                      "amount": round(rng.uniform(1, 100), 2),
                                      "ordered_at": (start + timedelta(seconds=i // 50)).isoformat()}).encode())
                   for i in range(args.events)]
    customer_msgs = [(json.dumps({"id": c}).encode(), json.dumps({"id": c, "region": rng.choice(REGIONS)}).encode())
                     for c in range(CUSTOMERS)]
    work = Path(tempfile.mkdtemp(prefix="kafka-e2e-"))
    spark = session("local[2]", {"spark.sql.warehouse.dir": str(work / "warehouse")})
    rows: list[dict] = []
    try:
        with LocalBroker() as bootstrap:
            create_topics(bootstrap, "orders", partitions=args.partitions)
            create_topics(bootstrap, "customers", partitions=1)
            produced = produce_rate(bootstrap, "orders", orders_msgs)
            produce(bootstrap, "customers", customer_msgs)
            settings = KafkaSettings({"bootstrap.servers": bootstrap})
            orders = KafkaSource("raw.orders", "orders", StructType.fromDDL(
                "id bigint, customer_id bigint, category string, amount double, ordered_at timestamp"))
            customers = KafkaSource("raw.customers", "customers", StructType.fromDDL("id bigint, region string"),
                                    envelope="upsert", key=("id",))
            consumed = consume_rate(bootstrap, "orders", args.partitions, args.events)
            decoded_alone = decode_rate(settings, orders, args.events)
            formats = format_rates(min(args.events, 100_000))
            source_rate(spark, settings, orders, args.events)  # warm the Python workers
            decoded = source_rate(spark, settings, orders, args.events)
            sink_driver, sink_tasks = sink_rates(spark, settings, args.per_tick // 2, args.partitions)
            spark.sql("CREATE SCHEMA IF NOT EXISTS bench")
            for name in args.queries.split(","):
                sql, envelope, key = QUERIES[name]
                rows.append(drain(spark, work, settings, name, sql, envelope, key, args.events, args.per_tick,
                                  args.partitions, orders, customers))
                print(f"  {name}: {rows[-1]['rate']:,.0f} events/s", file=sys.stderr)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{args.events:,} JSON orders on {args.partitions} partitions, at most {args.per_tick:,} offsets per tick, "
          "local[2]\n")
    print(f"{'stage':<34} {'events/s':>10} {'ticks':>6} {'tick p50':>9} {'tick p99':>9} {'messages out':>13} "
          f"{'first tick':>11}")
    print(f"{'broker: produce':<34} {produced:>10,.0f}")
    print(f"{'consumer: read (1 thread)':<34} {consumed:>10,.0f}")
    print(f"{'JSON decode alone (1 core)':<34} {decoded_alone:>10,.0f}")
    print(f"{'source: read + decode (executors)':<34} {decoded:>10,.0f}")
    print(f"{'sink: encode + write (driver)':<34} {sink_driver:>10,.0f}")
    print(f"{'sink: encode + write (tasks)':<34} {sink_tasks:>10,.0f}")
    for r in rows:
        print(f"{'e2e: ' + r['query']:<34} {r['rate']:>10,.0f} {r['ticks']:>6} {r['p50']:>8.2f}s {r['p99']:>8.2f}s "
              f"{r['out']:>13,} {r['first']:>10.2f}s")
    print(f"\ndecode alone (1 core), records/s:\n  {'format envelope':<20} {'chunk decoder':>14} {'row decoder':>12}")
    for name, fast, slow in formats:
        print(f"  {name:<20} {fast:>14,.0f} {slow:>12,.0f}")
    print("\nmedian tick split (s):")
    for r in rows:
        print(f"  {r['query']:<20} " + ", ".join(f"{k} {v:.2f}" for k, v in r["split"].items()))
    plot(rows, produced, consumed, decoded)


def plot(rows: list[dict], produced: float, consumed: float, decoded: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["produce", "consume", "source"] + [r["query"] for r in rows]
    values = [produced, consumed, decoded] + [r["rate"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh(labels, values, color=["grey"] * 3 + ["tab:blue"] * len(rows))
    ax.set_xscale("log")
    ax.set_xlabel("events/s")
    ax.set_title("Kafka → Spark → Kafka throughput")
    fig.tight_layout()
    out = Path(__file__).resolve().parent / "results" / "kafka_e2e.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"\nsaved {out}")


if __name__ == "__main__":
    main()
