"""The integration project (integration_tests/) end to end: Kafka sources with append,
upsert and debezium envelopes plus a seed, a chain of streaming models, a changelog, a
batch model over a streaming one, generic and singular tests. Two rounds of new events,
each followed by `dbt build`; after each, every model equals DuckDB over all input so far.
(The same project built by the `dbt` command in its own process: test_cluster.)"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dbt.cli.main import dbtRunner

from dbt.adapters.incremental_stream.command import main as dbt_stream
from dbt_incremental_stream.differential import check_project
from dbt_incremental_stream.project import Project
from devkit.kafka import create_topics, produce
from devkit.shop import TOPICS, ShopEvents

SOURCE = Path(__file__).resolve().parents[2] / "integration_tests"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "shop"
STREAMING = {"order_lines", "revenue_by_category", "customer_ltv", "region_revenue", "top_products",
             "quantity_histogram", "category_scorecard", "revenue_changes"}


def copy_project(dest: Path, source: Path = SOURCE) -> Path:
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("target", "logs", "stream_state", "metastore_db",
                                                                "spark-warehouse", "dbt_packages"))
    return dest


def dbt(root: Path, *args: str):
    res = dbtRunner().invoke([*args, "--project-dir", str(root), "--profiles-dir", str(root)])
    failed = [f"{r.node.name}: {r.message}" for r in getattr(res.result, "results", []) if str(r.status) in
              ("error", "fail")]
    assert res.success, f"dbt {' '.join(args)} failed: {res.exception or failed}"
    return res.result


@pytest.fixture(scope="module")
def shop(tmp_path_factory, kafka, monkeypatch_module):
    monkeypatch_module.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka)
    create_topics(kafka, *TOPICS)
    return copy_project(tmp_path_factory.mktemp("shop") / "integration_tests")


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_rounds_of_events_through_dbt_build(shop, kafka, spark):
    events = ShopEvents(seed=4)
    for round_ in range(2):
        for topic, records in events.round().items():
            produce(kafka, topic, records)
        results = dbt(shop, "build")
        statuses = {r.node.name: str(r.status) for r in results}
        assert all(s in ("success", "pass") for s in statuses.values()), statuses
        codes = {r.node.name: r.adapter_response.get("code") for r in results if r.node.name in STREAMING}
        assert set(codes.values()) == ({"CREATED"} if round_ == 0 else {"UNCHANGED"}), codes
        project = Project(spark, str(shop / "stream_state"))
        try:
            problems = {m: d for m, d in check_project(project).items() if d}
        finally:
            project.close()
        assert not problems, f"round {round_}: {problems}"
        report = sorted(tuple(r)[:3] for r in spark.table("shop.region_report").collect())
        assert report == sorted(tuple(r) for r in spark.table("shop.region_revenue").collect())


def verdicts(capsys, *argv: str) -> dict[str, str]:
    """`dbt-stream models`' line for each model (it exits 0: every streaming model can stream)."""
    capsys.readouterr()
    assert dbt_stream(["models", *argv]) == 0, capsys.readouterr().err
    return {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}


def test_models_agree_with_dbt_run(shop, capsys, tmp_path):
    """`dbt-stream models` says yes to each model `dbt build` streamed (after the rounds
    above: a seed, batch tables and ephemeral models beside them); on the shop example, with
    --profiles-dir it compiles the project first (nothing compiled it before)."""
    lines = verdicts(capsys, "--project-dir", str(shop))
    assert {m for m, line in lines.items() if " yes " in line} >= STREAMING, lines
    example = copy_project(tmp_path / "shop", EXAMPLE)
    lines = verdicts(capsys, "--project-dir", str(example), "--profiles-dir", str(example))
    marts = {f.stem for f in (EXAMPLE / "models" / "marts").glob("*.sql")}
    assert marts and all(" streaming_view " in lines[m] and " yes " in lines[m] for m in marts), lines


def test_the_shop_example_builds_quietly(kafka, tmp_path):
    """`dbt build` of the shop example, by the `dbt` command as a user runs it: every model
    and test passes, and what it prints holds no Python or Java stack trace and no line of
    Spark's log (its start-up lines, WARNs)."""
    create_topics(kafka, *TOPICS, "shop.revenue_by_category")
    for topic, records in ShopEvents(seed=7).round().items():
        produce(kafka, topic, records)
    example = copy_project(tmp_path / "shop", EXAMPLE)
    run = subprocess.run([str(Path(sys.executable).parent / "dbt"), "build", "--profiles-dir", "."], cwd=example,
                         env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka}, capture_output=True, text=True,
                         timeout=900)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "Completed successfully" in out, out[-3000:]
    noise = [line for line in out.splitlines() if any(w in line for w in (
        "Traceback", "\tat ", " WARN ", " ERROR ", "log4j", "setLogLevel", "NativeCodeLoader", "rdkafka"))]
    assert not noise, "\n".join(noise[:20])
