"""A process killed in the middle of a tick loses nothing: a new process resumes from the
last committed tick and, given that tick's input again, ends where an uninterrupted run
would."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dbt_incremental_stream.differential import Differential
from dbt_incremental_stream.errors import StateError
from dbt_incremental_stream import Pipeline

SOURCES = {"orders": "id INT, cust INT, amount DOUBLE", "customers": "id INT, region STRING"}
VIEWS = {
    "by_region": "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS s, MAX(o.amount) AS m "
                 "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY c.region",
    "total": "SELECT COUNT(*) AS n FROM by_region",
    "ranked": "SELECT o.id, c.region, RANK() OVER (PARTITION BY o.cust ORDER BY o.amount DESC) AS r "
              "FROM orders o LEFT JOIN customers c ON o.cust = c.id",
    "top2": "SELECT id, amount FROM orders ORDER BY amount DESC LIMIT 2",
}
TICKS = [
    {"orders": [((i, i % 3, i * 2.5), 1) for i in range(10)], "customers": [((0, "eu"), 1), ((1, "us"), 1)]},
    {"orders": [((1, 1, 2.5), -1), ((20, 2, 1.0), 1)], "customers": [((2, "eu"), 1)]},
    {"orders": [((2, 2, 5.0), -1), ((21, 0, 7.5), 1)], "customers": [((1, "us"), -1), ((1, "apac"), 1)]},
    {"orders": [((30, 1, 3.0), 2)]},
]

WORKER = textwrap.dedent("""
    import os, sys, json
    sys.path.insert(0, {root!r})
    from dbt_incremental_stream.runtime.spark.session import session
    from dbt_incremental_stream.runtime.storage import state
    from dbt_incremental_stream import Pipeline
    from tests.unit.test_restart import SOURCES, VIEWS, TICKS

    crash_tick = int(sys.argv[2])
    real = state.FileSystem.write_atomic
    def write_atomic(self, path, text):
        if json.loads(text)["tick"] == crash_tick:
            os._exit(9)  # the batches of this tick are written, its manifest is not
        real(self, path, text)
    state.FileSystem.write_atomic = write_atomic
    pipe = Pipeline(session("local[1]"), sys.argv[1])
    for name, ddl in SOURCES.items():
        pipe.add_source(name, ddl)
    for name, sql in VIEWS.items():
        pipe.add_view(name, sql)
    for tick in TICKS:
        pipe.step(tick)
""")


def test_killed_mid_tick_then_resumed(spark, tmp_path):
    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(root=str(root)))
    location = str(tmp_path / "state")
    proc = subprocess.run([sys.executable, str(script), location, "3"], cwd=root, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=600)
    assert proc.returncode == 9, proc.stderr.decode()[-3000:]

    diff = Differential(spark, location, SOURCES, VIEWS)
    assert diff.pipeline.tick == 2
    for tick in TICKS[:2]:
        for source, changes in tick.items():
            diff.oracle.apply(source, changes)
    diff.check()
    for tick in TICKS[2:]:
        diff.step(tick)
    assert diff.pipeline.tick == 4
    leftovers = [p for p in (tmp_path / "state" / "state").iterdir()
                 if not any(str(p) in b.path for s in diff.pipeline.store.spines.values() for b in s.batches)]
    diff.close()
    assert leftovers == [], "the crashed tick's batches were not collected"


def test_changed_source_schema_is_refused(spark, tmp_path):
    pipe = Pipeline(spark, str(tmp_path))
    pipe.add_source("orders", "id INT, cust INT, amount DOUBLE")
    pipe.step({"orders": [((1, 1, 1.0), 1)]})
    pipe.close()
    again = Pipeline(spark, str(tmp_path))
    with pytest.raises(StateError, match="orders"):
        again.add_source("orders", "id INT, cust INT, amount DOUBLE, note STRING")


def test_compacted_files_outlive_queries_planned_before_the_commit(spark, tmp_path, monkeypatch):
    """A catalog query planned against a tick's files may still read them after the next
    commit compacts them away: they stay for a grace period, then go, and with the last of
    them their tick's directory (a long run otherwise keeps one a tick per node)."""
    from dbt_incremental_stream.runtime.storage import state

    def files(pipe: Pipeline) -> set[str]:
        return {b.path for s in pipe.store.spines.values() for b in s.batches}

    def exists(path: str) -> bool:
        return Path(path.removeprefix("file:")).exists()

    pipe = Pipeline(spark, str(tmp_path), max_batches=2)
    pipe.add_source("orders", "id INT, cust INT, amount DOUBLE")
    pipe.add_view("total", "SELECT cust, SUM(amount) AS s FROM orders GROUP BY cust")
    seen: set[str] = set()
    for i in range(4):  # the third tick's commit starts a merge; the fourth's folds it in
        seen |= files(pipe)
        pipe.store.settle()
        pipe.step({"orders": [((i, i % 2, 1.0), 1)]})
    retired = seen - files(pipe)
    assert retired and all(exists(p) for p in retired)
    pipe.step({"orders": [((9, 1, 1.0), 1)]})  # a tick later, within the grace period
    assert all(exists(p) for p in retired)
    monkeypatch.setattr(state, "RETIRED_GRACE_SECONDS", 0.0)
    pipe.step({"orders": [((10, 1, 1.0), 1)]})
    pipe.store.settle()  # (deleted beside the ticks)
    assert not any(exists(p) for p in retired)
    emptied = {p.rsplit("/", 1)[0] for p in retired} - {p.rsplit("/", 1)[0] for p in files(pipe)}
    assert emptied and not any(exists(d) for d in emptied), "a tick's directory outlived its last batch"
    assert all(any(d.iterdir()) for d in (tmp_path / "state").iterdir())
    pipe.close()


