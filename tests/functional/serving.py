"""What the tests of `dbt-stream serve` share: a small dbt project (a Kafka source, an
aggregate with an insert_delete sink, a changelog table with an append sink), serve run
in its own process group with its JSON log events read as they come, and readers of the
sink topics."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from dbt_incremental_stream.connectors.kafka import CLIENT_LOGS

BIN = Path(sys.executable).parent
CATEGORIES = ["books", "games", "garden", "toys", "tools"]

PROFILE = """
serve_test:
  target: dev
  outputs:
    dev:
      type: incremental_stream
      schema: serve
      master: "local[2]"
      state_location: stream_state
      threads: 1
      max_records_per_tick: {per_tick}
      kafka:
        bootstrap_servers: "{{{{ env_var('KAFKA_BOOTSTRAP_SERVERS') }}}}"
      spark_conf:
        spark.sql.shuffle.partitions: "2"
"""
SOURCES = """
version: 2
sources:
  - name: raw
    schema: serve_raw
    tables:
      - name: orders
        meta:
          kafka: {{topic: {topic}, format: json, envelope: append}}
        columns:
          - {{name: id, data_type: bigint}}
          - {{name: category, data_type: string}}
          - {{name: amount, data_type: "decimal(10,2)"}}
"""
TOTALS = """{{{{ config(materialized='streaming_view', \
sink={{'topic': '{out}_totals', 'envelope': 'insert_delete'}}) }}}}
select category, count(*) as n, sum(amount) as total from {{{{ source('raw', 'orders') }}}} group by category
"""
BIG = """{{{{ config(materialized='changelog_table', \
sink={{'topic': '{out}_big', 'envelope': 'append', 'key': ['id']}}) }}}}
select id, category, amount from {{{{ source('raw', 'orders') }}}} where amount > 50
"""


def make_project(root: Path, topic: str, out: str, per_tick: int = 40) -> Path:
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text("name: serve_test\nversion: '1.0'\nconfig-version: 2\nprofile: serve_test\n"
                                          "model-paths: [models]\n")
    (root / "profiles.yml").write_text(PROFILE.format(per_tick=per_tick))
    (root / "models" / "sources.yml").write_text(SOURCES.format(topic=topic))
    (root / "models" / "totals.sql").write_text(TOTALS.format(out=out))
    (root / "models" / "big_orders.sql").write_text(BIG.format(out=out))
    return root


class Serve:
    """`dbt-stream serve` in its own process group, its JSON log events read as they come."""

    def __init__(self, root: Path, env: dict[str, str], *args: str):
        self.proc = subprocess.Popen([str(BIN / "dbt-stream"), "serve", "--log-format", "json", "--interval", "0.2",
                                      *args], cwd=root, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, start_new_session=True)
        self.events: queue.Queue = queue.Queue()
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        STARTED.append(self)

    def _read(self) -> None:
        for line in self.proc.stderr:  # type: ignore[union-attr]
            self.lines.append(line)
            if line.startswith("{"):
                try:
                    self.events.put(json.loads(line))
                except ValueError:
                    pass
        self.events.put(None)

    def wait_for(self, want, timeout: float = 900.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"serve: nothing wanted within {timeout}s:\n{''.join(self.lines[-30:])}")
            if event is None:
                raise AssertionError(f"serve exited ({self.proc.wait()}):\n{''.join(self.lines[-30:])}")
            assert event.get("event") != "error", event
            if want(event):
                return event

    def _jvms(self) -> list[int]:
        """Serve's children: Spark's JVM, which runs in a process group of its own."""
        try:
            return [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """A crash of the whole machine's share: the driver, its JVM and Python workers, no cleanup."""
        groups = [self.proc.pid, *self._jvms()]
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        _wait_gone(groups)  # before the next start takes the catalog

    def stop_group(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM to serve's process group, as `docker stop` or systemd sends it (or
        SIGINT, as a terminal's Ctrl-C): the tick in flight commits and serve exits 0, or
        it says the tick did not commit and exits 1 (the next start redoes it); never a
        failed tick with exit 0, never a traceback."""
        jvms = self._jvms()
        os.killpg(self.proc.pid, sig)
        code = self.proc.wait(120)
        events = []
        while (event := self.events.get(timeout=30)) is not None:
            events.append(event)
        stop = [e for e in events if e.get("event") == "stop"]
        assert stop, "".join(self.lines[-30:])
        failed = [e for e in events if e.get("event") == "error"]
        assert (code, bool(failed), bool(stop[-1].get("error"))) in ((0, False, False), (1, True, True)), \
            (code, "".join(self.lines[-30:]))
        assert not any("Traceback" in line for line in self.lines), "".join(self.lines[-60:])
        _wait_gone(jvms)  # the JVM leaves when serve's pipe to it closes


def _wait_gone(groups: list[int]) -> None:
    for group in groups:
        while True:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)


#: every serve a test started, stopped after it (tests/functional/conftest.py)
STARTED: list[Serve] = []


def caught_up(event: dict) -> bool:
    return event.get("event") == "tick" and not any(event["lag"].values())


def committed(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """A topic's messages in committed transactions: (partition, tick header, key, value)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, **CLIENT_LOGS, "group.id": f"check-{topic}-{time.time()}",
                         "enable.partition.eof": True, "isolation.level": "read_committed"})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
    out = []
    open_ = set(meta.partitions)
    while open_:
        msg = consumer.poll(10)
        assert msg is not None, f"no end of {topic}"
        if msg.error():
            open_.discard(msg.partition())
            continue
        out.append((msg.partition(), int(dict(msg.headers())["dbt_stream_tick"]), msg.key(), msg.value()))
    consumer.close()
    return out


def read_topic(bootstrap: str, topic: str) -> dict[int, Counter]:
    """Each tick's messages (by the tick header)."""
    ticks: dict[int, Counter] = defaultdict(Counter)
    for _, tick, key, value in committed(bootstrap, topic):
        ticks[tick][(key, value)] += 1
    return dict(ticks)


def dbt(root: Path, env: dict[str, str], *args: str) -> str:
    """The `dbt` command in its own process; its output."""
    run = subprocess.run([str(BIN / "dbt"), *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout
