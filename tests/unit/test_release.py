"""A closed pipeline leaves nothing behind in the process and its Spark session: no open
file and no memory map under its state location, no persisted RDD or cached DataFrame. A
long-lived process (``dbt-stream serve``, a scheduler running ``dbt run``) opens and closes
pipelines for weeks."""
from __future__ import annotations

import gc
import os

import pytest

from dbt_incremental_stream import Pipeline


def held(path: str) -> tuple[list[str], list[str]]:
    """This process's open files and memory maps under ``path``."""
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        if target.startswith(path):
            fds.append(target)
    with open("/proc/self/maps") as maps:
        mapped = sorted({line.split()[-1] for line in maps if path in line})
    return fds, mapped


def spark_held(spark) -> tuple[int, bool]:
    """Persisted RDDs, and whether no DataFrame is cached."""
    cache = spark._jsparkSession.sharedState().cacheManager()
    return spark.sparkContext._jsc.getPersistentRDDs().size(), cache.isEmpty()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc")
@pytest.mark.parametrize("placement", ["auto", "tasks"])
def test_a_closed_pipeline_leaves_nothing_behind(spark, tmp_path, placement):
    before = spark_held(spark)
    location = str(tmp_path / "state")
    pipe = Pipeline(spark, location, placement=placement)
    pipe.add_source("orders", "id INT, cust INT, amount DOUBLE")
    pipe.add_source("customers", "id INT, region STRING")
    pipe.add_view("by_region", "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS s FROM orders o "
                               "JOIN customers c ON o.cust = c.id GROUP BY c.region")
    # a running standard deviation: the window by Spark (on the touched partitions in the driver)
    pipe.add_view("ranked", "SELECT id, amount, STDDEV(amount) OVER (PARTITION BY cust ORDER BY amount DESC) AS r "
                            "FROM orders")
    pipe.step({"orders": [((i, i % 5, float(i)), 1) for i in range(300)],
               "customers": [((i, f"r{i % 2}"), 1) for i in range(5)]})
    for t in range(4):
        pipe.step({"orders": [((1000 + t, t, 1.0), 1), ((t, t % 5, float(t)), -1)]})
    assert sorted(map(tuple, pipe.snapshot("by_region").collect()))  # read through Spark too
    if placement == "auto":
        assert held(location)[1], "the runs are mapped while the pipeline is open (else this test proves nothing)"
    pipe.close()
    gc.collect()
    assert held(location) == ([], [])
    assert spark_held(spark) == before


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc")
def test_runs_a_merge_replaced_go_at_the_commit_that_folds_it(spark, tmp_path):
    """No query but a tick or a merge reads an arrangement's runs, so the runs a merge
    replaced are deleted and unmapped when it is folded in, not kept for a grace period:
    a pipeline ticking for weeks maps only the runs its arrangements name."""
    location = str(tmp_path / "state")
    pipe = Pipeline(spark, location)
    pipe.add_source("orders", "id INT, cust INT, amount DOUBLE")
    pipe.add_source("customers", "id INT, region STRING")
    pipe.add_view("by_region", "SELECT c.region, COUNT(*) AS n FROM orders o JOIN customers c ON o.cust = c.id "
                               "GROUP BY c.region")
    pipe.step({"customers": [((i, f"r{i % 2}"), 1) for i in range(5)]})
    named: set[str] = set()
    for t in range(24):
        pipe.step({"orders": [((t, t % 5, 1.0), 1)], "customers": [((t % 5, f"r{t % 2}"), -1),
                                                                   ((t % 5, f"r{(t + 1) % 2}"), 1)]})
        pipe.store.settle()  # the merge the commit started is done by the next commit
        named |= {p for arrs in pipe.store.arrangements.values() for a in arrs.values() for p in a.paths()}
    live = {p for arrs in pipe.store.arrangements.values() for a in arrs.values() for p in a.paths()}
    retired = named - live
    assert retired, "no merge was folded (else this test proves nothing)"
    assert not [p for p in retired if os.path.exists(os.path.join(location, p))]
    mapped = set(held(location)[1])
    assert not [p for p in retired if os.path.join(location, p) in mapped]
    pipe.close()


