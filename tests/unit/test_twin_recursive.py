"""WITH RECURSIVE, as Spark runs it (UNION ALL, level by level, within its level limit):
a graph's reachability and a bill of materials, with edges inserted and deleted, equal to
Spark batch after each tick in the driver and in tasks. A recursion that reaches the limit
fails as in Spark. The limit is set to 6 here, so the plans stay small."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dbt_incremental_stream import Pipeline
from dbt_incremental_stream.differential import Twin
from tests.twin import SETTINGS, run, spark_conf

LIMIT = {"spark.sql.cteRecursionLevelLimit": "6"}
SOURCES = {"e": "s INT, d INT, w INT"}  # integer quantities: a float sum would depend on the order
#: bounded below the limit by a depth column; the first also on a graph with cycles
VIEWS = {
    # every node reachable within 4 steps from a node that is 0 mod 3, with the number of paths to it
    "reach": "WITH RECURSIVE r(node, depth) AS (SELECT e.s, 0 FROM e WHERE e.s % 3 = 0 UNION ALL "
             "SELECT e.d, r.depth + 1 FROM r JOIN e ON e.s = r.node WHERE r.depth < 4) "
             "SELECT node, COUNT(*) AS paths, MIN(depth) AS nearest FROM r GROUP BY node",
    # a bill of materials: each part's total quantity in the parts 1 mod 3, a product along
    # each path (of quantities below 10: an overflow on a path a tick removes would fail the
    # tick, where batch never computes that path)
    "bom": "WITH RECURSIVE parts(part, qty, depth) AS (SELECT e.d, CAST(e.w % 10 AS BIGINT), 1 FROM e "
           "WHERE e.s % 3 = 1 UNION ALL SELECT e.d, p.qty * (e.w % 10), p.depth + 1 FROM parts p JOIN e "
           "ON e.s = p.part WHERE p.depth < 5) "
           "SELECT part, SUM(qty) AS total, COUNT(*) AS uses FROM parts GROUP BY part",
}


def test_reachability_and_a_bill_of_materials_with_edges_deleted(spark, tmp_path):
    """Fixed ticks: a chain grows, a second path joins it, an edge in the middle goes
    (the nodes after it are no longer reached), then a cycle forms."""
    with spark_conf(spark, LIMIT):
        twin = Twin(spark, str(tmp_path), SOURCES, VIEWS, placements=("auto", "tasks"))
        try:
            twin.step({"e": [((0, 1, 2), 1), ((1, 2, 3), 1), ((2, 3, 5), 1)]})
            twin.step({"e": [((0, 2, 1), 1), ((3, 4, 4), 1), ((1, 5, -7), 1)]})
            twin.step({"e": [((1, 2, 3), -1), ((0, 2, 1), -1)]})  # nodes 2, 3, 4 no longer reached
            twin.step({"e": [((1, 2, 3), 1), ((2, 1, 1), 1)]})  # a cycle: 1 → 2 → 1
            assert twin.arranged == 4, twin.paths
        finally:
            twin.close()


def test_a_recursion_past_the_level_limit_fails_as_in_spark(spark, tmp_path):
    """Without a bound, a cycle reaches the limit: the view is set aside with Spark's
    error, and comes back when the cycle goes. (Spark's batch query over a cycle fails in
    the twin's oracle with an internal error on an accumulator, not this one.)"""
    with spark_conf(spark, LIMIT):
        pipe = Pipeline(spark, str(tmp_path / "state"))
        try:
            pipe.add_source("e", SOURCES["e"])
            pipe.add_view("closure", "WITH RECURSIVE c(node) AS (SELECT 0 UNION ALL SELECT e.d FROM c JOIN e "
                                     "ON e.s = c.node) SELECT node, COUNT(*) AS n FROM c GROUP BY node")
            pipe.step({"e": [((0, 1, 1), 1), ((1, 2, 1), 1)]})
            assert sorted(pipe.snapshot("closure").collect()) == [(0, 1), (1, 1), (2, 1)]
            pipe.step({"e": [((2, 0, 1), 1)]})
            assert "RECURSION_LEVEL_LIMIT_EXCEEDED" in pipe.failed["closure"]
            pipe.step({"e": [((2, 0, 1), -1)]})
            assert "closure" not in pipe.failed and pipe.snapshot("closure").count() == 3
        finally:
            pipe.close()


@pytest.mark.parametrize("placement", ["auto", "tasks"])
@given(data=st.data())
@SETTINGS
def test_recursive_views_equal_spark_on_random_edges(spark, tmp_path_factory, placement, data):
    run(data, spark, tmp_path_factory, SOURCES, VIEWS, {**LIMIT, "spark.sql.ansi.enabled": "true"},
        placements=(placement,))
