"""The chunk decoder's fast path gives exactly the row decoder's rows: on random records,
good and malformed, of every column type, for the envelopes it takes, with metadata
columns; and every record that does not decode is a dead letter with the row decoder's
reason. Arrays and maps of scalars take the fast path too; a struct the row decoder."""
from __future__ import annotations

import json
from decimal import Decimal

from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DateType, DecimalType, DoubleType,
                               FloatType, IntegerType, LongType, MapType, StringType, StructField, StructType,
                               TimestampType)

from dbt_incremental_stream.connectors.columnar import ChunkDecoder
from dbt_incremental_stream.connectors.datasource import row_schema
from dbt_incremental_stream.connectors.kafka import KafkaSource, record

SCHEMA = StructType([StructField(n, t) for n, t in [
    ("id", LongType()), ("n", IntegerType()), ("tiny", ByteType()), ("x", DoubleType()), ("f", FloatType()),
    ("d", DecimalType(10, 2)), ("s", StringType()), ("b", BooleanType()), ("t", TimestampType()), ("day", DateType()),
    ("raw", BinaryType()), ("tags", ArrayType(IntegerType())), ("m", MapType(StringType(), DoubleType()))]])
COLUMNS = SCHEMA.fieldNames()
FLAT_SCHEMA = StructType(SCHEMA.fields[:-2])  # no nested columns: for CSV lines and Avro records
FLAT_COLUMNS = FLAT_SCHEMA.fieldNames()

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
    "tags": st.lists(st.one_of(st.integers(-1000, 1000), st.none()), max_size=3),
    "m": st.dictionaries(st.text(max_size=3), st.one_of(st.floats(allow_nan=False), st.integers(-9, 9), st.none()),
                         max_size=2),
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
    "tags": st.sampled_from([[1 << 31], [-(1 << 31)], [1.5], ["1"], [True], [[1]], {}, "1,2", []]),
    "m": st.sampled_from([{"a": "x"}, {"a": [1]}, [1.0], {"": 10 ** 400}, {"a": True}, {}]),
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


def test_a_decimal_far_below_its_scale_is_a_dead_letter_on_both_paths():
    """Arrow took 4.750296090368391e-216 as a DECIMAL(10, 2) 0.00; the row decoder refuses
    a digit past the scale."""
    source = KafkaSource("raw.e", "t", SCHEMA)
    base = {c: None for c in COLUMNS}
    docs = [json.dumps({**base, "id": i}).replace('"d": null', f'"d": {d}').encode()
            for i, d in enumerate(["4.750296090368391e-216", "1.5e2", "1e-300", "0.10"])]
    fast, rows = both(source, messages(docs, [None] * len(docs)))
    assert fast == rows
    assert [r["d"] for r in rows] == [None, Decimal("150.00"), None, Decimal("0.10")]
    assert "digits after the point" in rows[0]["_reason"]


def test_structs_decode_by_the_row_decoder_and_a_mistyped_one_is_a_dead_letter():
    columns = StructType([StructField("id", IntegerType()), StructField("st", StructType([
        StructField("a", IntegerType()), StructField("b", ArrayType(StringType()))]))])
    source = KafkaSource("raw.e", "t", columns)
    decoder = ChunkDecoder(source, source.decoder(None), row_schema(source))
    docs = [b'{"id": 1, "st": {"a": 2, "b": ["x", null]}}', b'{"id": 2, "st": {"b": []}}', b'{"id": 3, "st": null}',
            b'{"id": 4, "st": {"a": "2"}}', b'{"id": 5, "st": [2]}', b'{"id": 6, "st": {"a": 1, "b": "x"}}']
    rows = decoder(messages(docs, [None] * len(docs))).to_pylist()
    assert [r["st"] for r in rows[:3]] == [{"a": 2, "b": ["x", None]}, {"a": None, "b": []}, None]
    assert [r["_reason"] is None for r in rows] == [True, True, True, False, False, False]
    assert "st" in rows[3]["_reason"]


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


