"""The twin harness on nested values: views over a source of arrays, maps, structs and JSON
strings (the shape of events from Kafka) equal Spark's batch answer after every tick, in
the driver and in Spark tasks, ANSI mode on. Generators flatten the collections
(``explode``, ``posexplode``, ``inline``, ``stack``, in the SELECT list and in ``LATERAL
VIEW [OUTER]``); nested values are grouped, deduplicated and joined on by their elements.
Adversarial values: NULL and empty collections, NULL elements, map values and fields,
NaN and both zeros inside arrays (tests/adversarial.py).
"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.twin import SETTINGS, run

NESTED_SOURCES = {
    "e": "id INT, arr ARRAY<INT>, ds ARRAY<DOUBLE>, m MAP<STRING, BIGINT>, "
         "s ARRAY<STRUCT<a: INT, b: STRING>>, st STRUCT<x: INT, y: STRING>, j STRING",
    "f": "id INT, k INT, str STRING",
}

#: view shapes over NESTED_SOURCES, by group (a group is one twin)
NESTED_SHAPES: dict[str, dict[str, str]] = {
    "generators": {
        "lateral_explode": "SELECT id, x FROM e LATERAL VIEW explode(arr) t AS x WHERE x IS NULL OR x <> 0",
        "lateral_outer_posexplode": "SELECT id, p, d FROM e LATERAL VIEW OUTER posexplode(ds) t AS p, d",
        "select_explode_map": "SELECT id, explode(m) AS (k, v) FROM e",
        "posexplode_outer_map": "SELECT id, posexplode_outer(m) FROM e",
        "inline_structs": "SELECT id, inline(s) FROM e",
        "inline_outer_structs": "SELECT id, inline_outer(s) AS (a, b) FROM e",
        "stack_columns": "SELECT id, stack(2, 'first', st.x, 'second', id) AS (which, v) FROM e",
        "two_laterals": "SELECT id, x, y FROM e LATERAL VIEW explode(arr) t AS x LATERAL VIEW OUTER explode(ds) u AS y",
        "split_words": "SELECT w, COUNT(*) AS n FROM e LATERAL VIEW explode(split(j, ',')) t AS w GROUP BY w",
        "exploded_then_grouped": "SELECT x, COUNT(*) AS n, SUM(id) AS s, collect_set(id) IS NOT NULL AS any FROM e "
                                 "LATERAL VIEW explode(arr) t AS x GROUP BY x",
        "exploded_then_joined": "SELECT u.id, u.x, f.str FROM (SELECT id, explode(arr) AS x FROM e) u "
                                "JOIN f ON u.x = f.k",
        "explode_collected": "SELECT k, explode(array_sort(collect_list(id))) AS id FROM f GROUP BY k",
    },
    "nested_values": {
        "group_by_array": "SELECT arr, COUNT(*) AS n, MAX(id) AS top FROM e GROUP BY arr",
        "distinct_struct": "SELECT DISTINCT st FROM e",
        "distinct_map_values": "SELECT DISTINCT map_values(m) AS vs FROM e",
        "join_on_struct": "SELECT a.id, b.id AS bid FROM e a JOIN e b ON a.st = b.st",
        "fields": "SELECT id, st.x AS x, m['a'] AS ma, arr[0] AS first, size(ds) AS n, element_at(s, 1).b AS b FROM e",
        "higher_order": "SELECT id, transform(arr, v -> v * 2) AS doubled, filter(ds, v -> v > 0) AS positive, "
                        "aggregate(arr, 0L, (acc, v) -> acc + coalesce(v, 0)) AS total, "
                        "exists(arr, v -> v IS NULL) AS has_null FROM e",
        "json": "SELECT id, get_json_object(j, '$.a') AS a, from_json(j, 'a INT') AS parsed, "
                "to_json(st) AS st_json FROM e",
    },
}

#: where nested values run in Spark tasks too
IN_TASKS = ("generators", "nested_values")


@pytest.mark.parametrize("group", list(NESTED_SHAPES))
@given(data=st.data())
@SETTINGS
def test_nested_shapes_equal_spark(spark, tmp_path_factory, local_new_york, group, data):
    run(data, spark, tmp_path_factory, NESTED_SOURCES, NESTED_SHAPES[group], {"spark.sql.ansi.enabled": "true"})


@pytest.mark.parametrize("group", IN_TASKS)
@given(data=st.data())
@SETTINGS
def test_nested_shapes_equal_spark_in_tasks(spark, tmp_path_factory, local_new_york, group, data):
    run(data, spark, tmp_path_factory, NESTED_SOURCES, NESTED_SHAPES[group], {"spark.sql.ansi.enabled": "true"},
        placements=("tasks",))
