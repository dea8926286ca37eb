"""Producing test records to the fixtures' broker."""
from __future__ import annotations

import json
from typing import Any, Iterable

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topics(bootstrap: str, *topics: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics]).values():
        try:
            f.result(10)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def produce(bootstrap: str, topic: str, records: Iterable[tuple[Any, Any]]) -> None:
    """(key, value) pairs; dicts and lists are sent as JSON, bytes as they are, None as null."""
    def encode(v: Any) -> bytes | None:
        if v is None or isinstance(v, bytes):
            return v
        return json.dumps(v).encode() if not isinstance(v, str) else v.encode()

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in records:
        p.produce(topic, key=encode(key), value=encode(value))
    assert p.flush(30) == 0
