"""`dbt-stream serve` as a user runs it: `dbt run` deploys a small project (a Kafka source,
an aggregate with an insert_delete sink, a changelog table with an append sink), then serve
ticks through the input in its own process.

The crash test kills serve (SIGKILL to Python, Spark's JVM and its workers), or stops it
with SIGTERM to its process group, at random points more than 20 times, and a few times
between two partitions' commits of a tick's sink writes, restarting it each time, and then
compares the sink topics (each tick's messages) and the changelog table with
those of an uninterrupted run over the same input: nothing lost, nothing duplicated. The
uninterrupted run also checks the HTTP endpoints and the graceful stop. Another run is
killed inside a tick, and its restart redoes that tick and reports the true lag."""
from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from dbt_incremental_stream.connectors.broker import free_port
from devkit.kafka import create_topics, produce
from dbt_incremental_stream.connectors.sinks import AFTER_COMMIT

BIN = Path(sys.executable).parent
ORDERS, PER_TICK, KILLS = 1000, 40, 21
BETWEEN_COMMITS = {1, 5, 9}  # the kills that land between two partitions' commits
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


def make_project(root: Path, topic: str, out: str) -> Path:
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text("name: serve_test\nversion: '1.0'\nconfig-version: 2\nprofile: serve_test\n"
                                          "model-paths: [models]\n")
    (root / "profiles.yml").write_text(PROFILE.format(per_tick=PER_TICK))
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

    def stop_group(self) -> None:
        """SIGTERM to serve's process group, as `docker stop` or systemd sends it: the tick
        in flight commits and serve exits 0, or it says the tick did not commit and exits 1
        (the next start redoes it); never a failed tick with exit 0."""
        jvms = self._jvms()
        os.killpg(self.proc.pid, signal.SIGTERM)
        code = self.proc.wait(120)
        events = []
        while (event := self.events.get(timeout=30)) is not None:
            events.append(event)
        stop = [e for e in events if e.get("event") == "stop"]
        assert stop, "".join(self.lines[-30:])
        failed = [e for e in events if e.get("event") == "error"]
        assert (code, bool(failed), bool(stop[-1].get("error"))) in ((0, False, False), (1, True, True)), \
            (code, "".join(self.lines[-30:]))
        _wait_gone(jvms)  # the JVM leaves when serve's pipe to it closes


def _wait_gone(groups: list[int]) -> None:
    for group in groups:
        while True:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)


STARTED: list[Serve] = []


@pytest.fixture(autouse=True)
def _no_serve_left():
    """A failing test leaves no serve process behind (it would hold ports and the catalog)."""
    yield
    while STARTED:
        serve = STARTED.pop()
        if serve.proc.poll() is None:
            serve.kill()


def caught_up(event: dict) -> bool:
    return event.get("event") == "tick" and not any(event["lag"].values())


