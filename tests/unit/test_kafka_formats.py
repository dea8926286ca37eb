"""Every format × envelope through Kafka and back: a project's sinks write its changes, a
second project reads those topics as sources, and its views equal the first's after every
tick (inserts, updates, deletes, NULLs and every column type). Plus Avro from a schema
file, CSV quoting, metadata columns, where a source starts, and bad records of every kind
going to the dead letters while the pipeline goes on."""
from __future__ import annotations

import io
import json
from collections import Counter
from datetime import date, datetime, timezone
from decimal import Decimal

import fastavro
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from pyspark.sql.types import (BooleanType, DateType, DecimalType, DoubleType, LongType, StringType, StructField,
                               StructType, TimestampType)

from dbt_incremental_stream.connectors.envelopes import ENVELOPES_OF
from dbt_incremental_stream.connectors.formats import Registry
from dbt_incremental_stream.connectors.kafka import CLIENT_LOGS, KafkaSettings, KafkaSource
from dbt_incremental_stream.connectors.sinks import KafkaSink
from dbt_incremental_stream.errors import StreamError
from dbt_incremental_stream.project import Model, Project
from tests import registry as test_registry
from devkit.kafka import create_topics, produce

SCHEMA = StructType([StructField("id", LongType()), StructField("name", StringType()),
                     StructField("amount", DecimalType(10, 2)), StructField("score", DoubleType()),
                     StructField("at", TimestampType()), StructField("day", DateType()),
                     StructField("ok", BooleanType())])
NAMES = SCHEMA.fieldNames()
COMBOS = [(f, e) for f, envelopes in ENVELOPES_OF.items() for e in envelopes]


def rows(spark, relation):
    return Counter(tuple(r) for r in spark.table(relation).collect())


def doc(row):
    return {k: (str(v) if isinstance(v, (Decimal, datetime, date)) else v) for k, v in zip(NAMES, row)}


def item(i, name, amount, score=None, ok=None):
    return (i, name, None if amount is None else Decimal(amount), score, datetime(2026, 1, i % 28 + 1, 10, 30, i),
            date(2026, 2, i % 28 + 1), ok)


@pytest.fixture(scope="module")
def registry():
    yield from test_registry.serve()


def test_every_format_and_envelope_round_trips(spark, kafka, registry, tmp_path):
    settings = KafkaSettings({"bootstrap.servers": kafka}, Registry(registry.url))
    create_topics(kafka, "fmt_items", "fmt_log", *(f"s_{f}_{e}" for f, e in COMBOS))
    up = Project(spark, str(tmp_path / "up"), kafka=settings)
    down = Project(spark, str(tmp_path / "down"), kafka=settings)
    for schema in ("fmt_out", "fmt_view"):
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    items = KafkaSource("fmt_up.items", "fmt_items", SCHEMA, envelope="upsert", key=("id",))
    log = KafkaSource("fmt_up.log", "fmt_log", SCHEMA)
    for fmt, env in COMBOS:
        keyed = ("id",) if env in ("upsert", "debezium") else ()
        source = log if env == "append" else items  # an append sink takes an insert-only result
        up.deploy(Model(f"fmt_out.{fmt}_{env}", f"SELECT * FROM {source.relation}",
                        sink=KafkaSink(f"s_{fmt}_{env}", env, keyed, fmt)), streams=[source])
        read = KafkaSource(f"fmt_in.{fmt}_{env}", f"s_{fmt}_{env}", SCHEMA, fmt, env, keyed)
        down.deploy(Model(f"fmt_view.{fmt}_{env}", f"SELECT * FROM fmt_in.{fmt}_{env}"), streams=[read])

    ticks = [
        [item(1, 'plain', "12.50", 2.5, True), item(2, 'comma, "quoted"', "0.01", None, False),
         item(3, "nulls", None), item(4, "ünïcode", "-3.10", 1e-9, True)],
        [item(1, "updated", "13.00", 2.75, False), (2, None), item(5, "new", "1.00", 0.5, None)],
        [(4, None), item(1, "again", "14.00", None, True), item(6, "x", "99999999.99", -1.5, False)],
    ]
    for changes in ticks:
        produce(kafka, "fmt_items", [({"id": c[0]}, None if c[1] is None and len(c) == 2 else doc(c))
                                     for c in changes])
        produce(kafka, "fmt_log", [(None, doc(c)) for c in changes if len(c) > 2])
        for project in (up, down):
            project.new_frontier()
            assert project.advance()
        for fmt, env in COMBOS:
            want = rows(spark, "fmt_up.log" if env == "append" else "fmt_up.items")
            assert want and rows(spark, f"fmt_view.{fmt}_{env}") == want, (fmt, env)
    assert rows(spark, "fmt_up.items")[item(1, "again", "14.00", None, True)] == 1
    assert {"s_avro_upsert-value", "s_avro_upsert-key", "s_avro_debezium-value"} <= set(registry.subjects)
    up.close()
    down.close()


