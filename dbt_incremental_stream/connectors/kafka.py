"""Kafka sources and sinks: a topic's records as changes of a relation, and back.

A source names a topic, a format (:mod:`.formats`), an envelope (:mod:`.envelopes`),
typed columns, optional Kafka metadata columns and where to start (``earliest``,
``latest`` or a timestamp). Offsets are not committed to Kafka: the pipeline commits them
with each tick's state, so a restart reads exactly the records after the last committed
tick. The driver decides each partition's offset range for a tick
(:class:`KafkaTopics`); executors read and decode the ranges in parallel
(:mod:`.datasource`). While serving, a tick's few records of sources read to their end
at the last tick are fetched by the driver's kept consumer in one pass over all of them
(:meth:`KafkaTopics.fetch`): on a broker whose every request costs, requests per tick are
what a long-lived process's tick time follows. A record that does not parse or does not
fit the columns becomes a dead letter instead of stopping the pipeline.

Sinks, the other way, are in :mod:`.sinks`.
"""
from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, cast

from pyspark.sql.types import StructField, StructType

from ..errors import ConnectorError, StreamError
from .envelopes import ENVELOPES_OF, METADATA, Record
from .formats import FORMATS, Decoder, Registry

#: librdkafka settings whose values are secrets: never printed
SECRET_PARTS = ("password", "secret", "token", "key.pem", "keystore", "sasl.oauthbearer.config", "user.info")
STARTS = ("earliest", "latest")  # or an ISO timestamp
#: the keys of a dbt source's ``meta.kafka`` block (docs/reference/sources.md has each one)
SOURCE_KEYS = ("topic", "format", "envelope", "key", "start", "include", "schema_file", "avro_schema",
               "dead_letter_topic", "expire")


def is_secret(key: str) -> bool:
    """Whether a setting's value must never be printed, logged or put in a query plan."""
    return any(p in key.lower() for p in SECRET_PARTS)


class _DebugLog:
    """librdkafka's log lines (a broker that does not answer makes one per attempt) at
    DEBUG in this package's log instead of on stderr: the error a client raises says what
    to fix."""

    def log(self, level: int, msg: str, *args: Any) -> None:
        logging.getLogger(__name__).debug(msg, *args)


#: the setting every Kafka client here is made with
CLIENT_LOGS: dict[str, Any] = {"logger": _DebugLog()}

#: consumer settings a profile may change: a partition with nothing new ends a read after
#: this wait (the broker holds an empty fetch that long), so a tick reading idle
#: partitions waits about this long
CONSUMER_DEFAULTS: dict[str, Any] = {"fetch.wait.max.ms": 10}


class ClientErrors:
    """librdkafka's error callback, keeping the last :data:`KEPT` distinct errors it reported,
    for the message of a read or a connection that failed. Bounded: a consumer kept for the
    life of ``dbt-stream serve`` sees a broker outage reported every few seconds for as long
    as it lasts."""

    KEPT = 10

    def __init__(self) -> None:
        self._seen: dict[str, None] = {}

    def __call__(self, error: Any) -> None:
        text = str(error)
        self._seen.pop(text, None)  # the latest last
        self._seen[text] = None
        while len(self._seen) > self.KEPT:
            del self._seen[next(iter(self._seen))]

    def __len__(self) -> int:
        return len(self._seen)

    def __str__(self) -> str:
        return "; ".join(self._seen)