def committed(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """A topic's messages in committed transactions: (partition, tick header, key, value)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{time.time()}",
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


def changelog(root: Path) -> Counter:
    files = str(root / "spark-warehouse" / "serve.db" / "big_orders" / "**" / "*.parquet")
    rows = duckdb.sql(f"SELECT id, category, amount, _op, _weight, _tick FROM read_parquet('{files}', "
                      "hive_partitioning = true)").fetchall()
    return Counter(rows)


def dbt_run(root: Path, env: dict[str, str]) -> None:
    run = subprocess.run([str(BIN / "dbt"), "run"], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.slow
def test_serve_survives_random_kills_with_exactly_once_outputs(tmp_path, kafka):
    rng = random.Random(20261122)
    topic = "serve.orders"
    create_topics(kafka, topic, *(f"{run}_{s}" for run in ("ref", "crash") for s in ("totals", "big")))
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka}
    ref, crash = make_project(tmp_path / "ref", topic, "ref"), make_project(tmp_path / "crash", topic, "crash")
    for root in (ref, crash):
        dbt_run(root, env)  # deploys at tick 1, before there is any input
    orders = [{"id": i, "category": rng.choice(CATEGORIES), "amount": f"{rng.randint(100, 9999) / 100:.2f}"}
              for i in range(ORDERS)]
    produce(kafka, topic, [(None, o) for o in orders])

    # the uninterrupted run, which also shows the HTTP endpoints and the graceful stop
    serve = Serve(ref, env, "--port", "0", "--connect-port", "-1")
    url = serve.wait_for(lambda e: e.get("event") == "http")["url"]
    last = serve.wait_for(caught_up)
    status = json.loads(urllib.request.urlopen(url + "status", timeout=10).read())
    assert status["state"] == "running" and status["tick"] >= last["tick"]
    assert status["models"] == ["serve.big_orders", "serve.totals"] and status["sources"] == ["serve_raw.orders"]
    metrics = urllib.request.urlopen(url + "metrics", timeout=10).read().decode()
    assert f'dbt_stream_source_offsets_total{{source="serve_raw.orders"}} {float(ORDERS)}' in metrics
    assert "dbt_stream_tick_seconds_bucket" in metrics and 'dbt_stream_source_lag{source="serve_raw.orders"} 0.0' \
        in metrics
    os.kill(serve.proc.pid, signal.SIGTERM)  # finishes the tick it is in, commits, stops
    serve.wait_for(lambda e: e.get("event") == "stop")
    assert serve.proc.wait(60) == 0
    ticks = last["tick"]
    assert ticks >= ORDERS // PER_TICK + 1

    # the same, killed at random points: during start-up, inside a tick, between ticks, and
    # between two partitions' commits of a tick's sinks
    paused, marks = tmp_path / "paused", []
    paused.mkdir()
    for kill in range(KILLS):
        if kill in BETWEEN_COMMITS:
            serve = Serve(crash, {**env, AFTER_COMMIT: f"pause:{paused}"}, "--port", "-1", "--connect-port", "-1")
            marks.append(_kill_after_a_partition_commit(serve, paused))
            continue
        serve = Serve(crash, env, "--port", "-1", "--connect-port", "-1")
        seen = rng.choice([0, 0, 1, 1, 2])
        if seen == 0:
            time.sleep(rng.uniform(2.0, 14.0))
        else:
            for _ in range(seen):
                serve.wait_for(lambda e: e.get("event") in ("tick", "stop"))
            time.sleep(rng.uniform(0.0, 1.5))
        if seen and rng.random() < 0.5:  # once it ticks (before, Python may still be importing)
            serve.stop_group()
        else:
            serve.kill()
    serve = Serve(crash, env, "--port", "-1", "--connect-port", "-1")
    serve.wait_for(caught_up)
    os.kill(serve.proc.pid, signal.SIGTERM)
    assert serve.proc.wait(60) == 0

    for sink in ("totals", "big"):
        want, got = read_topic(kafka, f"ref_{sink}"), read_topic(kafka, f"crash_{sink}")
        assert sorted(got) == sorted(want), f"{sink}: ticks differ"
        assert got == want, f"{sink}: messages differ"
    assert changelog(crash) == changelog(ref)
    partitions = {sink: _partitions_of_ticks(kafka, f"crash_{sink}") for sink in ("totals", "big")}
    assert any(tick in ticks for topic, p, tick in marks for sink, parts in partitions.items()
               for q, ticks in parts.items() if (f"crash_{sink}", q) != (topic, p)), \
        f"no kill between two partitions' commits of a tick: {marks}"
    # and the outputs are right: the sink's changes add up to the batch answer
    totals: Counter = Counter()
    for messages in read_topic(kafka, "crash_totals").values():
        for (_, value), n in messages.items():
            doc = json.loads(value)
            row = next(iter(doc.values()))
            totals[(row["category"], row["n"], row["total"])] += n if "insert" in doc else -n
    con = duckdb.connect()
    con.execute("CREATE TABLE o (id BIGINT, category VARCHAR, amount DECIMAL(10,2))")
    con.executemany("INSERT INTO o VALUES (?, ?, ?)", [(o["id"], o["category"], o["amount"]) for o in orders])
    batch = con.sql("SELECT category, COUNT(*), CAST(SUM(amount) AS VARCHAR) FROM o GROUP BY category").fetchall()
    assert +totals == Counter({(c, n, s): 1 for c, n, s in batch})


def _kill_after_a_partition_commit(serve: Serve, paused: Path) -> tuple[str, int, int]:
    """SIGKILL once a sink writer committed a partition of a tick and waits before the next
    (it leaves a file named topic-partition-tick): that topic, partition and tick."""
    while not (files := list(paused.iterdir())):
        assert serve.proc.poll() is None, "".join(serve.lines[-30:])
        time.sleep(0.005)
    serve.kill()
    for f in files:
        f.unlink()
    topic, partition, tick = files[0].name.rsplit("-", 2)
    return topic, int(partition), int(tick)


def _partitions_of_ticks(bootstrap: str, topic: str) -> dict[int, set[int]]:
    """The ticks each partition of a topic holds."""
    ticks: dict[int, set[int]] = defaultdict(set)
    for partition, tick, _, _ in committed(bootstrap, topic):
        ticks[partition].add(tick)
    return ticks


def _kill_after_intent(serve: Serve, manifest: Path) -> dict | None:
    """SIGKILL once a tick has fixed its offset ranges (its intent is on disk): that
    intent, or None if the tick removed it first."""
    while not list(manifest.glob("intent-*.json")):
        try:
            event = serve.events.get_nowait()
        except queue.Empty:
            time.sleep(0.002)
            continue
        assert event is not None and not caught_up(event), "serve caught up before a kill landed"
    serve.kill()
    intents = sorted(manifest.glob("intent-*.json"))
    return json.loads(intents[-1].read_text()) if intents else None


@pytest.mark.slow
def test_a_redone_tick_reports_the_true_lag(tmp_path, kafka):
    """serve killed after a tick fixed its offset ranges and before it committed: the next
    start redoes that tick on the same ranges and says so; its log line, `/status` (while it
    runs or once it committed) and the lag gauge give the offsets still left in the topic."""
    topic, total = "redo.orders", 600
    create_topics(kafka, topic, "redo_totals", "redo_big")
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka}
    root = make_project(tmp_path / "redo", topic, "redo")
    dbt_run(root, env)
    produce(kafka, topic, [(None, {"id": i, "category": CATEGORIES[i % 5], "amount": "10.00"}) for i in range(total)])
    manifest = root / "stream_state" / "_manifest"
    for _ in range(5):  # a kill can land between the commit and the intent's removal: no redo then
        intent = _kill_after_intent(Serve(root, env, "--port", "-1", "--connect-port", "-1"), manifest)
        if intent is None:
            continue
        serve = Serve(root, env, "--port", "0", "--connect-port", "-1")
        url = serve.wait_for(lambda e: e.get("event") == "http")["url"]
        if serve.wait_for(lambda e: e.get("event") == "start")["tick"] == intent["tick"] - 1:
            break
        serve.kill()
    else:
        raise AssertionError("no kill landed inside a tick")
    left = total - sum(end for _, end in intent["ranges"]["serve_raw.orders"].values())
    assert left > 0

    redo = serve.wait_for(lambda e: e.get("event") == "redo")
    metrics = urllib.request.urlopen(url + "metrics", timeout=10).read().decode()
    status = json.loads(urllib.request.urlopen(url + "status", timeout=10).read())
    lags = {redo["tick"]: redo["lag"]["serve_raw.orders"]}
    assert redo["tick"] == intent["tick"] and lags[redo["tick"]] == left, (redo, left)
    events = [serve.wait_for(lambda e: e.get("event") == "tick")]
    assert events[0]["tick"] == intent["tick"] and events[0]["redone"] and events[0]["lag"] == redo["lag"], events[0]
    while not caught_up(events[-1]):  # each later tick's lag: what is left after it
        events.append(serve.wait_for(lambda e: e.get("event") == "tick"))
        lags[events[-1]["tick"]] = lags[events[-2]["tick"]] - events[-1]["offsets"]["serve_raw.orders"]
        assert events[-1]["lag"]["serve_raw.orders"] == lags[events[-1]["tick"]] and not events[-1]["redone"]
    shown = status["in_flight"]["tick"] if status["in_flight"] else status["last_tick"]["tick"]
    assert status["lag"] == {"serve_raw.orders": lags[shown]}, (status, lags)
    assert status["in_flight"] is None or status["in_flight"]["redone"] == (shown == intent["tick"])
    gauge = float(metrics.split('dbt_stream_source_lag{source="serve_raw.orders"} ')[1].split()[0])
    assert gauge in {float(lags[t]) for t in lags if t <= shown}, (gauge, lags, shown)
    os.kill(serve.proc.pid, signal.SIGTERM)
    assert serve.proc.wait(60) == 0
    assert not list(manifest.glob("intent-*.json"))


SCHEMA_TESTS = """
version: 2
models:
  - name: totals
    columns:
      - name: category
        data_tests: [not_null, unique]
"""


def dbt(root: Path, env: dict[str, str], *args: str) -> str:
    run = subprocess.run([str(BIN / "dbt"), *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


@pytest.mark.slow
def test_dbt_and_a_bi_client_work_while_serve_runs(tmp_path, kafka):
    """serve owns the catalog and the state; `dbt run` deploys through it (a changed model is
    rebuilt while serve keeps ticking), `dbt test` and `dbt show` and a Spark Connect client
    read through its Spark; once serve stops, dbt works on its own again."""
    topic = "conc.orders"
    create_topics(kafka, topic, "conc_totals", "conc_big")
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka}
    root = make_project(tmp_path / "conc", topic, "conc")
    (root / "models" / "schema.yml").write_text(SCHEMA_TESTS)
    dbt(root, env, "run")
    connect = free_port()
    serve = Serve(root, env, "--port", "0", "--connect-port", str(connect))
    url = serve.wait_for(lambda e: e.get("event") == "http")["url"]
    serve.wait_for(lambda e: e.get("event") == "start")
    produce(kafka, topic, [(None, {"id": i, "category": CATEGORIES[i % 5], "amount": "60.00"}) for i in range(100)])
    serve.wait_for(lambda e: e.get("event") == "tick" and e["rows_in"].get("serve_raw.orders"))
    serve.wait_for(caught_up)

    out = dbt(root, env, "run")
    assert "UNCHANGED" in out, out[-2000:]
    serve.wait_for(lambda e: e.get("event") == "deploy", timeout=10)  # dbt handed serve its models
    dbt(root, env, "test")
    shown = dbt(root, env, "show", "--inline", "select sum(n) as orders from serve.totals")
    assert "100" in shown, shown[-1500:]

    totals = root / "models" / "totals.sql"
    totals.write_text(totals.read_text().replace("sum(amount) as total", "sum(amount) as total, max(amount) as top"))
    out = dbt(root, env, "run", "-s", "totals")
    assert "REBUILT" in out, out[-2000:]
    serve.wait_for(lambda e: e.get("event") == "deploy" and "REBUILT" in e["message"], timeout=10)
    produce(kafka, topic, [(None, {"id": 100 + i, "category": "books", "amount": "70.00"}) for i in range(10)])
    serve.wait_for(lambda e: e.get("event") == "tick" and e["rows_in"].get("serve_raw.orders"))

    client = subprocess.run([sys.executable, "-c", (
        "import json\nfrom pyspark.sql import SparkSession\n"
        f"s = SparkSession.builder.remote('sc://127.0.0.1:{connect}').getOrCreate()\n"
        "print(json.dumps([[r.category, r.n, str(r.top)] for r in s.sql('select * from serve.totals').collect()]))")],
        capture_output=True, text=True, timeout=300)
    assert client.returncode == 0, client.stderr[-2000:]
    rows = json.loads(client.stdout.strip().splitlines()[-1])
    assert ["books", 30, "70.00"] in rows and len(rows) == len(CATEGORIES), rows

    # a model whose SQL fails on a row: serve keeps ticking the others and says which and why
    checked = root / "models" / "checked.sql"
    checked.write_text("{{ config(materialized='streaming_view') }}\nselect id, case when id = 1000 then "
                       "raise_error('order 1000 is void') else amount end as amount "
                       "from {{ source('raw', 'orders') }}\n")
    dbt(root, env, "run", "-s", "checked")
    produce(kafka, topic, [(None, {"id": 1000, "category": "toys", "amount": "1.00"})])
    failed = serve.wait_for(lambda e: e.get("event") == "tick" and e.get("failed"))["failed"]
    assert list(failed) == ["serve.checked"] and "order 1000 is void" in failed["serve.checked"], failed
    status = json.loads(urllib.request.urlopen(url + "status", timeout=10).read())
    assert list(status["failed_models"]) == ["serve.checked"], status
    metrics = urllib.request.urlopen(url + "metrics", timeout=10).read().decode()
    assert "dbt_stream_failed_models 1.0" in metrics
    produce(kafka, topic, [(None, {"id": 1001, "category": "toys", "amount": "2.00"})])
    tick = serve.wait_for(lambda e: e.get("event") == "tick" and e["rows_in"].get("serve_raw.orders"))
    assert list(tick["failed"]) == ["serve.checked"]  # still failing, and the others still tick
    checked.write_text(checked.read_text().replace("raise_error('order 1000 is void')", "null"))
    assert "REBUILT" in dbt(root, env, "run", "-s", "checked")  # the changed model is rebuilt: right again
    status = json.loads(urllib.request.urlopen(url + "status", timeout=10).read())
    assert status["failed_models"] == {}, status
    shown = dbt(root, env, "show", "--inline", "select count(*) as n, count(amount) as a from serve.checked")
    assert "112" in shown and "111" in shown, shown[-1500:]

    os.kill(serve.proc.pid, signal.SIGTERM)
    assert serve.proc.wait(60) == 0
    assert not (root / "stream_state" / "_serve.json").exists()
    out = dbt(root, env, "run")  # on its own again: its own Spark, the catalog free
    assert "UNCHANGED" in out
