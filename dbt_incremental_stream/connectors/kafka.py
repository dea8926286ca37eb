"""Kafka sources: a topic's records as changes of a relation.

A source names a topic, a format (``json``), an envelope and typed columns:

- ``append``: every record is a new row;
- ``upsert``: the record key (``key`` columns) identifies a row; a record replaces the
  row with that key, a record with a null value (tombstone) deletes it;
- ``debezium``: ``{"before": row|null, "after": row|null, "op": ...}`` (optionally inside
  ``"payload"``): ``before`` is deleted, ``after`` inserted;
- ``insert_delete``: ``{"insert": row}`` or ``{"delete": row}``.

Offsets are not committed to Kafka: the pipeline commits them with each tick's state, so a
restart reads exactly the records after the last committed tick. A record that does not
parse or does not fit the columns becomes a :class:`DeadLetter` instead of stopping the
pipeline.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping, Sequence

from pyspark.sql.types import (BooleanType, ByteType, DataType, DateType, DecimalType, DoubleType, FloatType,
                               IntegerType, LongType, ShortType, StringType, StructField, StructType, TimestampType)

from ..errors import ConnectorError, StreamError

#: librdkafka settings whose values are secrets: never printed
SECRET_PARTS = ("password", "secret", "token", "key.pem", "keystore", "sasl.oauthbearer.config")
FORMATS = ("json",)
ENVELOPES = ("append", "upsert", "debezium", "insert_delete")
STARTS = ("earliest", "latest")

Row = tuple[Any, ...]


@dataclass(frozen=True)
class KafkaSettings:
    """``bootstrap.servers`` plus any librdkafka setting (SASL, SSL, timeouts) as given."""

    config: Mapping[str, str]

    @staticmethod
    def from_profile(block: Mapping[str, Any]) -> KafkaSettings:
        """Keys as in librdkafka; ``bootstrap_servers`` may be written with underscores."""
        config = {str(k).replace("bootstrap_servers", "bootstrap.servers"): str(v) for k, v in block.items()}
        if not config.get("bootstrap.servers"):
            raise StreamError("`bootstrap_servers` is required (host:port[,host:port...])")
        return KafkaSettings(config)

    @property
    def bootstrap_servers(self) -> str:
        return self.config["bootstrap.servers"]

    def redacted(self) -> dict[str, str]:
        """The settings fit to print."""
        return {k: "****" if any(p in k.lower() for p in SECRET_PARTS) else v for k, v in self.config.items()}

    def consumer(self, extra: Mapping[str, Any]) -> Any:
        """A consumer that commits nothing to Kafka (offsets live in the pipeline's state) and
        reports the end of each partition without waiting for more."""
        from confluent_kafka import Consumer

        return Consumer({**self.config, "group.id": f"dbt-incremental-stream-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 10,
                         **extra})

    def check(self, timeout: float = 10.0) -> int:
        """Connect and list topics; the number of topics, or a ConnectorError saying what to fix."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        errors: list[str] = []
        admin = AdminClient({**self.config, "error_cb": lambda e: errors.append(str(e))})
        try:
            return len(admin.list_topics(timeout=timeout).topics)
        except KafkaException as e:
            detail = "; ".join(dict.fromkeys(errors)) or str(e)
            raise ConnectorError(
                f"Kafka at {self.bootstrap_servers} is not reachable within {timeout:.0f}s ({detail}); "
                "check `kafka.bootstrap_servers` and the security settings in the profile") from e


@dataclass(frozen=True)
class KafkaSource:
    """A relation whose changes are a topic's records."""

    relation: str
    topic: str
    schema: StructType
    format: str = "json"
    envelope: str = "append"
    key: tuple[str, ...] = ()
    start: str = "earliest"

    def __post_init__(self) -> None:
        where = f"Kafka source {self.relation!r}"
        if not self.topic:
            raise StreamError(f"{where}: `topic` is required")
        if self.format not in FORMATS:
            raise StreamError(f"{where}: format {self.format!r} is not one of {FORMATS}")
        if self.envelope not in ENVELOPES:
            raise StreamError(f"{where}: envelope {self.envelope!r} is not one of {ENVELOPES}")
        if self.start not in STARTS:
            raise StreamError(f"{where}: start {self.start!r} is not one of {STARTS}")
        if not self.schema.fields:
            raise StreamError(f"{where}: declare its columns with a data_type each")
        names = set(self.schema.fieldNames())
        if self.envelope == "upsert" and not self.key:
            raise StreamError(f"{where}: the upsert envelope needs `key` columns")
        unknown = [k for k in self.key if k not in names]
        if unknown:
            raise StreamError(f"{where}: key columns {unknown} are not among its columns {sorted(names)}")

    @staticmethod
    def from_config(relation: str, config: Mapping[str, Any], columns: Mapping[str, str | None]) -> KafkaSource:
        """From a dbt source's ``meta.kafka`` block and its columns' ``data_type``s."""
        untyped = [c for c, t in columns.items() if not t]
        if untyped:
            raise StreamError(f"Kafka source {relation!r}: columns {untyped} need a data_type")
        try:
            schema = StructType.fromDDL(", ".join(f"`{c.lower()}` {t}" for c, t in columns.items()))
        except Exception as e:  # Spark's DDL parser raises several types
            raise StreamError(f"Kafka source {relation!r}: bad column types: {e}") from e
        key = config.get("key") or ()
        return KafkaSource(relation.lower(), str(config.get("topic") or ""), schema,
                           str(config.get("format", "json")), str(config.get("envelope", "append")),
                           tuple(k.lower() for k in ([key] if isinstance(key, str) else key)),
                           str(config.get("start", "earliest")))

    def to_json(self) -> dict[str, Any]:
        return {"relation": self.relation, "topic": self.topic, "schema": self.schema.json(), "format": self.format,
                "envelope": self.envelope, "key": list(self.key), "start": self.start}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> KafkaSource:
        return KafkaSource(doc["relation"], doc["topic"], StructType.fromJson(json.loads(doc["schema"])), doc["format"],
                           doc["envelope"], tuple(doc["key"]), doc["start"])


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class DeadLetter:
    topic: str
    partition: int
    offset: int
    raw: str | None
    reason: str


@dataclass
class Decoded:
    """A batch of records as changes: weighted rows, or (for upsert) the last value per key."""

    rows: list[tuple[Row, int]] = field(default_factory=list)
    upserts: dict[Row, Row | None] = field(default_factory=dict)
    dead: list[DeadLetter] = field(default_factory=list)


def decode(source: KafkaSource, records: Sequence[Record]) -> Decoded:
    out = Decoded()
    for r in records:
        try:
            _decode_one(source, r, out)
        except _Bad as e:
            raw = None if r.value is None else r.value.decode("utf-8", errors="replace")
            out.dead.append(DeadLetter(source.topic, r.partition, r.offset, raw, str(e)))
    return out


class _Bad(Exception):
    pass


def _decode_one(source: KafkaSource, r: Record, out: Decoded) -> None:
    doc = None
    if r.value is not None:
        try:
            doc = json.loads(r.value)
        except (ValueError, UnicodeDecodeError) as e:
            raise _Bad(f"not JSON: {e}") from e
    if source.envelope == "append":
        out.rows.append((_row(source.schema, doc), 1))
    elif source.envelope == "upsert":
        row = None if doc is None else _row(source.schema, doc)
        key = _key(source, r, row)
        out.upserts[key] = row  # the last value per key wins
    elif source.envelope == "debezium":
        if not isinstance(doc, dict):
            raise _Bad("a debezium record is an object with before/after")
        body = doc.get("payload", doc) if isinstance(doc.get("payload"), dict) else doc
        if "before" not in body and "after" not in body:
            raise _Bad("a debezium record needs `before` and/or `after`")
        for part, weight in (("before", -1), ("after", 1)):
            if body.get(part) is not None:
                out.rows.append((_row(source.schema, body[part]), weight))
    else:  # insert_delete
        if not isinstance(doc, dict) or len(doc) != 1 or next(iter(doc)) not in ("insert", "delete"):
            raise _Bad('an insert_delete record is {"insert": row} or {"delete": row}')
        kind, body = next(iter(doc.items()))
        out.rows.append((_row(source.schema, body), 1 if kind == "insert" else -1))


def _key(source: KafkaSource, r: Record, row: Row | None) -> Row:
    """An upsert key: from the value's key columns, or for a tombstone from the record key
    (a JSON object with the key columns, or the bare value of a single key column)."""
    names = source.schema.fieldNames()
    if row is not None:
        return tuple(row[names.index(k)] for k in source.key)
    if r.key is None:
        raise _Bad("a tombstone (null value) needs a record key")
    try:
        doc = json.loads(r.key)
    except (ValueError, UnicodeDecodeError):
        doc = r.key.decode("utf-8", errors="replace")
    if not isinstance(doc, dict):
        if len(source.key) != 1:
            raise _Bad(f"the record key must be an object with {list(source.key)}")
        doc = {source.key[0]: doc}
    fields = {f.name: f for f in source.schema.fields}
    return tuple(_value(fields[k], _get(doc, k)) for k in source.key)


def _get(doc: Mapping[str, Any], name: str) -> Any:
    for k, v in doc.items():
        if k.lower() == name:
            return v
    raise _Bad(f"missing field {name!r}")


def _row(schema: StructType, doc: Any) -> Row:
    if not isinstance(doc, dict):
        raise _Bad(f"expected a JSON object, got {type(doc).__name__}")
    return tuple(_value(f, _get(doc, f.name)) for f in schema.fields)


def _value(f: StructField, v: Any) -> Any:
    """``v`` as column ``f`` holds it; a value of another type is bad input, not a guess."""
    if v is None:
        return None
    t: DataType = f.dataType
    try:
        if isinstance(t, (LongType, IntegerType, ShortType, ByteType)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError
            return v
        if isinstance(t, (DoubleType, FloatType)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError
            return float(v)
        if isinstance(t, DecimalType):
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise TypeError
            return Decimal(str(v))
        if isinstance(t, StringType):
            if not isinstance(v, str):
                raise TypeError
            return v
        if isinstance(t, BooleanType):
            if not isinstance(v, bool):
                raise TypeError
            return v
        if isinstance(t, TimestampType):
            return datetime.fromisoformat(str(v).replace("Z", "+00:00")).replace(tzinfo=None)
        if isinstance(t, DateType):
            return date.fromisoformat(str(v))
    except (TypeError, ValueError, InvalidOperation) as e:
        raise _Bad(f"field {f.name!r}: {v!r} is not a {t.simpleString()}") from e
    return v  # nested types as parsed


class KafkaReader:
    """Reads topics from given offsets to their current end, on the driver."""

    def __init__(self, settings: KafkaSettings, *, timeout: float = 10.0):
        self.settings, self.timeout = settings, timeout
        self._errors: list[str] = []
        self._consumer = settings.consumer({"auto.offset.reset": "earliest",
                                            "error_cb": lambda e: self._errors.append(str(e))})

    def partitions(self, source: KafkaSource) -> list[int]:
        from confluent_kafka import KafkaException

        try:
            meta = self._consumer.list_topics(source.topic, timeout=self.timeout)
        except KafkaException as e:
            raise ConnectorError(f"Kafka source {source.relation!r}: Kafka at {self.settings.bootstrap_servers} is not "
                                 f"reachable ({'; '.join(self._errors) or e}); check the profile's `kafka:` block") from e
        topic = meta.topics.get(source.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise ConnectorError(f"Kafka source {source.relation!r}: topic {source.topic!r} does not exist "
                                 f"at {self.settings.bootstrap_servers}; create it or fix `topic` in its meta")
        return sorted(topic.partitions)

    def end(self, source: KafkaSource) -> dict[int, int]:
        """The offset after the last record of each partition, as of now."""
        from confluent_kafka import TopicPartition

        ends = {}
        for p in self.partitions(source):
            low, high = self._consumer.get_watermark_offsets(TopicPartition(source.topic, p), timeout=self.timeout)
            ends[p] = high
        return ends

    def read(self, source: KafkaSource, start: Mapping[int, int], *, limit: int | None = None,
             until: Mapping[int, int] | None = None) -> tuple[list[Record], dict[int, int]]:
        """Records from ``start`` (next offset per partition; a missing partition starts at
        the source's ``start``) up to the end of each partition as the consumer finds it
        (end-of-partition events, not the watermark, which can lag), at most ``limit``; or,
        given ``until``, exactly up to those offsets (a tick read again after a crash).
        Returns the records and the next offset per partition."""
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, TopicPartition

        default = OFFSET_BEGINNING if source.start == "earliest" else OFFSET_END
        partitions = self.partitions(source)
        position = {p: start.get(p, default) for p in partitions}
        records: list[Record] = []
        open_ = {p for p in partitions if until is None or until.get(p, 0) > max(position[p], 0)}
        if not open_:
            return records, {p: o for p, o in position.items() if o >= 0}
        self._consumer.assign([TopicPartition(source.topic, p, position[p]) for p in partitions])
        try:
            while open_ and (limit is None or len(records) < limit):
                msg = self._consumer.poll(self.timeout)
                if msg is None:
                    raise ConnectorError(f"Kafka source {source.relation!r}: no answer from "
                                         f"{self.settings.bootstrap_servers} within {self.timeout:.0f}s "
                                         f"({'; '.join(self._errors) or 'no error reported'})")
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        open_.discard(msg.partition())
                        position[msg.partition()] = msg.offset()
                        continue
                    raise ConnectorError(f"Kafka source {source.relation!r}: {msg.error()}")
                p = msg.partition()
                if p not in open_:
                    continue
                records.append(Record(p, msg.offset(), msg.key(), msg.value()))
                position[p] = msg.offset() + 1
                if until is not None and position[p] >= until.get(p, 0):
                    open_.discard(p)
        finally:
            self._consumer.unassign()
        return records, {p: o for p, o in position.items() if o >= 0}

    def close(self) -> None:
        self._consumer.close()


SINK_ENVELOPES = ("insert_delete", "upsert")
TICK_HEADER = "dbt_stream_tick"


@dataclass(frozen=True)
class KafkaSink:
    """A model's changes mirrored to a topic, as JSON: ``insert_delete`` writes
    ``{"insert": row}`` / ``{"delete": row}`` (once per copy); ``upsert`` writes each changed
    row under its ``key`` columns, and a null value for a key whose row went away."""

    topic: str
    envelope: str = "insert_delete"
    key: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.topic:
            raise StreamError("sink: `topic` is required")
        if self.envelope not in SINK_ENVELOPES:
            raise StreamError(f"sink: envelope {self.envelope!r} is not one of {SINK_ENVELOPES}")
        if self.envelope == "upsert" and not self.key:
            raise StreamError("sink: the upsert envelope needs `key` columns")

    @staticmethod
    def from_config(config: Mapping[str, Any] | None) -> KafkaSink | None:
        if not config:
            return None
        if str(config.get("format", "json")) != "json":
            raise StreamError(f"sink: format {config.get('format')!r} is not supported (json)")
        key = config.get("key") or ()
        return KafkaSink(str(config.get("topic") or ""), str(config.get("envelope", "insert_delete")),
                         tuple(k.lower() for k in ([key] if isinstance(key, str) else key)))

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "envelope": self.envelope, "key": list(self.key)}

    def messages(self, columns: Sequence[str], changes: Sequence[tuple[Row, int]]) -> list[tuple[Any, Any]]:
        """(key, value) documents for one tick's consolidated changes (row, weight)."""
        docs = [(dict(zip(columns, row)), w) for row, w in changes]
        if self.envelope == "insert_delete":
            return [(None, {"insert" if w > 0 else "delete": d}) for d, w in docs for _ in range(abs(w))]
        out: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        for d, w in sorted(docs, key=lambda dw: dw[1]):  # deletes first: an update's insert wins
            k = tuple(d[c] for c in self.key)
            out[k] = (dict(zip(self.key, k)), d if w > 0 else None)
        return list(out.values())


class KafkaWriter:
    """Writes a tick's messages to a sink topic in one Kafka transaction, once: every
    message carries its tick in a header, and a tick the topic already holds (written before
    a crash, then redone) is not written again."""

    def __init__(self, settings: KafkaSettings, relation: str, *, timeout: float = 30.0):
        from confluent_kafka import Producer

        self.settings, self.timeout = settings, timeout
        self._producer = Producer({**settings.config, "transactional.id": f"dbt-incremental-stream.{relation}",
                                   "linger.ms": 5})
        self._producer.init_transactions(timeout)
        self._last: dict[str, int] = {}

    def last_tick(self, topic: str) -> int:
        """The newest tick a topic holds (0: none), from the last message of each partition."""
        from confluent_kafka import TopicPartition

        if topic in self._last:
            return self._last[topic]
        consumer = self.settings.consumer({"isolation.level": "read_committed"})
        try:
            meta = consumer.list_topics(topic, timeout=self.timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise ConnectorError(f"sink topic {topic!r} does not exist at {self.settings.bootstrap_servers}; "
                                     "create it or fix the model's `sink.topic`")
            last = 0
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self.timeout)
                # the tail is enough: a tick is one transaction, and its commit marker takes an offset
                consumer.assign([TopicPartition(topic, p, max(low, high - 8))])
                while (msg := consumer.poll(self.timeout)) is not None and msg.error() is None:
                    last = max([last, *(int(v) for k, v in (msg.headers() or []) if k == TICK_HEADER)])
            self._last[topic] = last
            return last
        finally:
            consumer.close()

    def write(self, topic: str, tick: int, messages: Sequence[tuple[Any, Any]]) -> bool:
        """Write one tick's messages atomically unless the topic has the tick already."""
        if self.last_tick(topic) >= tick:
            return False
        headers = [(TICK_HEADER, str(tick).encode())]
        self._producer.begin_transaction()
        try:
            for key, value in messages:
                self._producer.produce(topic, key=None if key is None else json.dumps(key, default=str).encode(),
                                       value=None if value is None else json.dumps(value, default=str).encode(),
                                       headers=headers)
                self._producer.poll(0)
            self._producer.commit_transaction(self.timeout)
        except Exception:
            self._producer.abort_transaction(self.timeout)
            raise
        self._last[topic] = tick
        return True

    def close(self) -> None:
        self._producer.flush(self.timeout)
