"""The integration project on a real Spark standalone cluster: a master and two workers
started from the pyspark package on this machine, `dbt build` with `master: spark://...`
(Kafka read by the executors, state written by them), and the result the same as in local
mode — each streaming model equal to the other run's and to DuckDB over all input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from dbt_incremental_stream.connectors.broker import create_topics, free_port, produce
from dbt_incremental_stream.differential import check_project
from dbt_incremental_stream.project import Project
from examples.shop.events import TOPICS, ShopEvents
from tests.functional.test_integration_project import copy_project



@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``spark://`` URL of a standalone master with two one-core workers."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    work = tmp_path_factory.mktemp("cluster")
    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    url = f"spark://127.0.0.1:{port}"
    procs = [subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env, cwd=work,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    for i in range(2):
        procs.append(subprocess.Popen([str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--cores", "1",
                                       "--memory", "2g", "--webui-port", str(free_port()),
                                       "--work-dir", str(work / f"worker{i}")], env=env, cwd=work,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                    if sum(w["state"] == "ALIVE" for w in json.loads(r.read())["workers"]) == 2:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the standalone cluster did not come up"
            time.sleep(1)
        yield url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)


def contents(spark, root: Path) -> dict[str, Counter]:
    project = Project(spark, str(root / "stream_state"))
    try:
        assert not any(check_project(project).values()), "a model differs from DuckDB"
        return {m.relation: Counter(tuple(r) for r in spark.sql(project.pipe.relation_sql(m.name)).collect())
                for m in project.models.values() if m.kind == "streaming_view"}
    finally:
        project.close()


@pytest.mark.slow
def test_integration_project_on_a_standalone_cluster(cluster, tmp_path, kafka, spark):
    create_topics(kafka, *(f"cluster.{t}" for t in TOPICS))
    roots = {}
    for mode in ("local", "cluster"):
        root = roots[mode] = copy_project(tmp_path / mode)
        sources = root / "models" / "sources.yml"
        sources.write_text(sources.read_text().replace("topic: shop.", "topic: cluster.shop."))
    events = ShopEvents(seed=11)
    for _ in range(2):
        for topic, records in events.round(orders=30).items():
            produce(kafka, f"cluster.{topic}", records)
        for mode, root in roots.items():
            env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka, "SPARK_LOCAL_IP": "127.0.0.1",
                   "SPARK_MASTER": cluster if mode == "cluster"
                   else "local[2]"}
            run = subprocess.run([str(Path(sys.executable).with_name("dbt")), "build"], cwd=root, env=env,
                                 capture_output=True, text=True, timeout=900)
            assert run.returncode == 0, f"{mode}: " + run.stdout[-3000:] + run.stderr[-3000:]
    local, on_cluster = contents(spark, roots["local"]), contents(spark, roots["cluster"])
    assert local == on_cluster and all(local.values())
