"""Topics and records for a test broker: create topics, produce JSON records."""
from __future__ import annotations

import json
from typing import Any, Iterable

from dbt_incremental_stream.connectors.kafka import CLIENT_LOGS
from dbt_incremental_stream.errors import ConnectorError


def create_topics(bootstrap: str, *topics: str, partitions: int = 2) -> None:
    """Create topics (those that exist already are left as they are)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_LOGS})
    new = [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics]
    for f in admin.create_topics(new).values():
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

    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **CLIENT_LOGS})
    for key, value in records:
        while True:
            try:
                p.produce(topic, key=encode(key), value=encode(value))
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.05)
    if p.flush(30):
        raise ConnectorError(f"{bootstrap}: records for {topic!r} not delivered within 30s")