@st.composite
def changes(draw, envelope: str) -> bytes | None:
    """A record value of ``envelope`` around :func:`documents`' rows, and the envelope's own
    malformations: both sides or neither, another field, a side that is not an object."""
    def row() -> object:
        value = draw(documents())
        try:
            return json.loads(value) if value is not None else None
        except ValueError:
            return value.decode("latin-1")
    kind = draw(st.sampled_from(["good"] * 6 + ["both", "neither", "extra", "scalar", "null"]))
    if kind == "null":
        return None
    if envelope == "insert_delete":
        doc = {draw(st.sampled_from(["insert", "delete"])): row()}
        if kind == "both":
            doc = {"insert": row(), "delete": row()}
        elif kind == "neither":
            doc = draw(st.sampled_from([{}, {"insert": None}, {"insert": None, "delete": None}]))
        elif kind == "extra":
            doc[draw(st.sampled_from(["op", "Insert"]))] = row()
    else:
        doc = {"before": row(), "after": row(), "op": "u"}
        if kind == "neither":
            doc = draw(st.sampled_from([{"op": "c"}, {"before": None, "after": None}, {"payload": {"op": "d"}}]))
        elif draw(st.booleans()):
            doc.pop(draw(st.sampled_from(["before", "after"])))
        if kind == "extra" or draw(st.booleans()):
            doc = {"payload": doc, **({"before": row()} if kind == "extra" else {})}
    return (json.dumps(doc) if kind != "scalar" else json.dumps([doc])).encode()


@settings(max_examples=100, deadline=None)
@given(data=st.data(), envelope=st.sampled_from(["insert_delete", "debezium"]))
def test_an_insert_delete_or_debezium_source_decodes_as_the_row_decoder_does(data, envelope):
    docs = data.draw(st.lists(changes(envelope), min_size=1, max_size=20))
    source = KafkaSource("raw.c", "t", SCHEMA, envelope=envelope, metadata=(("offset", "at"),))
    fast, rows = both(source, messages(docs, [None] * len(docs)))
    assert sorted(fast, key=repr) == sorted(rows, key=repr)


def test_envelopes_take_the_fast_path():
    columns = StructType([StructField("id", LongType()), StructField("s", StringType())])
    for envelope, value, weights in [
            ("insert_delete", b'{"delete": {"id": 1, "s": "a"}}', [-1]),
            ("debezium", b'{"payload": {"before": {"id": 1, "s": "a"}, "after": {"id": 1, "s": "b"}, "op": "u"}}',
             [-1, 1]),
            ("debezium", b'{"before": null, "after": {"id": 2, "s": "c"}, "op": "c"}', [1])]:
        source = KafkaSource("raw.e", "t", columns, envelope=envelope)
        decoder = ChunkDecoder(source, source.decoder(None), row_schema(source))
        msgs = messages([value], [None])
        table = decoder._columns([decoder._fast(m.value()) for m in msgs], msgs)  # no record refused
        assert table.column("_w").to_pylist() == weights
        assert table.to_pylist() == decoder._row_table([record(m) for m in msgs]).to_pylist()


@st.composite
def csv_values(draw) -> bytes | None:
    """A CSV record value: mostly one line of every column (texts of each column's values,
    edges and empty fields included), some with a field of another type, a field too many
    or too few, a quoted comma or newline, an open quote, or bytes that are not UTF-8."""
    kind = draw(st.sampled_from(["good"] * 8 + ["mistyped", "short", "long", "quoted", "newline", "open", "garbage",
                                                "null", "spaces"]))
    if kind == "null":
        return None
    if kind == "garbage":
        return draw(st.binary(max_size=20))
    fields = []
    for c in FLAT_COLUMNS:
        v = draw(st.one_of(CLEAN[c], CLEAN[c], EDGE[c], st.none()))
        fields.append("" if v is None else str(v).lower() if isinstance(v, bool) else str(v))
    if kind == "mistyped":
        fields[draw(st.integers(0, len(fields) - 1))] = str(draw(anything))
    elif kind == "spaces":
        i = draw(st.integers(0, len(fields) - 1))
        fields[i] = f" {fields[i]} "
    elif kind == "short":
        fields.pop()
    elif kind == "long":
        fields.append("1")
    if "\ud800" in "".join(fields):
        fields = [f.replace("\ud800", "?") for f in fields]
    line = ",".join(f'"{f}"' if "," in f or '"' in f else f for f in fields)
    if kind == "quoted":
        line = line.replace(fields[6], '"a,b ""c"""', 1) if fields[6] else line
    elif kind == "newline":
        line += ',"x\ny"'
    elif kind == "open":
        line += ',"x'
    return line.encode()


@settings(max_examples=150, deadline=None)
@given(values=st.lists(csv_values(), min_size=1, max_size=30),
       ids=st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=30, max_size=30),
       envelope=st.sampled_from(["append", "upsert"]))
def test_a_csv_source_decodes_as_the_row_decoder_does(values, ids, envelope):
    source = KafkaSource("raw.v", "t", FLAT_SCHEMA, format="csv", envelope=envelope,
                         key=("id",) if envelope == "upsert" else ())
    keys = [None if i is None else str(i).encode() for i in ids[:len(values)]]
    fast, rows = both(source, messages(values, keys))
    assert repr(fast) == repr(rows)  # NaN is not equal to itself; its repr is


