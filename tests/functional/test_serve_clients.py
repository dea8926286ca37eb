"""`dbt run`, `dbt test`, `dbt show` and a BI client (Spark Connect) while `dbt-stream serve`
runs: serve owns the catalog and the state, and they go through it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from dbt_incremental_stream.connectors.broker import free_port
from devkit.kafka import create_topics, produce
from tests.functional.serving import CATEGORIES, Serve, caught_up, dbt, make_project

SCHEMA_TESTS = """
version: 2
models:
  - name: totals
    columns:
      - name: category
        data_tests: [not_null, unique]
"""


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
