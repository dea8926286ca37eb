"""Fuzzed records, 10,000 per format (JSON, CSV, Avro through a schema registry) between good
ones: truncated, of the wrong type, wrongly framed, huge, empty, not UTF-8. Every fuzzed
record is a dead letter with its offset and a reason, no tick fails, and every good record
is in the view; the executors' read gives the same split as the driver's."""
from __future__ import annotations

import io
import json
import random
import struct
from collections import Counter
from decimal import Decimal

import fastavro
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

from devkit.kafka import create_topics, produce
from dbt_incremental_stream.connectors.datasource import kafka_frame
from dbt_incremental_stream.connectors.formats import Registry, avro_record
from dbt_incremental_stream.connectors.kafka import KafkaSettings, KafkaSource
from dbt_incremental_stream.project import Model, Project
from tests import registry as test_registry

FUZZED, GOOD = 10_000, 1_000


def schema() -> StructType:
    return StructType([StructField("id", LongType()), StructField("name", StringType()),
                       StructField("amount", DecimalType(10, 2))])


def good_rows(rng: random.Random) -> list[tuple[int, str, Decimal]]:
    return [(i, rng.choice(["ann", "bo", "cy", "dé"]), Decimal(rng.randrange(-10**6, 10**6)) / 100)
            for i in range(GOOD)]


def encode(fmt: str, row: tuple, schema_id: int | None = None) -> bytes:
    i, name, amount = row
    if fmt == "json":
        return json.dumps({"id": i, "name": name, "amount": str(amount)}).encode()
    if fmt == "csv":
        return f"{i},{name},{amount}".encode()
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(avro_record("row", schema())),
                               {"id": i, "name": name, "amount": amount})
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def fuzz(fmt: str, rng: random.Random, good: bytes, schema_id: int) -> bytes:
    """A record that cannot decode, made from a good one."""
    kind = rng.choice(["truncated", "type", "framing", "empty", "utf8"] + ["huge"] * (rng.random() < 0.002))
    if kind == "empty":
        return b""
    if kind == "huge":
        return good[:5] + b"\xff" * 300_000
    if kind == "truncated":
        if fmt == "csv":  # a line cut before its last separator has too few fields
            return good[:rng.randrange(0, good.rindex(b","))]
        return good[:rng.randrange(0 if fmt == "json" else 5, len(good))]
    if kind == "utf8":
        if fmt == "avro":
            return good[:5] + b"\x02\x02\x02\x04\xff\xfe\x00"  # id 1, a name of two bytes that are not UTF-8
        return good.replace(b"n", b"\xff\xfen", 1) if fmt == "json" else good.replace(b",", b",\xff", 1)
    if kind == "type":
        if fmt == "json":
            return good.replace(b'"id": ', b'"id": "x', 1).replace(b", \"name", b"\", \"name", 1)
        if fmt == "csv":
            return b"x" + good
        return good[:5] + b"\x07" + good[6:]  # the id's union branch 3 does not exist
    # framing: JSON with a leading byte, CSV on two lines, Avro without its magic byte or with another schema id
    if fmt == "json":
        return b"\x00" + good
    if fmt == "csv":
        return good + b"\n" + good
    return good[1:] if rng.random() < 0.5 else b"\x00" + struct.pack(">I", schema_id + 1000) + good[5:]


@pytest.fixture
def registry():
    yield from test_registry.serve()


def test_fuzzed_records_are_dead_letters_and_good_ones_go_through(spark, kafka, registry, tmp_path):
    rng = random.Random(16)
    settings = KafkaSettings({"bootstrap.servers": kafka}, Registry(registry.url))
    schema_id = settings.registry.register("fuzz_avro-value", avro_record("row", schema()))
    spark.sql("CREATE SCHEMA IF NOT EXISTS fuzz")
    project = Project(spark, str(tmp_path / "state"), kafka=settings)
    want: dict[str, tuple[Counter, set[int]]] = {}
    sources = []
    for fmt in ("json", "csv", "avro"):
        topic = f"fuzz_{fmt}"
        create_topics(kafka, topic, partitions=2)
        rows = good_rows(rng)
        records = []
        for row in rows:
            for _ in range(FUZZED // GOOD):
                records.append(fuzz(fmt, rng, encode(fmt, row, schema_id), schema_id))
            records.append(encode(fmt, row, schema_id))
        # one key, so one partition in order: which offsets are fuzzed is known
        produce(kafka, topic, [(b"k", r) for r in records])
        bad = {o for o, r in enumerate(records) if o % (FUZZED // GOOD + 1) != FUZZED // GOOD}
        want[fmt] = (Counter(rows), bad)
        source = KafkaSource(f"fuzz_raw.{fmt}", topic, schema(), fmt)
        sources.append(source)
        project.deploy(Model(f"fuzz.{fmt}", f"SELECT * FROM fuzz_raw.{fmt}"), streams=[source])
    project.advance()  # no tick fails
    for source, fmt in zip(sources, ("json", "csv", "avro")):
        rows, bad = want[fmt]
        got = Counter((r.id, r.name, r.amount) for r in spark.table(f"fuzz.{fmt}").collect())
        assert got == rows, fmt
        letters = spark.table(f"fuzz_raw.{fmt}__dead_letters").collect()
        assert {r.offset for r in letters} == bad and all(r.reason for r in letters), fmt
        frame = kafka_frame(spark, settings, source, {p: (0, e) for p, (_, e) in
                                                      project.inputs.topics().ranges(source, {})[0].items()})
        split = {bool(r[0]): r[1] for r in frame.groupBy(F.col("_reason").isNull()).count().collect()}
        assert split == {True: GOOD, False: FUZZED}, (fmt, split)
    project.close()