@dataclass(frozen=True)
class KafkaSettings:
    """``bootstrap.servers`` plus any librdkafka setting (SASL, SSL, timeouts) as given, and
    the schema registry Avro topics use."""

    config: Mapping[str, str]
    registry: Registry | None = None

    @staticmethod
    def from_profile(block: Mapping[str, Any]) -> KafkaSettings:
        """Keys as in librdkafka; ``bootstrap_servers`` may be written with underscores."""
        block = dict(block)
        registry = Registry.from_config(block.pop("schema_registry", None))
        config = {str(k).replace("bootstrap_servers", "bootstrap.servers"): str(v) for k, v in block.items()}
        if not config.get("bootstrap.servers"):
            raise StreamError("`bootstrap_servers` is required (host:port[,host:port...])")
        return KafkaSettings(config, registry)

    @staticmethod
    def required(settings: KafkaSettings | None) -> KafkaSettings:
        """The settings of a project that reads or writes a topic, which a profile may lack."""
        if settings is None:
            raise ConnectorError("models read or write Kafka topics, but the profile has no `kafka:` block with "
                                 "bootstrap_servers")
        return settings

    @property
    def bootstrap_servers(self) -> str:
        return self.config["bootstrap.servers"]

    def redacted(self) -> dict[str, str]:
        """The settings fit to print."""
        shown = {**self.config, **({"schema_registry.url": self.registry.url} if self.registry else {})}
        return {k: "****" if is_secret(k) else v for k, v in shown.items()}

    def consumer_config(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        """A consumer's librdkafka settings: the engine's defaults, then the profile's (a
        broker that answers an empty fetch late, or a slow link, may want another
        ``fetch.wait.max.ms``), then what exactly-once reading needs, which a profile cannot
        change: no group offsets in Kafka (they live in the pipeline's state), committed
        transactions only, and an event at the end of each partition."""
        return {**CONSUMER_DEFAULTS, **self.config, **CLIENT_LOGS,
                "group.id": f"dbt-incremental-stream-{uuid.uuid4().hex}", "enable.auto.commit": False,
                "enable.partition.eof": True, "isolation.level": "read_committed", **extra}

    def consumer(self, extra: Mapping[str, Any]) -> Any:
        """A consumer made with :meth:`consumer_config`."""
        from confluent_kafka import Consumer

        return Consumer(self.consumer_config(extra))

    def check(self, timeout: float = 10.0) -> int:
        """Connect and list topics; the number of topics, or a ConnectorError saying what to fix."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        errors = ClientErrors()
        # the stub types conf values as str / int / float / bool; librdkafka takes callbacks too
        settings: dict[str, Any] = {**self.config, **CLIENT_LOGS, "error_cb": errors}
        admin = AdminClient(settings)
        try:
            return len(admin.list_topics(timeout=timeout).topics)
        except KafkaException as e:
            raise self.unreachable(timeout, errors, e) from e

    def unreachable(self, timeout: float, errors: ClientErrors, cause: Any, who: str = "") -> ConnectorError:
        """The error for a broker that did not answer: the librdkafka errors seen, and the
        settings to look at (the security ones when it was authentication or TLS)."""
        detail = str(errors) or str(cause)
        if any(w in detail.lower() for w in ("sasl", "authentication", "ssl", "certificate")):
            return ConnectorError(f"{who}Kafka at {self.bootstrap_servers} refused the connection's security "
                                  f"({detail}); check the security settings (security.protocol, sasl.*, ssl.*) in "
                                  "the profile's `kafka:` block")
        return ConnectorError(f"{who}Kafka at {self.bootstrap_servers} is not reachable within {timeout:.0f}s "
                              f"({detail}); check `bootstrap_servers` and the security settings in the profile's "
                              "`kafka:` block")


@dataclass(frozen=True)
class KafkaSource:
    """A relation whose changes are a topic's records. ``schema`` holds the columns read
    from the record value; ``metadata`` adds Kafka's own (kind, column) after them."""

    relation: str
    topic: str
    schema: StructType
    format: str = "json"
    envelope: str = "append"
    key: tuple[str, ...] = ()
    start: str = "earliest"
    metadata: tuple[tuple[str, str], ...] = ()
    avro_schema: str | None = None  # the writer schema's JSON (from a schema file)
    dead_letter_topic: str | None = None
    expire: bool = False  # rows out of every model's temporal filters for good leave the retained input

    def __post_init__(self) -> None:
        where = f"Kafka source {self.relation!r}"
        if not self.topic:
            raise StreamError(f"{where}: `topic` is required")
        if self.format not in FORMATS:
            raise StreamError(f"{where}: format {self.format!r} is not one of {FORMATS}")
        if self.envelope not in ENVELOPES_OF[self.format]:
            raise StreamError(f"{where}: envelope {self.envelope!r} is not one of {ENVELOPES_OF[self.format]} "
                              f"(for format {self.format})")
        if self.start not in STARTS:
            try:
                self.start_time
            except ValueError:
                raise StreamError(f"{where}: start {self.start!r} is not one of {STARTS} or an ISO timestamp") \
                    from None
        if not self.schema.fields:
            raise StreamError(f"{where}: declare its columns with a data_type each")
        names = set(self.schema.fieldNames())
        if self.envelope == "upsert" and not self.key:
            raise StreamError(f"{where}: the upsert envelope needs `key` columns")
        unknown = [k for k in self.key if k not in names]
        if unknown:
            raise StreamError(f"{where}: key columns {unknown} are not among its columns {sorted(names)}")
        bad = [k for k, _ in self.metadata if k not in METADATA]
        if bad:
            raise StreamError(f"{where}: `include` {bad} is not Kafka metadata {sorted(METADATA)}")
        clash = [c for _, c in self.metadata if c in names]
        if clash:
            raise StreamError(f"{where}: metadata columns {clash} clash with value columns")
        if self.format == "avro" and self.avro_schema is not None:
            try:
                import fastavro

                fastavro.parse_schema(json.loads(self.avro_schema))
            except Exception as e:  # fastavro's schema errors have several types
                raise StreamError(f"{where}: its Avro schema does not parse: {e}") from e

    @property
    def start_time(self) -> datetime:
        return datetime.fromisoformat(self.start.replace("Z", "+00:00"))

    @property
    def columns(self) -> StructType:
        """The relation's columns: the value's, then the metadata's."""
        return StructType(list(self.schema.fields) + [StructField(c, METADATA[k], True)
                                                      for k, c in self.metadata])

    @staticmethod
    def from_config(relation: str, config: Mapping[str, Any], columns: Mapping[str, str | None]) -> KafkaSource:
        """From a dbt source's ``meta.kafka`` block and its columns' ``data_type``s (metadata
        columns need none)."""
        unknown = sorted(set(config) - set(SOURCE_KEYS))
        if unknown:
            raise StreamError(f"Kafka source {relation!r}: unknown `meta.kafka` keys {unknown}: "
                              f"the keys are {list(SOURCE_KEYS)}")
        include = config.get("include") or ()
        metadata = tuple((str(k), str(c).lower()) for k, c in (
            include.items() if isinstance(include, Mapping) else ((k, f"kafka_{k}") for k in include)))
        meta_columns = {c for _, c in metadata}
        columns = {c.lower(): t for c, t in columns.items() if c.lower() not in meta_columns}
        untyped = [c for c, t in columns.items() if not t]
        if untyped:
            raise StreamError(f"Kafka source {relation!r}: columns {untyped} need a data_type")
        try:
            schema = cast(StructType, StructType.fromDDL(", ".join(f"`{c}` {t}" for c, t in columns.items())))
        except Exception as e:  # Spark's DDL parser raises several types
            raise StreamError(f"Kafka source {relation!r}: bad column types: {e}") from e
        key = config.get("key") or ()
        avro = config.get("avro_schema")
        return KafkaSource(relation.lower(), str(config.get("topic") or ""), schema,
                           str(config.get("format", "json")), str(config.get("envelope", "append")),
                           tuple(k.lower() for k in ([key] if isinstance(key, str) else key)),
                           str(config.get("start", "earliest")), metadata,
                           avro if avro is None or isinstance(avro, str) else json.dumps(avro),
                           config.get("dead_letter_topic"), _flag(config.get("expire", False), relation, "expire"))

    def to_json(self) -> dict[str, Any]:
        return {"relation": self.relation, "topic": self.topic, "schema": self.schema.json(), "format": self.format,
                "envelope": self.envelope, "key": list(self.key), "start": self.start,
                "metadata": [list(m) for m in self.metadata], "avro_schema": self.avro_schema,
                "dead_letter_topic": self.dead_letter_topic, "expire": self.expire}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> KafkaSource:
        return KafkaSource(doc["relation"], doc["topic"], StructType.fromJson(json.loads(doc["schema"])), doc["format"],
                           doc["envelope"], tuple(doc["key"]), doc["start"],
                           tuple((k, c) for k, c in doc.get("metadata", ())), doc.get("avro_schema"),
                           doc.get("dead_letter_topic"), bool(doc.get("expire", False)))

    def decoder(self, registry: Registry | None) -> Decoder:
        return Decoder(self.format, self.schema, self.avro_schema, registry)


def _flag(value: Any, relation: str, name: str) -> bool:
    if isinstance(value, bool):
        return value
    raise StreamError(f"Kafka source {relation!r}: `{name}` is true or false, not {value!r}")


#: a partition's offsets for a tick: [start, end)
Ranges = dict[int, tuple[int, int]]


def shares(ranges: Mapping[int, tuple[int, int]], limit: int) -> dict[int, int]:
    """``limit`` split over the partitions in equal shares, none more than its range holds;
    what a short partition leaves goes to the others."""
    share, left = {p: 0 for p in ranges}, min(limit, sum(e - s for s, e in ranges.values()))
    while left > 0:
        open_ = [p for p in ranges if ranges[p][0] + share[p] < ranges[p][1]]
        each = max(1, left // len(open_))
        for p in open_:
            take = min(each, ranges[p][1] - ranges[p][0] - share[p], left)
            share[p] += take
            left -= take
    return share


class KafkaTopics:
    """What the driver asks Kafka: a topic's partitions, where a source starts, and where
    each partition ends now — enough to give each tick exact offset ranges."""

    def __init__(self, settings: KafkaSettings, *, timeout: float = 10.0):
        self.settings, self.timeout = settings, timeout
        self._errors = ClientErrors()
        self._consumer = settings.consumer({"error_cb": self._errors})

    def partitions(self, source: KafkaSource) -> list[int]:
        from confluent_kafka import KafkaException

        try:
            meta = self._consumer.list_topics(source.topic, timeout=self.timeout)
        except KafkaException as e:
            self._consumer.poll(0.5)  # error callbacks (the cause: auth, TLS, DNS) are served by poll
            raise self.settings.unreachable(self.timeout, self._errors, e,
                                            f"Kafka source {source.relation!r}: ") from e
        topic = meta.topics.get(source.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise ConnectorError(f"Kafka source {source.relation!r}: topic {source.topic!r} does not exist "
                                 f"at {self.settings.bootstrap_servers}; create it or fix `topic` in its meta")
        return sorted(topic.partitions)

    def ranges(self, source: KafkaSource, committed: Mapping[int, int], *,
               limit: int | None = None) -> tuple[Ranges, int]:
        """Each partition's offsets for the next tick: from the committed offset (a partition
        not read yet starts at the source's ``start``) up to the partition's end now, at most
        ``limit`` offsets in all. Also how many offsets the limit left for later ticks."""
        partitions = self.partitions(source)
        ends = self._ends(source, partitions)
        fresh = [p for p in partitions if p not in committed]
        starts = {**dict(committed), **self._starts(source, fresh, ends)}
        ranges = {p: (starts[p], max(starts[p], ends[p])) for p in partitions}
        total = sum(e - s for s, e in ranges.values())
        if limit is None or total <= limit:
            return ranges, 0
        share = shares(ranges, limit)
        return {p: (s, s + share[p]) for p, (s, e) in ranges.items()}, total - limit

    def _starts(self, source: KafkaSource, partitions: list[int], ends: Mapping[int, int]) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        if not partitions:
            return {}
        if source.start == "earliest":
            return {p: self._consumer.get_watermark_offsets(TopicPartition(source.topic, p), timeout=self.timeout)[0]
                    for p in partitions}
        if source.start == "latest":
            return {p: ends[p] for p in partitions}
        at = source.start_time
        ms = int((at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp() * 1000)
        found = self._consumer.offsets_for_times([TopicPartition(source.topic, p, ms) for p in partitions],
                                                 timeout=self.timeout)
        return {tp.partition: ends[tp.partition] if tp.offset < 0 else tp.offset for tp in found}

    def _ends(self, source: KafkaSource, partitions: list[int]) -> dict[int, int]:
        """The offset after each partition's last committed record: the high watermark, then
        read on from there to the end-of-partition event (the watermark was seen to lag)."""
        from confluent_kafka import KafkaError, TopicPartition

        ends = {p: self._consumer.get_watermark_offsets(TopicPartition(source.topic, p), timeout=self.timeout)[1]
                for p in partitions}
        self._consumer.assign([TopicPartition(source.topic, p, ends[p]) for p in partitions])
        open_ = set(partitions)
        try:
            while open_:
                msg = self._poll(f"Kafka source {source.relation!r}")
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise ConnectorError(f"Kafka source {source.relation!r}: {err}")
                p = msg.partition()
                if err is not None:
                    open_.discard(p)
                    ends[p] = max(ends[p], msg.offset())
                else:
                    ends[p] = max(ends[p], msg.offset() + 1)
        finally:
            self._consumer.unassign()
        return ends

    def fetch(self, wanted: Mapping[str, tuple[KafkaSource, Mapping[int, int]]], limit: int) -> dict[str, Fetched]:
        """The records of several sources (relation → the source and its committed
        offsets) from the committed offsets to each partition's end now, read together by
        the kept consumer: while serving, one fetch round trip for all of them, in place
        of a watermark request and an end probe per partition and a consumer per
        partition read. A partition's end is where the fetch response that carried its
        last record put the high watermark, or its end-of-partition event. Left out, for
        :meth:`ranges` and a read of their own: a source with a partition not read yet,
        one whose topic an earlier source takes, and one with more than ``limit`` records."""
        from confluent_kafka import KafkaError, TopicPartition

        reads: dict[str, _Fetch] = {}  # by topic
        for rel, (source, committed) in wanted.items():
            partitions = self.partitions(source)
            if source.topic not in reads and all(p in committed for p in partitions):
                reads[source.topic] = _Fetch(rel, {p: committed[p] for p in partitions})
        if not reads:
            return {}
        self._consumer.assign([TopicPartition(t, p, o) for t, f in reads.items() for p, o in f.starts.items()])
        paused: list[Any] = []
        who = "Kafka sources " + ", ".join(repr(f.relation) for f in reads.values())
        try:
            while any(f.open for f in reads.values()):
                last: dict[tuple[str, int], int] = {}  # each partition's last record in this batch
                for msg in self._consumer.consume(10_000, 0) or [self._poll(who)]:
                    f, p, err = reads[msg.topic()], msg.partition(), msg.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        raise ConnectorError(f"Kafka source {f.relation!r}: {err}")
                    if f.over or p in f.ends:
                        continue
                    if err is not None:
                        f.ends[p] = max(f.starts[p], msg.offset())
                        continue
                    f.records[p].append(msg)
                    f.count += 1
                    last[msg.topic(), p] = msg.offset()
                    if f.count > limit:  # its own read will do: stop fetching it
                        f.over = True
                        stop = [TopicPartition(msg.topic(), q) for q in f.starts]
                        self._consumer.pause(stop)
                        paused += stop
                for (topic, p), offset in last.items():
                    f = reads[topic]
                    if not f.over and p not in f.ends and offset + 1 >= self._consumer.get_watermark_offsets(
                            TopicPartition(topic, p), cached=True)[1]:
                        f.ends[p] = offset + 1
        finally:
            if paused:
                self._consumer.resume(paused)
            self._consumer.unassign()
        return {f.relation: Fetched({p: (s, f.ends[p]) for p, s in f.starts.items()}, f.records)
                for f in reads.values() if not f.over}

    def _poll(self, who: str) -> Any:
        """The next message or event of the kept consumer; a ConnectorError if none comes."""
        msg = self._consumer.poll(self.timeout)
        if msg is None:
            raise ConnectorError(f"{who}: no answer from {self.settings.bootstrap_servers} within "
                                 f"{self.timeout:.0f}s ({self._errors or 'no error reported'})")
        return msg

    def close(self) -> None:
        self._consumer.close()


@dataclass(frozen=True)
class Fetched:
    """A source's records read to the end by :meth:`KafkaTopics.fetch`: each partition's
    range and its records (confluent-kafka's ``Message`` objects)."""

    ranges: Ranges
    records: dict[int, list[Any]]


@dataclass
class _Fetch:
    """One source's part of a :meth:`KafkaTopics.fetch` under way."""

    relation: str
    starts: dict[int, int]
    ends: dict[int, int] = field(default_factory=dict)
    records: dict[int, list[Any]] = field(init=False)
    count: int = 0
    over: bool = False  # more records than the limit

    def __post_init__(self) -> None:
        self.records = {p: [] for p in self.starts}

    @property
    def open(self) -> bool:
        return not self.over and len(self.ends) < len(self.starts)


def read_chunks(settings: KafkaSettings, topic: str, partition: int, start: int, end: int, size: int = 10_000,
                timeout: float = 30.0, most: int | None = None, reached: dict[int, int] | None = None
                ) -> Iterator[list[Any]]:
    """The messages of one partition in [start, end) (committed transactions only; at most
    ``most`` of them), ``size`` at a time: confluent-kafka's ``Message`` objects, as the
    client hands them over in one call. ``reached[partition]``: the offset the read got to
    (``end``, or after the last record when ``most`` stopped it short of records left)."""
    from confluent_kafka import KafkaError, TopicPartition

    errors = ClientErrors()
    consumer = settings.consumer({"error_cb": errors})
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position, left = start, end - start if most is None else most
        chunk: list[Any] = []
        while position < end and left > 0:
            # what the client holds now, else wait for one: a range whose transactions left
            # markers holds fewer messages than offsets, which a count would wait for
            msgs = consumer.consume(min(size - len(chunk), end - position, left), 0) or consumer.consume(1, timeout)
            if not msgs:
                raise ConnectorError(f"Kafka topic {topic!r} partition {partition}: offsets {position}..{end} "
                                     f"not readable within {timeout:.0f}s ({errors or 'no error'})")
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise ConnectorError(f"Kafka topic {topic!r} partition {partition}: {err}")
                    position = max(position, msg.offset())  # only aborted records or markers were left
                    continue
                if msg.offset() >= end:
                    position = end
                    break
                position = msg.offset() + 1
                chunk.append(msg)
                left -= 1
                if not left:
                    break
            if len(chunk) == size or chunk and (position >= end or not left):
                yield chunk
                chunk = []
        if position < end:  # stopped by ``most``: only markers may be left before the end
            for msg in consumer.consume(1, 0.2):
                if msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF or msg.offset() >= end:
                    position = end
        if reached is not None:
            reached[partition] = min(position, end)
    finally:
        consumer.close()


def record(msg: Any) -> Record:
    stamp = msg.timestamp()
    return Record(msg.topic(), msg.partition(), msg.offset(), stamp[1] if stamp[0] else None, msg.key(), msg.value(),
                  tuple(msg.headers() or ()))
