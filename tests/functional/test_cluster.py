"""The integration project built by the real `dbt` command, in its own process, on a
real Spark standalone cluster — a master and two
workers started from the pyspark package on this machine, `master: spark://...`, Kafka
read by the executors and state written by them, a Hive catalog (Derby) in the project
directory as dbt-spark's session method has it — and then every model, read from that
catalog by an application on the cluster, equals DuckDB over all input (the same project
in local mode, in process: test_integration_project)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from devkit.kafka import create_topics, produce
from devkit.shop import TOPICS, ShopEvents
from tests.functional.test_integration_project import STREAMING, copy_project


def free_ports(n: int) -> list[int]:
    """``n`` different free ports (one at a time, the system may give the same port twice:
    a worker's web UI then takes the master's, and Spark moves the master's to the next)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``spark://`` URL of a standalone master with two one-core workers."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    work = tmp_path_factory.mktemp("cluster")
    port, ui, *worker_uis = free_ports(4)
    env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    url = f"spark://127.0.0.1:{port}"
    procs = [subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env, cwd=work,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    for i in range(2):
        procs.append(subprocess.Popen([str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--cores", "1",
                                       "--memory", "2g", "--webui-port", str(worker_uis[i]),
                                       "--work-dir", str(work / f"worker{i}")], env=env, cwd=work,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                    if sum(w["state"] == "ALIVE" for w in json.loads(r.read())["workers"]) == 2:
                        break
            except (OSError, ValueError):  # not listening yet, or a page not JSON yet while it starts
                pass
            assert time.monotonic() < deadline, "the standalone cluster did not come up"
            time.sleep(1)
        yield url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)


CHECK_ON_CLUSTER = """
import json
import sys
from dbt_incremental_stream.differential import check_project
from dbt_incremental_stream.project import Project
from dbt_incremental_stream.runtime.spark.session import session

project = Project(session(sys.argv[1], {"spark.sql.shuffle.partitions": "2"}, hive=True), "stream_state")
try:
    print(json.dumps(check_project(project)))
finally:
    project.close()
"""


@pytest.mark.slow
def test_integration_project_on_a_standalone_cluster(cluster, tmp_path, kafka):
    create_topics(kafka, *(f"cluster.{t}" for t in TOPICS))
    root = copy_project(tmp_path / "cluster")
    sources = root / "models" / "sources.yml"
    sources.write_text(sources.read_text().replace("topic: shop.", "topic: cluster.shop."))
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER": cluster,
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for topic, records in ShopEvents(seed=11).round(orders=30).items():
        produce(kafka, f"cluster.{topic}", records)
    run = subprocess.run([str(Path(sys.executable).with_name("dbt")), "build"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    check = subprocess.run([sys.executable, "-c", CHECK_ON_CLUSTER, cluster], cwd=root, env=env,
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    problems = json.loads(check.stdout.strip().splitlines()[-1])
    assert {m.split(".")[-1] for m in problems} == STREAMING and not any(problems.values()), problems


ARRANGED_ON_CLUSTER = """
import json
import sys
import urllib.request
from dbt_incremental_stream.differential import Differential
from dbt_incremental_stream.runtime.spark.session import session
from tests.workload import SOURCES

spark = session(sys.argv[1], {"spark.ui.enabled": "true"})
views = {"revenue": "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS s FROM orders o "
                    "JOIN customers c ON o.cust = c.id GROUP BY c.region"}


def executors_of_last_job():
    tracker, sc = spark.sparkContext.statusTracker(), spark.sparkContext
    job = max(tracker.getJobIdsForGroup())
    found = set()
    for stage in tracker.getJobInfo(job).stageIds:
        url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages/{stage}?details=true"
        with urllib.request.urlopen(url) as r:
            found |= {t["executorId"] for attempt in json.loads(r.read()) for t in attempt.get("tasks", {}).values()}
    return found


diff = Differential(spark, sys.argv[2], SOURCES, views, placement="tasks")
diff.step({"orders": [((i, i % 5, i * 1.25, i % 3, "open"), 1) for i in range(200)],
           "customers": [((i, f"n{i}", f"r{i % 2}"), 1) for i in range(5)]})
assert diff.pipeline.last_tick.path == "tasks", diff.pipeline.last_tick.why
diff.step({"orders": [((i, i % 5, i * 0.5, i % 3, "paid"), 1) for i in range(200, 400)]
                     + [((i, i % 5, i * 1.25, i % 3, "open"), -1) for i in range(0, 200, 7)],
           "customers": [((2, "n2", "r0"), -1), ((2, "n2", "r1"), 1)]})
assert diff.pipeline.last_tick.path == "tasks", diff.pipeline.last_tick.why
ran = executors_of_last_job()
assert len(ran - {"driver"}) == 2, ran
diff.pipeline.placement = "auto"
diff.step({"orders": [((3, 3, 3.75, 0, "open"), -1), ((500, 1, 9.5, 1, "paid"), 1)],
           "customers": [((1, "n1", "r1"), -1), ((1, "n1", "r0"), 1)]})
assert diff.pipeline.last_tick.path == "arranged", diff.pipeline.last_tick.why
arrangements = diff.pipeline.store.arrangements
assert sum(a.rows for arrs in arrangements.values() for a in arrs.values()) > 200
diff.close()
print("ok")
"""


@pytest.mark.slow
def test_large_ticks_run_in_tasks_on_both_workers_and_serve_the_driver(cluster, tmp_path):
    """Ticks in Spark tasks (the first builds the state with all input as its delta, the
    second changes both sides of the join) run on both workers' executors, writing runs
    under the state location; the next small tick, on arrangements in the driver, reads
    them; every tick equals DuckDB."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    run = subprocess.run([sys.executable, "-c", ARRANGED_ON_CLUSTER, cluster, str(tmp_path / "state")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-3000:] + run.stderr[-3000:]
