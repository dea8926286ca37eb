"""One pass of the kept consumer reads several sources from their committed offsets to
their end (``KafkaTopics.fetch``, what a serving tick does when its records are few):
exactly the records after the offsets, committed transactions only, with each
partition's range; a source it cannot read whole is left to a read of its own."""
from __future__ import annotations

import json

from confluent_kafka import Producer
from pyspark.sql.types import LongType, StructField, StructType

from dbt_incremental_stream.connectors.kafka import CLIENT_LOGS, KafkaSettings, KafkaSource, KafkaTopics, read_chunks
from devkit.kafka import create_topics

SCHEMA = StructType([StructField("id", LongType())])


def send(producer: Producer, topic: str, partition: int, ids: range) -> None:
    for i in ids:
        producer.produce(topic, json.dumps({"id": i}).encode(), partition=partition)
    producer.flush(10)


def ids(records: dict[int, list]) -> dict[int, list[int]]:
    return {p: [json.loads(m.value())["id"] for m in msgs] for p, msgs in records.items()}


def ends(topics: KafkaTopics, source: KafkaSource) -> dict[int, int]:
    return {p: e for p, (_, e) in topics.ranges(source, {0: 0, 1: 0})[0].items()}


def test_a_fetch_reads_each_source_from_its_offsets_to_the_end(kafka):
    create_topics(kafka, "fetch_a", "fetch_b", partitions=2)
    producer = Producer({"bootstrap.servers": kafka, **CLIENT_LOGS})
    a, b = KafkaSource("raw.a", "fetch_a", SCHEMA), KafkaSource("raw.b", "fetch_b", SCHEMA)
    topics = KafkaTopics(KafkaSettings({"bootstrap.servers": kafka}))
    try:
        send(producer, "fetch_a", 0, range(0, 5))
        send(producer, "fetch_a", 1, range(5, 8))
        send(producer, "fetch_b", 0, range(100, 104))
        assert topics.fetch({"raw.b": (b, {0: 0})}, 100) == {}  # partition 1 not read yet: its own read
        got = topics.fetch({"raw.a": (a, {0: 2, 1: 0}), "raw.b": (b, {0: 0, 1: 0})}, 100)
        assert got["raw.a"].ranges == {0: (2, 5), 1: (0, 3)} and ids(got["raw.a"].records) == {0: [2, 3, 4],
                                                                                                 1: [5, 6, 7]}
        assert got["raw.b"].ranges == {0: (0, 4), 1: (0, 0)}  # a partition with nothing new
        assert ids(got["raw.b"].records) == {0: [100, 101, 102, 103], 1: []}
        assert ends(topics, a) == {0: 5, 1: 3} and ends(topics, b) == {0: 4, 1: 0}

        send(producer, "fetch_a", 1, range(8, 10))
        send(producer, "fetch_b", 1, range(200, 250))
        got = topics.fetch({"raw.a": (a, {0: 5, 1: 3}), "raw.b": (b, {0: 4, 1: 0})}, 10)
        assert set(got) == {"raw.a"}, "more records than the limit: read on its own"
        assert got["raw.a"].ranges == {0: (5, 5), 1: (3, 5)} and ids(got["raw.a"].records) == {0: [], 1: [8, 9]}
        got = topics.fetch({"raw.b": (b, {0: 4, 1: 0})}, 100)  # the pause of the over-limit read is lifted
        assert got["raw.b"].ranges == {0: (4, 4), 1: (0, 50)} and len(got["raw.b"].records[1]) == 50
    finally:
        topics.close()


def test_a_fetch_reads_what_a_partition_read_does_and_stops_before_an_open_transaction(kafka):
    """Aborted records are the broker's to filter (Tansu 0.6 returns them): the fetch gives
    what the reading consumer gives over the same range, up to the last stable offset."""
    create_topics(kafka, "fetch_txn", partitions=2)
    source = KafkaSource("raw.txn", "fetch_txn", SCHEMA)
    settings = KafkaSettings({"bootstrap.servers": kafka})
    producer = Producer({"bootstrap.servers": kafka, **CLIENT_LOGS, "transactional.id": "fetch-txn"})
    producer.init_transactions(10)
    topics = KafkaTopics(settings)
    try:
        for committed, values in ((True, range(0, 3)), (False, range(3, 6)), (True, range(6, 8))):
            producer.begin_transaction()
            send(producer, "fetch_txn", 0, values)
            producer.commit_transaction(10) if committed else producer.abort_transaction(10)
        producer.begin_transaction()
        send(producer, "fetch_txn", 0, range(8, 10))  # open: not readable yet
        got = topics.fetch({"raw.txn": (source, {0: 0, 1: 0})}, 100)["raw.txn"]
        # the end is the last stable offset: after the second commit's marker (3 + 1 + 3 + 1 + 2 + 1)
        assert got.ranges == {0: (0, 11), 1: (0, 0)}
        read = [json.loads(m.value())["id"] for chunk in read_chunks(settings, "fetch_txn", 0, 0, 11) for m in chunk]
        assert ids(got.records) == {0: read, 1: []} and {0, 1, 2, 6, 7} <= set(read) and not {8, 9} & set(read)
        producer.commit_transaction(10)
        got = topics.fetch({"raw.txn": (source, {0: 11, 1: 0})}, 100)["raw.txn"]
        assert ids(got.records) == {0: [8, 9], 1: []} and got.ranges == {0: (11, 14), 1: (0, 0)}
    finally:
        topics.close()
