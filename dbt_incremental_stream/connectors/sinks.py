"""Kafka sinks: a model's changes as messages, written exactly once per tick, one Kafka
transaction per topic partition.

Why a transaction per partition: a tick's messages are written by whoever holds its
change, the Spark tasks that compute it (a tick on DataFrames) or the driver (a tick on
arrangements), and a crash can fall between two of their commits. So each partition is
its own unit of exactly-once:

- a message goes to partition ``crc32(key) % partitions``, librdkafka's default for a
  keyed message, or ``crc32(value) % partitions`` when it has no key. A redone tick reads
  the same records, so it makes the same messages and splits them the same way;
- partition ``p`` of a sink is written only by producers of transactional id
  ``dbt-incremental-stream.<project>.<name>.<p>``. Starting one fences any older one (a
  task of an earlier attempt, a process that died mid-transaction: its open transaction
  is aborted);
- every message carries its tick in the ``dbt_stream_tick`` header. Before it writes, a
  writer reads the partition's last committed messages, and skips a partition that holds
  the tick already (committed before a crash, or by an earlier attempt of the task).

A tick redone after any crash therefore writes exactly the partitions it had not
committed. The partition count is read once per process: adding partitions to a sink
topic moves keys between partitions (as for any Kafka producer), so do it with serve
stopped and no tick left to redo.
"""
from __future__ import annotations

import gc
import os
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from ..circuit.operators import WEIGHT
from ..errors import ConnectorError, StreamError
from .envelopes import ENVELOPES_OF, sink_messages, sink_schemas
from .formats import FORMATS, Encoder, Registry
from .kafka import CLIENT_LOGS, KafkaSettings

TICK_HEADER = "dbt_stream_tick"
#: the keys of a model's ``sink`` config (docs/reference/model-configs.md has each one)
SINK_KEYS = ("topic", "envelope", "key", "format")
#: For crash tests, what a writer does once it committed a partition: ``fail`` (raise),
#: or ``pause:<directory>`` (leave a file named topic-partition-tick there, then wait up to
#: a minute to be killed).
AFTER_COMMIT = "DBT_STREAM_AFTER_SINK_COMMIT"
_PARTITION = "_kafka_partition"

Message = tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


