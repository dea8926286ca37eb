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
    pipe.add_view("ranked", "SELECT id, amount, RANK() OVER (PARTITION BY cust ORDER BY amount DESC) AS r "
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
