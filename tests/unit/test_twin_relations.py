"""PIVOT, UNPIVOT and LATERAL subqueries over the adversarial numbers of :mod:`test_twin`,
equal to Spark batch after every tick, in the driver and in Spark tasks. A file of their
own, so that the suite's two workers share the twin files evenly."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.twin import SETTINGS, run
from tests.unit.test_twin import NUMERIC_SOURCES

#: view shapes over NUMERIC_SOURCES, by group (a group is one twin)
SHAPES: dict[str, dict[str, str]] = {
    # PIVOT: numbers only (a value without rows is NULL, COUNT too), a string among the
    # aggregates (COUNT is 0), a NULL value, two pivot columns, no grouping column left;
    # UNPIVOT of columns of two types, INCLUDE NULLS of two value columns
    "pivots": {
        "numbers": "SELECT * FROM (SELECT i, t, b, m FROM a) PIVOT (SUM(b) AS s, COUNT(*) AS n, AVG(m) AS av "
                   "FOR t IN (0 AS zero, 1 AS one, NULL AS nil, -1))",
        "strings": "SELECT * FROM (SELECT s, i, str, d FROM a) PIVOT (MAX(str) AS mx, COUNT(d) AS n FOR i IN (0, 1))",
        "pairs": "SELECT * FROM (SELECT id % 3 AS g, i, t, d FROM a) PIVOT (MIN(d) FOR (i, t) IN ((0, 0) AS zz, "
                 "(1, NULL) AS one))",
        "whole": "SELECT * FROM (SELECT t, b FROM a) PIVOT (SUM(b) FOR t IN (0, 1))",
        "unpivot": "SELECT * FROM (SELECT id, d, f FROM a) UNPIVOT (val FOR col IN (d, f AS ff))",
        "with_nulls": "SELECT * FROM (SELECT id, i, t, b FROM a) UNPIVOT INCLUDE NULLS ((x1, x2) FOR col IN "
                      "((i, t) AS it, (b, i)))",
    },
    # LATERAL subqueries: of the outer row alone, correlated by equalities or not, LEFT,
    # an aggregate without GROUP BY (one row per outer row: COUNT 0 where none correlate),
    # grouped, uncorrelated
    "laterals": {
        "computed": "SELECT o.id, s.y, s.dd FROM a o, LATERAL (SELECT o.i * 2 AS y, o.d AS dd) s",
        "matched": "SELECT o.id, s.d2 FROM a o JOIN LATERAL (SELECT e.d AS d2 FROM b e WHERE e.i = o.i) s ON TRUE",
        "left_matched": "SELECT o.id, s.d2 FROM a o LEFT JOIN LATERAL (SELECT e.d AS d2 FROM b e WHERE e.i = o.i "
                        "AND e.d > o.d) s ON TRUE",
        "counted": "SELECT o.id, s.n, s.total FROM a o, LATERAL (SELECT COUNT(*) AS n, SUM(e.x) AS total FROM b e "
                   "WHERE e.id = o.id) s WHERE s.n < 3",
        "grouped": "SELECT o.id, s.str, s.n FROM a o, LATERAL (SELECT e.str, COUNT(*) AS n FROM b e WHERE e.i = o.i "
                   "GROUP BY e.str) s",
        "uncorrelated": "SELECT o.id, s.mx FROM a o, LATERAL (SELECT MAX(e.d) AS mx FROM b e) s",
    },
}


@pytest.mark.parametrize("group", SHAPES)
@given(data=st.data())
@SETTINGS
def test_relation_shapes_equal_spark(spark, tmp_path_factory, local_new_york, group, data):
    run(data, spark, tmp_path_factory, NUMERIC_SOURCES, SHAPES[group], {"spark.sql.ansi.enabled": "true"},
        evaluator=False)


@pytest.mark.parametrize("group", SHAPES)
@given(data=st.data())
@SETTINGS
def test_relation_shapes_equal_spark_in_tasks(spark, tmp_path_factory, local_new_york, group, data):
    """The same shapes with every tick after the first in Spark tasks."""
    run(data, spark, tmp_path_factory, NUMERIC_SOURCES, SHAPES[group], {"spark.sql.ansi.enabled": "true"},
        placements=("tasks",))