@dataclass(frozen=True)
class KafkaSink:
    """A model's changes mirrored to a topic in a format and an envelope
    (:func:`.envelopes.sink_messages`), keyed by its ``key`` columns if it has any."""

    topic: str
    envelope: str = "insert_delete"
    key: tuple[str, ...] = ()
    format: str = "json"

    def __post_init__(self) -> None:
        if not self.topic:
            raise StreamError("sink: `topic` is required")
        if self.format not in FORMATS:
            raise StreamError(f"sink: format {self.format!r} is not one of {FORMATS}")
        if self.envelope not in ENVELOPES_OF[self.format]:
            raise StreamError(f"sink: envelope {self.envelope!r} is not one of {ENVELOPES_OF[self.format]} "
                              f"(for format {self.format})")
        if self.envelope == "upsert" and not self.key:
            raise StreamError("sink: the upsert envelope needs `key` columns")

    @staticmethod
    def from_config(config: Mapping[str, Any] | None) -> KafkaSink | None:
        if not config:
            return None
        unknown = sorted(set(config) - set(SINK_KEYS))
        if unknown:
            raise StreamError(f"sink: unknown keys {unknown}: the keys are {list(SINK_KEYS)}")
        key = config.get("key") or ()
        return KafkaSink(str(config.get("topic") or ""), str(config.get("envelope", "insert_delete")),
                         tuple(k.lower() for k in ([key] if isinstance(key, str) else key)),
                         str(config.get("format", "json")))

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "envelope": self.envelope, "key": list(self.key), "format": self.format}

    def payloads(self, model: str, change: pa.Table, registry: Registry | None) -> list[Message]:
        """One tick's consolidated change (the model's columns, then ``_w``) as message keys
        and values."""
        with _no_collection():
            docs, encode, refuse = self._encoding(model, change, registry)
            return [encode(k, v) for k, v in sink_messages(self.envelope, self.key, docs, refuse)]

    def partitions(self, model: str, change: pa.Table, registry: Registry | None, count: int) -> pa.Array:
        """The partition each row's messages go to, as :meth:`payloads` of the whole change
        would split them: its key's, or (no key) its own message's."""
        with _no_collection():
            docs, encode, refuse = self._encoding(model, change, registry)
            if self.key:
                return pa.array([partition_of(encode({k: d[k] for k in self.key}, None), count) for d, _ in docs],
                                pa.int32())
            return pa.array([partition_of(encode(*sink_messages(self.envelope, (), [(d, 1 if w > 0 else -1)],
                                                                refuse)[0]), count) for d, w in docs], pa.int32())

    def _encoding(self, model: str, change: pa.Table, registry: Registry | None
                  ) -> tuple[list[tuple[dict[str, Any], int]], Callable[[Any, Any], Message],
                             Callable[[str], Exception]]:
        """The change's rows as (document, weight), how to encode a (key, value) message,
        and the error for a change the envelope cannot say."""
        names = [n for n in change.column_names if n != WEIGHT]
        missing = [k for k in self.key if k not in names]
        if missing:
            raise ConnectorError(f"model {model!r}: sink key columns {missing} are not among its columns")

        def refuse(why: str) -> ConnectorError:
            return ConnectorError(f"model {model!r}, sink topic {self.topic!r}: {why}")

        rows = change.select(names)
        columns = from_arrow_schema(rows.schema)
        naive = [pa.field(f.name, pa.timestamp(f.type.unit)) if pa.types.is_timestamp(f.type) else f
                 for f in rows.schema]  # times as the columns hold them: UTC, no zone
        docs = list(zip(rows.cast(pa.schema(naive)).to_pylist(), change.column(WEIGHT).to_pylist()))
        encoder = Encoder(self.format, self.topic, registry,
                          binary=any(isinstance(f.dataType, BinaryType) for f in columns.fields))
        value_schema, key_schema = (sink_schemas(self.envelope, _avro_name(model), columns, self.key)
                                    if self.format == "avro" else (None, None))

        def encode(key: Any, value: Any) -> Message:
            return (None if key is None else encoder(key, self.key, key_schema, "key"),
                    None if value is None else encoder(value, names, value_schema))
        return docs, encode, refuse


