"""`dbt-stream serve` killed inside a tick (after the tick fixed its offset ranges, before it
committed): its restart redoes that tick on the same ranges and reports the true lag."""
from __future__ import annotations

import json
import os
import queue
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from devkit.kafka import create_topics, produce
from tests.functional.serving import CATEGORIES, Serve, caught_up, dbt, make_project


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
    dbt(root, env, "run")
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