def test_runs_merge_while_a_spine_merges(spark, tmp_path, monkeypatch):
    """An arrangement's runs are merged in a thread of their own: a spine's merge (a Spark
    job of seconds for a large spine) does not hold them back, so a bucket's runs do not
    pile up past the stall bound and stall the commits while it runs."""
    import threading

    from dbt_incremental_stream.runtime.storage import state

    gate = threading.Event()
    merge_spine = state.StateStore._merge_spine

    def held_spine_merge(self, *args):
        gate.wait()
        return merge_spine(self, *args)

    monkeypatch.setattr(state.StateStore, "_merge_spine", held_spine_merge)
    safety = threading.Timer(120, gate.set)  # were it held back, the stalled commit would wait for ever
    safety.start()
    pipe = Pipeline(spark, str(tmp_path / "state"))  # a spine merge from the 9th batch, its stall at the 25th
    try:
        pipe.add_source("orders", "id INT, cust INT")
        pipe.add_view("by_cust", "SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust")
        named: set[str] = set()
        folded_while_held = False
        for t in range(16):
            pipe.step({"orders": [((t, t % 3), 1)]})
            for future in list(pipe.store._run_merges.values()):
                future.result()
            live = {p for arrs in pipe.store.arrangements.values() for a in arrs.values() for p in a.paths()}
            folded_while_held |= bool(named - live) and not gate.is_set()
            named |= live
        assert pipe.store._spine_merges, "no spine merge started (else this test proves nothing)"
        assert folded_while_held
    finally:
        gate.set()
        safety.cancel()
        pipe.close()


def test_closing_lets_a_running_merge_finish(spark, tmp_path, monkeypatch):
    """Closing waits for a merge running beside the ticks in Spark instead of cancelling
    it: a cancelled job's tasks run on after close (and Spark logs their abort as errors,
    and `Failed to update accumulator` for each metric of a plan collected meanwhile)."""
    import time

    from pyspark.sql import functions as F

    from dbt_incremental_stream.runtime.storage import state

    slow = F.udf(lambda _: time.sleep(0.5) or True, "boolean")
    by_spark = state.StateStore._merge_spine_spark

    def slow_merge(self, tick, node, inputs, merge):
        return by_spark(self, tick, node, inputs, lambda n, df: merge(n, df).filter(slow(F.lit(1))))

    monkeypatch.setattr(state, "ARROW_MERGE_BYTES", -1)  # every spine merge is a Spark job
    monkeypatch.setattr(state.StateStore, "_merge_spine_spark", slow_merge)
    pipe = Pipeline(spark, str(tmp_path / "state"), max_batches=2)
    pipe.add_source("orders", "id INT, amount DOUBLE")
    for i in range(3):  # the third commit starts a merge of three batches
        pipe.step({"orders": [((10 * i + j, 1.0), 1) for j in range(4)]})
    scheduler = spark.sparkContext._jsc.sc().taskScheduler()

    def task_sets() -> int:
        """Task sets the scheduler holds: a cancelled job's stay until their tasks end."""
        return scheduler.rootPool().getSortedTaskSetQueue().size()

    until = time.monotonic() + 60
    while not task_sets() and time.monotonic() < until:
        time.sleep(0.02)
    assert task_sets(), "no merge job ran (else this test proves nothing)"
    group = pipe.store._merge_group
    pipe.close()
    assert task_sets() == 0
    tracker = spark.sparkContext.statusTracker()
    assert [str(tracker.getJobInfo(j).status) for j in tracker.getJobIdsForGroup(group)] == ["SUCCEEDED"]


def test_ticks_start_no_threads(spark, tmp_path, monkeypatch):
    """A tick fans its writing and its DataFrame collection out to threads the process
    keeps, not to threads made for the tick: each Python thread that calls Spark is a JVM
    thread too, and a long-lived process should not make them by the thousand."""
    import threading

    pipe = Pipeline(spark, str(tmp_path / "state"))
    pipe.add_source("orders", "id INT, cust INT, amount DOUBLE")
    pipe.add_view("by_cust", "SELECT cust, COUNT(*) AS n, SUM(amount) AS s FROM orders GROUP BY cust")
    pipe.add_view("ranked", "SELECT id, STDDEV(amount) OVER (PARTITION BY cust ORDER BY amount DESC) AS r FROM orders")
    pipe.step({"orders": [((i, i % 5, float(i)), 1) for i in range(300)]})
    for form in range(2):  # the first small ticks make the pools' threads
        rows = [((1000 + form, 1, 1.0), 1)]
        pipe.step({"orders": rows if form else spark.createDataFrame(
            [(*r, w) for r, w in rows], "id INT, cust INT, amount DOUBLE, _w BIGINT")})
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    for t in range(4):  # as rows, then as a DataFrame (collected from Spark)
        rows = [((2000 + t, t % 5, 2.0), 1), ((t, t % 5, float(t)), -1)]
        pipe.step({"orders": rows if t % 2 else spark.createDataFrame(
            [(*r, w) for r, w in rows], "id INT, cust INT, amount DOUBLE, _w BIGINT")})
    monkeypatch.undo()
    pipe.close()
    # but the pipeline's two merge threads (the spines', the runs'), each made at its first
    # merge and kept until it closes
    merging = [name for name in started if name.startswith(("merge_", "merge-runs_"))]
    assert [name for name in started if name not in merging] == [] and len(set(merging)) == len(merging) <= 2