AVRO_DEBEZIUM = {
    "type": "record", "name": "Envelope", "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
            {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"}]}


def test_avro_from_a_schema_file_and_csv(spark, kafka, tmp_path):
    """Records written by other producers: bare Avro bodies with a known writer schema, and
    CSV lines (quoting, empty fields as NULL, an upsert tombstone keyed by the bare key)."""
    create_topics(kafka, "avro_file", "csv_up", partitions=1)
    parsed = fastavro.parse_schema(AVRO_DEBEZIUM)

    def avro(before, after):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"before": before, "after": after, "op": "u"})
        return out.getvalue()

    a = {"id": 1, "name": "a", "price": Decimal("1.50"), "at": datetime(2026, 3, 1, 12)}
    b = {"id": 2, "name": None, "price": Decimal("2.00"), "at": datetime(2026, 3, 2, 12)}
    produce(kafka, "avro_file", [(None, avro(None, a)), (None, avro(None, b)), (None, avro(a, {**a, "name": "z"}))])
    produce(kafka, "csv_up", [(b"1", b'1,"x, ""y""",2.5'), (b"2", b"2,,"), (b"3", b"3,c,1"), (b"3", None)])
    settings = KafkaSettings({"bootstrap.servers": kafka})
    project = Project(spark, str(tmp_path / "state"), kafka=settings)
    spark.sql("CREATE SCHEMA IF NOT EXISTS ext")
    product = StructType.fromDDL("id bigint, name string, price decimal(8,2), at timestamp")
    project.deploy(Model("ext.products", "SELECT * FROM ext_raw.products"), streams=[KafkaSource(
        "ext_raw.products", "avro_file", product, "avro", "debezium", avro_schema=json.dumps(AVRO_DEBEZIUM))])
    project.deploy(Model("ext.lines", "SELECT * FROM ext_raw.lines"), streams=[KafkaSource(
        "ext_raw.lines", "csv_up", StructType.fromDDL("id int, label string, weight double"),
        "csv", "upsert", ("id",))])
    project.advance()
    assert rows(spark, "ext.products") == Counter({(1, "z", Decimal("1.50"), datetime(2026, 3, 1, 12)): 1,
                                                   (2, None, Decimal("2.00"), datetime(2026, 3, 2, 12)): 1})
    assert rows(spark, "ext.lines") == Counter({(1, 'x, "y"', 2.5): 1, (2, None, None): 1})
    project.close()


def test_metadata_columns_and_where_a_source_starts(spark, kafka, tmp_path):
    create_topics(kafka, "meta_t", partitions=1)
    produce(kafka, "meta_t", [(b"k0", {"v": 0})])
    settings = KafkaSettings({"bootstrap.servers": kafka})
    schema = StructType.fromDDL("v bigint")
    spark.sql("CREATE SCHEMA IF NOT EXISTS meta")
    project = Project(spark, str(tmp_path / "state"), kafka=settings)
    include = (("partition", "p"), ("offset", "o"), ("timestamp", "ts"), ("key", "k"), ("headers", "h"))
    project.deploy(Model("meta.all", "SELECT * FROM meta_raw.all"),
                   streams=[KafkaSource("meta_raw.all", "meta_t", schema, metadata=include)])
    project.deploy(Model("meta.late", "SELECT * FROM meta_raw.late"),
                   streams=[KafkaSource("meta_raw.late", "meta_t", schema, start="latest")])
    project.advance()  # the latest source starts after record 0
    cut = datetime.now(timezone.utc).replace(tzinfo=None)
    project.deploy(Model("meta.since", "SELECT * FROM meta_raw.since"),
                   streams=[KafkaSource("meta_raw.since", "meta_t", schema, start=cut.isoformat())])
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": kafka, **CLIENT_LOGS})
    p.produce("meta_t", key=b"k1", value=b'{"v": 1}', headers=[("trace", b"abc")])
    p.flush(10)
    project.new_frontier()
    project.advance()
    got = sorted(spark.table("meta.all").collect(), key=lambda r: r.o)
    assert [(r.v, r.p, r.o, r.k) for r in got] == [(0, 0, 0, "k0"), (1, 0, 1, "k1")]
    assert json.loads(got[1].h) == {"trace": "abc"} and got[1].ts >= cut.replace(microsecond=0)
    assert [r.v for r in spark.table("meta.late").collect()] == [1]
    assert [r.v for r in spark.table("meta.since").collect()] == [1]
    project.close()