@contextmanager
def _no_collection() -> Iterator[None]:
    """Python's cyclic garbage collector paused: a change becomes a document, then a message,
    per row, and collections over those (which hold no cycles) would cost more than the
    encoding."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _avro_name(relation: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in relation)


def partition_of(message: Message, count: int) -> int:
    """The partition a message goes to: by its key (as librdkafka's default partitioner),
    else by its value, never at random (a redone tick must split its messages the same way)."""
    key, value = message[0], message[1]
    return zlib.crc32(key if key is not None else value or b"") % count


def topic_partitions(settings: KafkaSettings, topic: str, timeout: float = 30.0) -> int:
    """How many partitions a sink topic has; a ConnectorError if it does not exist."""
    consumer = settings.consumer({})
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise ConnectorError(f"sink topic {topic!r} does not exist at {settings.bootstrap_servers}; "
                                 "create it or fix the model's `sink.topic`")
        return len(meta.partitions)
    finally:
        consumer.close()


class PartitionWriter:
    """Writes ticks to one partition of a topic, each once, in a transaction of its own."""

    def __init__(self, settings: KafkaSettings, name: str, topic: str, partition: int, *, timeout: float = 30.0):
        self.settings, self.topic, self.partition, self.timeout = settings, topic, partition, timeout
        self.transactional_id = f"dbt-incremental-stream.{name}.{partition}"
        self._producer = self._start()
        self._last: int | None = None

    def _start(self) -> Any:
        """A producer of this partition's transactional id; starting it fences any older one
        and aborts the transaction that one left open."""
        from confluent_kafka import Producer

        producer = Producer({**self.settings.config, **CLIENT_LOGS, "transactional.id": self.transactional_id,
                             "linger.ms": 5})
        producer.init_transactions(self.timeout)
        return producer

    def last_tick(self) -> int:
        """The newest tick the partition holds (0: none), from its last committed messages."""
        if self._last is None:
            self._last = _last_tick(self.settings, self.topic, self.partition, self.timeout)
        return self._last

    def write(self, tick: int, messages: Sequence[Message], after_commit: str | None = None) -> bool:
        """Write one tick's messages (key, value[, headers]) to the partition atomically,
        unless it has the tick already. ``after_commit``: :data:`AFTER_COMMIT`'s value."""
        try:
            return self.begin(tick, messages) and self.commit(tick, after_commit)
        except Exception as e:
            if not _fenced(e):
                raise
            # another process (a task, the driver) wrote this partition since: once more
            return self.begin(tick, messages) and self.commit(tick, after_commit)

    def begin(self, tick: int, messages: Sequence[Message]) -> bool:
        """Open the tick's transaction and produce its messages into it; False (and nothing
        open) when the partition has the tick already."""
        if self.last_tick() >= tick:
            return False
        headers = [(TICK_HEADER, str(tick).encode())]
        producer, produce, topic, partition = self._producer, self._producer.produce, self.topic, self.partition
        try:
            producer.begin_transaction()
            for i, message in enumerate(messages):
                while True:
                    try:
                        produce(topic, message[1], message[0], partition,
                                headers=headers if len(message) == 2 else headers + message[2])
                        break
                    except BufferError:  # the local queue is full: let it drain
                        producer.poll(0.05)
                if i % 10_000 == 9_999:
                    producer.poll(0)
        except Exception:
            self.restart()
            raise
        return True

    def commit(self, tick: int, after_commit: str | None = None) -> bool:
        """Commit the open transaction of ``tick``."""
        try:
            self._producer.commit_transaction(self.timeout)
        except Exception:
            self.restart()
            raise
        self._last = tick
        if after_commit:
            _after_commit(after_commit, self.topic, self.partition, tick)
        return True

    def abort(self) -> None:
        """Abort the open transaction (a producer that cannot is started again)."""
        try:
            self._producer.abort_transaction(self.timeout)
        except Exception:
            self.restart()

    def restart(self) -> None:
        """A new producer of the id (which aborts any transaction left open), and the
        partition's last tick read again: after an error, or being fenced."""
        self._producer, self._last = self._start(), None

    def close(self) -> None:
        self._producer.flush(self.timeout)


def _fenced(e: Exception) -> bool:
    """Whether a producer was fenced by a newer one of its transactional id (or can go on
    no more for another reason)."""
    from confluent_kafka import KafkaError, KafkaException

    return isinstance(e, KafkaException) and (e.args[0].fatal() or e.args[0].code() == KafkaError._FENCED)


def _last_tick(settings: KafkaSettings, topic: str, partition: int, timeout: float) -> int:
    """The highest tick header among a partition's last committed messages: the tail, widened
    while it holds only aborted messages or transaction markers."""
    from confluent_kafka import TopicPartition

    consumer = settings.consumer({})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        span = 8
        while True:
            start = max(low, high - span)
            consumer.assign([TopicPartition(topic, partition, start)])
            ticks = [0]
            while (msg := consumer.poll(timeout)) is not None and msg.error() is None:
                ticks += [int(v) for k, v in msg.headers() or [] if k == TICK_HEADER]
            if len(ticks) > 1 or start == low:
                return max(ticks)
            span *= 8
    finally:
        consumer.close()


def _after_commit(what: str, topic: str, partition: int, tick: int) -> None:
    """The crash tests' point between two partitions' commits (:data:`AFTER_COMMIT`)."""
    if what == "fail":
        raise ConnectorError(f"stopped after committing tick {tick} to {topic}[{partition}] ({AFTER_COMMIT})")
    if what.startswith("pause:"):
        Path(what[len("pause:"):], f"{topic}-{partition}-{tick}").touch()
        time.sleep(60)


class TopicWriter:
    """The driver's writer of sink topics: a tick's messages split by partition, each
    partition written by its :class:`PartitionWriter`, in partition order."""

    def __init__(self, settings: KafkaSettings, name: str, *, timeout: float = 30.0):
        self.settings, self.name, self.timeout = settings, name, timeout
        self._partitions: dict[str, int] = {}
        self._writers: dict[tuple[str, int], PartitionWriter] = {}

    def partitions(self, topic: str) -> int:
        if topic not in self._partitions:
            self._partitions[topic] = topic_partitions(self.settings, topic, self.timeout)
        return self._partitions[topic]

    def write(self, topic: str, tick: int, messages: Sequence[Message]) -> int:
        """Write a tick's messages; how many partitions were written (0: the topic had the
        tick already, or it has no messages)."""
        count = self.partitions(topic)
        split: dict[int, list[Message]] = {}
        for message in messages:
            split.setdefault(partition_of(message, count), []).append(message)
        after_commit = os.environ.get(AFTER_COMMIT)
        writers = {p: self._partition(topic, p) for p in sorted(split)}
        open_: list[int] = []  # begun, not yet committed
        written = 0
        try:  # every partition's messages produced first, so that they are sent while the others are produced
            for p, writer in writers.items():
                if writer.begin(tick, split[p]):
                    open_.append(p)
            while open_:
                written += writers[open_.pop(0)].commit(tick, after_commit)
        except Exception as e:  # the writer that failed started again; the others' transactions go
            for p in open_:
                writers[p].abort()
            if not _fenced(e):
                raise
            # one of them was fenced: each partition on its own (one committed already has the tick)
            return written + sum(writer.write(tick, split[p], after_commit) for p, writer in writers.items())
        return written

    def _partition(self, topic: str, partition: int) -> PartitionWriter:
        if (topic, partition) not in self._writers:
            self._writers[(topic, partition)] = PartitionWriter(self.settings, self.name, topic, partition,
                                                                timeout=self.timeout)
        return self._writers[(topic, partition)]

    def write_from_tasks(self, model: str, sink: KafkaSink, change: DataFrame, tick: int) -> int:
        """Write a tick's change as Spark computes it: each row tagged with its partition,
        shuffled so that each partition is one task's, and written by that task. The number
        of messages of the tick."""
        count = self.partitions(sink.topic)
        tagged = change.mapInArrow(partial(_tag, sink, model, self.settings.registry, count),
                                   StructType([*change.schema.fields, StructField(_PARTITION, IntegerType(), False)]))
        done = tagged.repartition(count, _PARTITION).mapInArrow(
            partial(_publish, sink, model, self.settings, self.name, tick, self.timeout, os.environ.get(AFTER_COMMIT)),
            "partition int, messages long").collect()
        return sum(r.messages for r in done)

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


def _tag(sink: KafkaSink, model: str, registry: Registry | None, count: int,
         batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        table = pa.Table.from_batches([batch])
        yield batch.append_column(_PARTITION, sink.partitions(model, table, registry, count))


def _publish(sink: KafkaSink, model: str, settings: KafkaSettings, name: str, tick: int, timeout: float,
             after_commit: str | None, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's share of a tick's change: every partition in it, written by the task."""
    given = list(batches)
    if not given:
        return
    table = pa.Table.from_batches(given)
    column = table.column(_PARTITION)
    for p in pc.unique(column).to_pylist():
        messages = sink.payloads(model, table.filter(pc.equal(column, p)).drop_columns([_PARTITION]),
                                 settings.registry)
        writer = PartitionWriter(settings, name, sink.topic, p, timeout=timeout)
        try:
            writer.write(tick, messages, after_commit)
        finally:
            writer.close()
        yield pa.RecordBatch.from_pydict({"partition": [p], "messages": [len(messages)]},
                                         pa.schema([("partition", pa.int32()), ("messages", pa.int64())]))