def test_merges_beside_the_ticks_fold_in_and_a_reopen_removes_what_they_left(spark, tmp_path, monkeypatch):
    """Spine merges run beside the ticks (here all by Spark jobs, as large ones are) and a
    later commit folds them in; a pipeline closed with a merge done but not folded leaves
    files no manifest names, which the next open removes. The view stays the batch answer."""
    from dbt_incremental_stream.runtime.storage import state

    def on_disk() -> set[str]:
        return {str(p) for p in (tmp_path / "state").glob("*/_node=*")}

    def named(pipe: Pipeline) -> set[str]:
        return {b.path.removeprefix("file:") for s in pipe.store.spines.values() for b in s.batches}

    monkeypatch.setattr(state, "ARROW_MERGE_BYTES", -1)
    pipe = Pipeline(spark, str(tmp_path), max_batches=2)
    pipe.add_source("orders", "id INT, cust INT, amount DOUBLE")
    pipe.add_view("total", "SELECT cust, SUM(amount) AS s FROM orders GROUP BY cust")
    for i in range(6):
        pipe.store.settle()
        pipe.step({"orders": [((i, i % 2, 1.0), 1)]})
        assert all(len(s.batches) <= 3 for s in pipe.store.spines.values())
    pipe.store.settle()
    assert on_disk() - named(pipe), "a merge started by the last commit left its batch"
    pipe.close()
    again = Pipeline(spark, str(tmp_path), max_batches=2)
    again.add_source("orders", "id INT, cust INT, amount DOUBLE")
    again.add_view("total", "SELECT cust, SUM(amount) AS s FROM orders GROUP BY cust")
    assert on_disk() == named(again)
    assert sorted(map(tuple, again.snapshot("total").collect())) == [(0, 3.0), (1, 3.0)]
    again.close()


def test_a_dropped_view_leaves_no_directory_of_its_arrangements(spark, tmp_path):
    """A view no longer deployed: its nodes' runs go at the next commit, and so do their
    directories (`arrangements/<node>/<key>/<bucket>/`), which a run deleted file by file left."""
    location = str(tmp_path / "state")
    views = {"by_region": "SELECT c.region, SUM(o.amount) AS s FROM orders o JOIN customers c ON o.cust = c.id "
                          "GROUP BY c.region",
             "kinds": "SELECT cust, COUNT(DISTINCT amount) AS k FROM orders GROUP BY cust"}

    def run(names: list[str], ticks: list[dict]) -> set[str]:
        pipe = Pipeline(spark, location)
        pipe.add_source("orders", "id BIGINT, cust INT, amount DOUBLE")
        pipe.add_source("customers", "id INT, region STRING")
        for name in names:
            pipe.add_view(name, views[name])
        for tick in ticks:
            pipe.step(tick)
        pipe.close()
        return set(os.listdir(Path(location) / "arrangements"))

    orders = [{"orders": [((i, i % 7, float(i % 5)), 1) for i in range(k * 50, k * 50 + 50)],
               "customers": [((c, f"r{c % 3}"), 1) for c in range(7)] if k == 0 else []} for k in range(2)]
    both = run(["by_region", "kinds"], orders)
    kept = run(["kinds"], [{"orders": [((1000, 1, 1.0), 1)]}])
    assert kept < both
    left = [str(d) for d in (Path(location) / "arrangements").rglob("*") if d.is_dir() and not any(d.iterdir())]
    assert left == []