def test_bad_records_of_every_format_go_to_dead_letters(spark, kafka, registry, tmp_path):
    """Malformed JSON, wrong types, missing fields, a CSV line of the wrong shape, bytes that
    are not Avro, an upsert record without its key: each becomes a dead letter (table and
    topic) with offset, raw bytes and reason; the good records around them go through."""
    create_topics(kafka, "bad_json", "bad_csv", "bad_avro", "bad_dlq", partitions=1)
    produce(kafka, "bad_json", [(None, b'{"id": 1, "n": "a"}'), (None, b'{"id": 2, "n": '),
                                (None, b'{"id": "two", "n": "b"}'), (None, b'{"n": "c"}'),
                                (None, b'[1, 2]'), (None, b'{"id": null, "n": "d"}'), (None, b'{"id": 3, "n": "e"}')])
    produce(kafka, "bad_csv", [(None, b"1,a"), (None, b"2"), (None, b"x,b"), (None, b"3,c,extra"), (None, b"4,d")])
    produce(kafka, "bad_avro", [(None, b"\x00\x00\x00\x00\x07garbage"), (None, b"no magic byte")])
    settings = KafkaSettings({"bootstrap.servers": kafka}, Registry(registry.url))
    schema = StructType.fromDDL("id bigint, n string")
    spark.sql("CREATE SCHEMA IF NOT EXISTS bad")
    project = Project(spark, str(tmp_path / "state"), kafka=settings)
    project.deploy(Model("bad.j", "SELECT * FROM bad_raw.j"), streams=[
        KafkaSource("bad_raw.j", "bad_json", schema, envelope="upsert", key=("id",), dead_letter_topic="bad_dlq")])
    project.deploy(Model("bad.c", "SELECT * FROM bad_raw.c"), streams=[
        KafkaSource("bad_raw.c", "bad_csv", schema, "csv")])
    project.deploy(Model("bad.a", "SELECT * FROM bad_raw.a"), streams=[
        KafkaSource("bad_raw.a", "bad_avro", schema, "avro")])
    project.advance()
    assert rows(spark, "bad.j") == Counter({(1, "a"): 1, (3, "e"): 1})
    assert rows(spark, "bad.c") == Counter({(1, "a"): 1, (4, "d"): 1})
    assert rows(spark, "bad.a") == Counter()
    assert project.last.dead == {"bad_raw.j": 5, "bad_raw.c": 3, "bad_raw.a": 2}
    dead = {(r.topic, r.offset): (bytes(r.raw), r.reason) for r in spark.table("bad_raw.j__dead_letters").collect()}
    assert dead[("bad_json", 1)][0] == b'{"id": 2, "n": ' and "not JSON" in dead[("bad_json", 1)][1]
    assert "'two' is not a bigint" in dead[("bad_json", 2)][1]
    assert "missing field 'id'" in dead[("bad_json", 3)][1]
    assert "expected an object" in dead[("bad_json", 4)][1]
    assert "upsert key column 'id' is null" in dead[("bad_json", 5)][1]
    csv_dead = {r.offset: r.reason for r in spark.table("bad_raw.c__dead_letters").collect()}
    assert "one line of 2 fields, got 1" in csv_dead[1] and "'x' is not a bigint" in csv_dead[2]
    assert "got 3" in csv_dead[3]
    avro_dead = {r.offset: r.reason for r in spark.table("bad_raw.a__dead_letters").collect()}
    assert "schema id 7 is not in the schema registry" in avro_dead[0]
    assert "no magic byte" in avro_dead[1]

    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "dlq-check", "enable.partition.eof": True,
                         **CLIENT_LOGS})
    consumer.assign([TopicPartition("bad_dlq", 0, OFFSET_BEGINNING)])
    letters = []
    while (msg := consumer.poll(10)) is not None and msg.error() is None:
        letters.append((msg.value(), dict(msg.headers())))
    consumer.close()
    assert [h["dbt_stream_offset"] for _, h in letters] == [b"1", b"2", b"3", b"4", b"5"]
    assert letters[0][0] == b'{"id": 2, "n": ' and b"not JSON" in letters[0][1]["dbt_stream_reason"]

    produce(kafka, "bad_json", [(None, b'{"id": 4, "n": "f"}')])  # the pipeline goes on
    project.new_frontier()
    project.advance()
    assert rows(spark, "bad.j") == Counter({(1, "a"): 1, (3, "e"): 1, (4, "f"): 1})
    assert project.last.dead == {"bad_raw.j": 0}
    project.close()


@pytest.mark.parametrize("make, error", [
    (lambda: KafkaSource("s.t", "t", SCHEMA, "csv", "debezium"), "envelope 'debezium' is not one of"),
    (lambda: KafkaSource("s.t", "t", SCHEMA, "xml"), "format 'xml' is not one of"),
    (lambda: KafkaSource("s.t", "t", SCHEMA, start="yesterday"), "or an ISO timestamp"),
    (lambda: KafkaSource("s.t", "t", SCHEMA, metadata=(("lag", "x"),)), "not Kafka metadata"),
    (lambda: KafkaSource("s.t", "t", SCHEMA, "avro", avro_schema="{"), "Avro schema does not parse"),
    (lambda: KafkaSource("s.t", "t", SCHEMA, "avro").decoder(None), "needs `schema_file`"),
    (lambda: KafkaSink("t", "upsert"), "upsert envelope needs `key`"),
    (lambda: KafkaSink("t", "debezium", format="csv"), "envelope 'debezium' is not one of"),
])
def test_configuration_errors_say_what_to_fix(make, error):
    with pytest.raises(StreamError, match=error):
        make()
