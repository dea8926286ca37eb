"""The chunk decoder's fast path gives exactly the row decoder's rows: on random records,
good and malformed, of every column type, for the envelopes it takes, with metadata
columns; and every record that does not decode is a dead letter with the row decoder's
reason."""
from __future__ import annotations

import json
from decimal import Decimal

from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DateType, DecimalType, DoubleType, FloatType,
                               IntegerType, LongType, StringType, StructField, StructType, TimestampType)

from dbt_incremental_stream.connectors.columnar import ChunkDecoder
from dbt_incremental_stream.connectors.datasource import row_schema
from dbt_incremental_stream.connectors.kafka import KafkaSource, record

SCHEMA = StructType([StructField(n, t) for n, t in [
    ("id", LongType()), ("n", IntegerType()), ("tiny", ByteType()), ("x", DoubleType()), ("f", FloatType()),
    ("d", DecimalType(10, 2)), ("s", StringType()), ("b", BooleanType()), ("t", TimestampType()), ("day", DateType()),
    ("raw", BinaryType())]])
COLUMNS = SCHEMA.fieldNames()

anything = st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.floats(allow_nan=False), st.text(max_size=5),
    st.sampled_from(["2026-11-01T10:00:00", "2026-11-01", "2026-13-01", "noon", "", "1e3", "NaN", "9999999999.999"]))


def edges(bits: int) -> list[int]:
    high = 1 << (bits - 1)
    return [-high, high - 1, -high - 1, high]


#: values of each column's own type
CLEAN = {
    "id": st.integers(-1000, 1000), "n": st.integers(-1000, 1000), "tiny": st.integers(-100, 100),
    "x": st.one_of(st.floats(allow_nan=False), st.integers(-10**20, 10**20)), "f": st.floats(-1e6, 1e6),
    "d": st.one_of(st.decimals(places=2, min_value=-10**8, max_value=10**8, allow_nan=False).map(str),
                   st.floats(-1e8, 1e8).map(lambda f: round(f, 2))),
    "s": st.text(max_size=8), "b": st.booleans(),
    "t": st.sampled_from(["2026-11-01T10:00:00", "2026-11-01 10:00:00.5", "2026-11-01T10:00:00+02:00",
                          "2026-11-01T10:00:00Z"]),
    "day": st.sampled_from(["2026-11-01", "2024-02-29"]), "raw": st.text(max_size=4),
}
#: values at or past the edge of what each column holds
EDGE = {
    "id": st.sampled_from(edges(64)), "n": st.sampled_from(edges(32)), "tiny": st.sampled_from(edges(8)),
    "x": st.sampled_from([1e308, 5e-324, 10**400]), "f": st.sampled_from([1e39, -1e39, 3.4e38]),
    "d": st.sampled_from(["99999999.99", "100000000.00", "10.125", "1e3", "-0.01", "NaN", "1_0"]),
    "s": st.sampled_from(["", "\u2603", "\ud800"]), "b": st.none(),
    "t": st.sampled_from(["2026-11-01T10:00:00.1234567", "2026-11-01", "2026-11-01t10:00:00z", "2026-11-01T24:00:00",
                          "2026-02-30T10:00:00", "2026-12-31T23:59:60", "2026-11-01T10:00", "+2026-11-01T10:00:00"]),
    "day": st.sampled_from(["2026-02-30", "2026-11-01T00:00:00", "20261101"]), "raw": st.just(""),
}


@st.composite
def documents(draw) -> bytes | None:
    """A record value: mostly objects with every column (values of its type, edges
    included), some with a value of another type, a field missing, a name in another
    case, an extra field, or not JSON at all."""
    kind = draw(st.sampled_from(["good"] * 8 + ["mistyped", "missing", "case", "extra", "garbage", "array", "null"]))
    if kind == "null":
        return None
    if kind == "garbage":
        return draw(st.binary(max_size=20))
    doc = {c: draw(st.one_of(CLEAN[c], CLEAN[c], CLEAN[c], st.none())) for c in COLUMNS}
    if draw(st.booleans()):
        edge = draw(st.sampled_from(COLUMNS))
        doc[edge] = draw(EDGE[edge])
    if kind == "mistyped":
        doc[draw(st.sampled_from(COLUMNS))] = draw(anything)
    elif kind == "missing":
        del doc[draw(st.sampled_from(COLUMNS))]
    elif kind == "case":
        c = draw(st.sampled_from(COLUMNS))
        doc[c.upper()] = doc.pop(c)
    elif kind == "extra":
        doc["other"] = draw(anything)
    text = json.dumps([doc] if kind == "array" else doc, default=str)
    d = doc.get("d")
    if isinstance(d, str) and d[-1:].isdigit() and draw(st.booleans()):  # a number as written, all its digits
        text = text.replace(f'"d": "{d}"', f'"d": {d}')
    return text.encode()


def messages(docs: list[bytes | None], keys: list[bytes | None]) -> list[Message]:
    return [Message(topic="t", partition=2, offset=100 + i, key=k, value=v, timestamp=(1, 1_700_000_000_000 + i),
                    headers=[("h", b"v")]) for i, (v, k) in enumerate(zip(docs, keys))]


def both(source: KafkaSource, msgs: list[Message]) -> tuple[list[dict], list[dict]]:
    decoder = ChunkDecoder(source, source.decoder(None), row_schema(source))
    fast = decoder(msgs).sort_by([("_offset", "ascending")]).to_pylist()
    rows = decoder._row_table([record(m) for m in msgs]).sort_by([("_offset", "ascending")]).to_pylist()
    return fast, rows


@settings(max_examples=150, deadline=None)
@given(docs=st.lists(documents(), min_size=1, max_size=30))
def test_an_append_source_decodes_as_the_row_decoder_does(docs):
    source = KafkaSource("raw.e", "t", SCHEMA, metadata=(("offset", "at"), ("timestamp", "ts"), ("key", "k")))
    fast, rows = both(source, messages(docs, [b"k"] * len(docs)))
    assert fast == rows


@settings(max_examples=100, deadline=None)
@given(docs=st.lists(documents(), min_size=1, max_size=30), ids=st.lists(st.one_of(st.none(), st.integers(0, 5)),
                                                                          min_size=30, max_size=30))
def test_an_upsert_source_decodes_as_the_row_decoder_does(docs, ids):
    source = KafkaSource("raw.u", "t", SCHEMA, envelope="upsert", key=("id",))
    keys = [None if i is None else json.dumps({"id": i}).encode() for i in ids[:len(docs)]]
    fast, rows = both(source, messages(docs, keys))
    assert fast == rows


def test_a_good_chunk_takes_the_fast_path_and_keeps_every_digit():
    source = KafkaSource("raw.e", "t", StructType([StructField("id", LongType()), StructField("d", DecimalType(18, 2)),
                                                  StructField("t", TimestampType())]))
    decoder = ChunkDecoder(source, source.decoder(None), row_schema(source))
    text = b'{"id": 1, "d": 9999999999999999.99, "t": "2026-11-01T12:00:00+02:00"}'  # 18 digits: no float holds them
    table = decoder._fast_table(messages([text] * 3, [None] * 3))
    assert table is not None and table.column("_reason").null_count == 3
    assert table.column("d").to_pylist() == [Decimal("9999999999999999.99")] * 3
    assert [t.isoformat() for t in table.column("t").to_pylist()] == ["2026-11-01T10:00:00+00:00"] * 3
    assert decoder._row_table([record(m) for m in messages([text], [None])]).to_pylist()[0]["d"] == \
        Decimal("9999999999999999.99")
