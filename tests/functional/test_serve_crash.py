"""`dbt-stream serve` killed (SIGKILL to Python, Spark's JVM and its workers), or stopped
with SIGTERM or SIGINT (Ctrl-C) to its process group, at random points (5 times; ``SERVE_KILLS=21`` for more),
the 2nd and 4th (and 8th, 13th, 18th) between two partitions' commits of a tick's sink
writes, restarting it each time: the sink topics (each tick's messages) and the changelog
table equal those of an uninterrupted run over the same input — nothing lost, nothing
duplicated. The uninterrupted run also checks the HTTP endpoints and the graceful stop."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import urllib.request
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pytest

from dbt_incremental_stream.connectors.sinks import AFTER_COMMIT
from devkit.kafka import create_topics, produce
from tests.functional.serving import BIN, CATEGORIES, Serve, caught_up, committed, dbt, make_project, read_topic

ORDERS, PER_TICK = 1000, 40
KILLS = int(os.environ.get("SERVE_KILLS", "5"))  # each start of serve costs ~40 s of the suite
BETWEEN_COMMITS = {1, 3, 7, 12, 17}  # the kills that land between two partitions' commits


def changelog(root: Path) -> Counter:
    files = str(root / "spark-warehouse" / "serve.db" / "big_orders" / "**" / "*.parquet")
    rows = duckdb.sql(f"SELECT id, category, amount, _op, _weight, _tick FROM read_parquet('{files}', "
                      "hive_partitioning = true)").fetchall()
    return Counter(rows)



@pytest.mark.slow
def test_serve_survives_random_kills_with_exactly_once_outputs(tmp_path, kafka):
    rng = random.Random(20261122)
    topic = "serve.orders"
    create_topics(kafka, topic, *(f"{run}_{s}" for run in ("ref", "crash") for s in ("totals", "big")))
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka}
    ref = make_project(tmp_path / "ref", topic, "ref", PER_TICK)
    crash = make_project(tmp_path / "crash", topic, "crash", PER_TICK)
    with ThreadPoolExecutor(2) as pool:  # each deploys at tick 1, before there is any input
        list(pool.map(lambda root: dbt(root, env, "run"), (ref, crash)))
    orders = [{"id": i, "category": rng.choice(CATEGORIES), "amount": f"{rng.randint(100, 9999) / 100:.2f}"}
              for i in range(ORDERS)]
    produce(kafka, topic, [(None, o) for o in orders])

    def uninterrupted() -> None:
        """The same input, never stopped: also shows the HTTP endpoints and the graceful stop."""
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
        os.killpg(serve.proc.pid, signal.SIGINT)  # Ctrl-C: finishes the tick it is in, commits, stops
        serve.wait_for(lambda e: e.get("event") == "signal" and e.get("signal") == "SIGINT")
        serve.wait_for(lambda e: e.get("event") == "stop")
        assert serve.proc.wait(60) == 0
        assert not any("Traceback" in line for line in serve.lines), "".join(serve.lines[-60:])
        assert last["tick"] >= ORDERS // PER_TICK + 1

    pool = ThreadPoolExecutor(1)
    reference = pool.submit(uninterrupted)  # beside the killed run: another project, other topics

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
            serve.stop_group(signal.SIGINT if kill % 2 else signal.SIGTERM)
        else:
            serve.kill()
    serve = Serve(crash, env, "--port", "-1", "--connect-port", "-1")
    serve.wait_for(caught_up)
    os.kill(serve.proc.pid, signal.SIGTERM)
    assert serve.proc.wait(60) == 0
    reference.result()
    pool.shutdown()

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




def as_in_a_terminal() -> None:
    """Ctrl-C's default action, which a command started in the background (as CI may
    start the suite) inherits as ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_dbt_run_after_the_current_model(tmp_path, kafka):
    """SIGINT to `dbt run`'s process group (a terminal's Ctrl-C) while its first model
    deploys: that model's tick commits (Spark's jobs are not cancelled under it), the next
    model does not start, dbt says it was interrupted and exits non-zero; the next `dbt run`
    deploys the rest."""
    topic = "ctrl_c.orders"
    create_topics(kafka, topic, "ctrl_c_totals", "ctrl_c_big")
    produce(kafka, topic, [(None, {"id": i, "category": CATEGORIES[i % 5], "amount": "60.00"}) for i in range(200)])
    root = make_project(tmp_path / "p", topic, "ctrl_c")
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka}
    run = subprocess.Popen([str(BIN / "dbt"), "run", "--threads", "1"], cwd=root, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=as_in_a_terminal)
    lines = []
    for line in run.stdout:  # type: ignore[union-attr]
        lines.append(line)
        if " 1 of 2 START " in line:
            # dbt's main thread enters its wait for the models as the first one starts;
            # CPython sees a signal that lands while that thread takes the GIL just before
            # the wait only once the wait ends (after every model): a user's Ctrl-C comes
            # later than a log line's first milliseconds
            time.sleep(0.5)
            os.killpg(run.pid, signal.SIGINT)
    out = "".join(lines)
    assert run.wait(120) != 0, out
    assert "Exited because of keyboard interrupt" in out, out
    first = next(line.split(" model ", 1)[1].split()[0] for line in lines if " 1 of 2 START " in line)
    assert any(" 1 of 2 OK created " in line and first in line for line in lines), out
    assert " 2 of 2 START " not in out, out
    assert "Py4JError" not in out and "cancelled" not in out.lower(), out
    again = dbt(root, env, "run")
    assert "Completed successfully" in again and "2 of 2 OK" in again, again