def test_a_good_csv_chunk_takes_the_fast_path():
    source = KafkaSource("raw.v", "t", FLAT_SCHEMA, format="csv")
    decoder = ChunkDecoder(source, source.decoder(None), row_schema(source))
    line = b'7,-12,+3,1.5e3,0.25,12.50,"a, ""b""",TRUE,2026-11-01T10:00:00,2026-11-01,xyz'
    msgs = messages([line, b",,,,,,,,,,"], [None, None])
    table = decoder._columns([decoder._fast(m.value()) for m in msgs], msgs)  # no record refused
    assert table.to_pylist() == decoder._row_table([record(m) for m in msgs]).to_pylist()
    assert table.column("s").to_pylist() == ['a, "b"', None] and table.column("d").to_pylist()[0] == Decimal("12.50")


#: each field may hold any of these, so a record can carry a value of another type than its column's
AVRO_ANY = ["null", "long", "double", "string", "boolean", "bytes",
            {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 4},
            {"type": "long", "logicalType": "timestamp-micros"}, {"type": "int", "logicalType": "date"}]
AVRO_SCHEMA = {"type": "record", "name": "r", "fields": [{"name": c, "type": AVRO_ANY} for c in FLAT_COLUMNS]}


@st.composite
def avro_values(draw) -> bytes | None:
    """An Avro record value: each field a value of its column's own Python type (edges
    included) or of another, or the record truncated or not Avro at all."""
    import io
    from datetime import date, datetime, timezone

    import fastavro

    kind = draw(st.sampled_from(["good"] * 8 + ["mistyped", "truncated", "garbage", "null"]))
    if kind == "null":
        return None
    if kind == "garbage":
        return draw(st.binary(max_size=20))
    own = {
        "d": st.decimals(places=3, min_value=-10**9, max_value=10**9, allow_nan=False),
        "t": st.datetimes(datetime(1970, 1, 2), datetime(2100, 1, 1)).map(lambda t: t.replace(tzinfo=timezone.utc)),
        "day": st.dates(date(1970, 1, 1), date(2100, 1, 1)), "raw": st.binary(max_size=4),
        "s": st.text(max_size=8).map(lambda s: s.encode("utf-8", "replace").decode("utf-8")),
    }
    doc = {}
    for c in FLAT_COLUMNS:
        strategy = own.get(c, CLEAN[c].filter(lambda v: not isinstance(v, str)) if c not in ("s",) else CLEAN[c])
        doc[c] = draw(st.one_of(strategy, strategy, st.none()))
    if draw(st.booleans()):
        c = draw(st.sampled_from(["id", "n", "tiny", "x", "f"]))
        doc[c] = draw(EDGE[c].filter(lambda v: isinstance(v, (int, float)) and abs(v) < 1 << 63))
    if kind == "mistyped":
        doc[draw(st.sampled_from(FLAT_COLUMNS))] = draw(st.one_of(st.booleans(), st.integers(-5, 5), st.floats(-1, 1),
                                                             st.text(max_size=4), st.binary(max_size=3)))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_SCHEMA), doc)
    value = out.getvalue()
    return value[:draw(st.integers(0, len(value) - 1))] if kind == "truncated" else value


@settings(max_examples=150, deadline=None)
@given(values=st.lists(avro_values(), min_size=1, max_size=30))
def test_an_avro_source_decodes_as_the_row_decoder_does(values):
    source = KafkaSource("raw.a", "t", FLAT_SCHEMA, format="avro", avro_schema=json.dumps(AVRO_SCHEMA))
    fast, rows = both(source, messages(values, [None] * len(values)))
    assert fast == rows


def test_a_good_avro_chunk_takes_the_fast_path():
    import io
    from datetime import date, datetime, timezone

    import fastavro

    source = KafkaSource("raw.a", "t", FLAT_SCHEMA, format="avro", avro_schema=json.dumps(AVRO_SCHEMA))
    decoder = ChunkDecoder(source, source.decoder(None), row_schema(source))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_SCHEMA), {
        "id": 1, "n": 2, "tiny": 3, "x": 1.5, "f": 2, "d": Decimal("12.5"), "s": "a", "b": True,
        "t": datetime(2026, 11, 1, 10, tzinfo=timezone.utc), "day": date(2026, 11, 1), "raw": b"\x00"})
    msgs = messages([out.getvalue()] * 2, [None] * 2)
    table = decoder._columns([decoder._fast(m.value()) for m in msgs], msgs)  # no record refused
    assert table.to_pylist() == decoder._row_table([record(m) for m in msgs]).to_pylist()
