"""The twin harness on numbers and strings: after every tick, every view ("auto", on Arrow
kernels in the driver, and for :data:`EVALUATOR_TOO` "dataframe" too, every tick by the
DataFrame evaluator in Spark) is exactly what Spark returns for the view's SQL in batch, on
adversarial values (tests/adversarial.py), with ANSI mode on (and off where it matters:
:data:`LEGACY_TOO`, on arrangements only: :func:`tests.twin.checked_placements`), and the
process's local time New York's (no value may pass through it).

Views are grouped: the views of one twin share its ticks (a pipeline per group, not per
view). A failing test lists every finding of the tick: the shape (view), the placement,
and what differs. ``TWIN_EXAMPLES=10`` searches deeper (tests/twin.py).
"""
from __future__ import annotations

import math
from datetime import date as day
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dbt_incremental_stream import Pipeline
from dbt_incremental_stream.differential import Twin, compare_exact
from tests.twin import ANSI, SETTINGS, run, spark_conf


#: two sources of adversarial numbers and strings; ``a`` has a column named ``b`` and ``b``
#: one named ``a``
NUMERIC_SOURCES = {
    "a": "id INT, i INT, b BIGINT, t TINYINT, s SMALLINT, d DOUBLE, f FLOAT, m DECIMAL(10,2), x DECIMAL(38,18), "
         "z DECIMAL(38,0), k DECIMAL(10,0), str STRING",
    "b": "id INT, a DOUBLE, d DOUBLE, i INT, x DECIMAL(38,18), z DECIMAL(38,0), str STRING",
}


def _moderate(column: str) -> str:
    """``column`` is NULL, NaN, infinite, zero or of a magnitude within 1e15 of 1."""
    return (f"coalesce(isnan({column}) OR abs({column}) IN (0, double('inf')) "
            f"OR abs({column}) BETWEEN 1e-15 AND 1e15, TRUE)")


#: a window whose order is total over the columns the value functions read
_TOTAL = "OVER (PARTITION BY i ORDER BY d DESC, id, CAST(d AS STRING), x, m, str, b)"
#: an order total over every column the aggregates over ROWS frames read
_ALL = "PARTITION BY i ORDER BY d DESC, id, CAST(d AS STRING), x, m, str, b, CAST(f AS STRING), k"
#: a running frame over it, and bounded ones
_ROWS = f"OVER ({_ALL} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
_SLIDE = f"OVER ({_ALL} ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING)"
#: the default frame of an order with ties: a row's frame runs to its last peer
_PEERS = "OVER (PARTITION BY i ORDER BY d DESC)"
#: view shapes over NUMERIC_SOURCES, by group (a group is one twin)
NUMERIC_SHAPES: dict[str, dict[str, str]] = {
    "joins": {
        "join_same_type": "SELECT a.id, b.id AS bid, a.d AS ad, b.d AS bd FROM a JOIN b ON a.d = b.d",
        "join_int_double": "SELECT a.id, b.id AS bid, a.i, b.d FROM a JOIN b ON a.i = b.d",
        "join_dec10_dec38": "SELECT a.id, b.id AS bid, a.m, b.x FROM a JOIN b ON a.m = b.x",
        "join_bigint_dec38": "SELECT a.id, b.id AS bid, a.b, b.z FROM a JOIN b ON a.b = b.z",
        "join_dec_double": "SELECT a.id, b.id AS bid, a.m, b.d FROM a JOIN b ON a.m = b.d",
        "full_outer_double": "SELECT a.id, a.d, b.id AS bid, b.d AS bd FROM a FULL OUTER JOIN b ON a.d = b.d",
        "left_semi_named": "SELECT id, b FROM a LEFT SEMI JOIN b ON a.d = b.a",
        "join_string": "SELECT a.id, b.id AS bid, a.str FROM a JOIN b ON a.str = b.str",
        # a constant relation (SELECT without FROM) of both zeros, a type limit and NULL
        "join_constant": "SELECT a.id, k.v FROM a JOIN (SELECT CAST(0 AS DOUBLE) AS d, 'zero' AS v UNION ALL "
                         "SELECT -CAST(0 AS DOUBLE), 'minus zero' UNION ALL SELECT CAST(9007199254740992 AS DOUBLE), "
                         "'2^53' UNION ALL SELECT CAST(NULL AS DOUBLE), 'null') k ON a.d = k.d",
    },
    "aggregates": {
        "group_double": "SELECT d, COUNT(*) AS n, COUNT(d) AS nd, SUM(d) AS s, AVG(d) AS av, MIN(d) AS mn, "
                        "MAX(d) AS mx FROM a GROUP BY d",
        "count_distinct_double": "SELECT i, COUNT(DISTINCT d) AS dd, COUNT(DISTINCT f) AS df FROM a GROUP BY i",
        "sum_bigint": "SELECT i, SUM(b) AS s, AVG(b) AS av, SUM(t) AS st, SUM(s) AS ss FROM a GROUP BY i",
        # a float SUM is a running sum (README, known gaps): its error is relative to the
        # largest value its group has held, so finite values of magnitudes 1e30 apart
        # (1, the largest double, the smallest subnormal) are left out; NaN, ±Inf, ±0 are not
        "sum_double": "SELECT i, SUM(d) AS s, AVG(d) AS av, SUM(f) AS sf, AVG(f) AS af FROM a "
                      f"WHERE {_moderate('d')} AND {_moderate('f')} GROUP BY i",
        # DECIMAL(38, s)'s running sums have no digit to spare (README, known gaps): values
        # near its limit are left out, its last digit is not
        "sum_dec38": "SELECT i, SUM(x) AS s, AVG(x) AS av, SUM(z) AS sz, AVG(z) AS az FROM a "
                     f"WHERE x BETWEEN -{10 ** 19} AND {10 ** 19} AND z BETWEEN -{10 ** 37} AND {10 ** 37} GROUP BY i",
        "sum_dec10": "SELECT i, SUM(m) AS s, AVG(m) AS av, SUM(k) AS sk, AVG(k) AS ak FROM a GROUP BY i",
        "group_string": "SELECT str, COUNT(*) AS n, MIN(id) AS mn, MAX(id) AS mx FROM a GROUP BY str",
        # sums and averages of each group's distinct values (NaNs one value, -0.0 as 0.0)
        # beside a MIN or MAX: the touched groups re-aggregated (alone, they are linear
        # aggregates over the distinct pairs)
        "distinct_sums": "SELECT i, SUM(DISTINCT b) AS sb, AVG(DISTINCT t) AS at, SUM(DISTINCT d) AS sd, "
                         "AVG(DISTINCT m) AS am, SUM(DISTINCT k) AS sk, AVG(DISTINCT x) AS ax, MAX(d) AS xd, "
                         f"COUNT(*) AS n FROM a WHERE {_moderate('d')} AND x BETWEEN -{10 ** 19} AND {10 ** 19} "
                         "GROUP BY i",
        "distinct_sums_all": f"SELECT SUM(DISTINCT s) AS ss, AVG(DISTINCT d) AS ad, MIN(str) AS ms FROM a "
                             f"WHERE {_moderate('d')}",
        # aggregates over whole partitions (no ORDER BY): each row has its group's values
        "window_totals": "SELECT id, i, SUM(b) OVER (PARTITION BY i) AS s, COUNT(*) OVER (PARTITION BY i) AS n, "
                         "AVG(m) OVER (PARTITION BY i) AS av, MIN(d) OVER (PARTITION BY i) AS mn, "
                         "MAX(d) OVER (PARTITION BY i) AS mx, COUNT(f) OVER (PARTITION BY i) AS nf FROM a",
        "window_totals_by_double": "SELECT id, d, COUNT(*) OVER (PARTITION BY d) AS n, MAX(f) OVER (PARTITION BY d) "
                                   "AS mf, SUM(k) OVER (PARTITION BY d) AS sk FROM a",
        # variances and standard deviations (of doubles whose squares stay finite: past
        # that Spark's own answer is inf or NaN by its partitions' order), of decimals as
        # the doubles nearest them, of BIGINT limits; per group, of all rows, per partition
        "moments": "SELECT i, STDDEV(d) AS sd, VAR_POP(d) AS vp, VARIANCE(b) AS vb, STDDEV_POP(m) AS sm, "
                   f"VAR_SAMP(x) AS vx, STDDEV_SAMP(k) AS sk, COUNT(*) AS n FROM a WHERE {_moderate('d')} GROUP BY i",
        "moments_all": "SELECT VAR_SAMP(b) AS vb, STDDEV(m) AS sm, VAR_POP(z) AS vz FROM a",
        "moments_window": "SELECT id, i, STDDEV_POP(d) OVER (PARTITION BY i) AS sd, VARIANCE(m) OVER (PARTITION BY i) "
                          f"AS vm FROM a WHERE {_moderate('d')}",
        # read from the ends of ordered arrangements (type limits, NULLs, all rows deleted)
        "global_extremes": "SELECT MIN(b) AS mb, MAX(b) AS xb, MIN(t) AS mt, MAX(s) AS xs, MAX(m) AS xm, "
                           "MIN(k) AS mk FROM a",
    },
    # aggregates Spark computes over the touched groups (the engine keeps their rows); where
    # Spark's own answer depends on the rows' order, the order-independent part: a sorted
    # collect_list, max_by of a value that its ordering decides, listagg WITHIN GROUP
    "spark_aggregates": {
        "percentiles": "SELECT i, percentile(d, 0.5) AS p, median(m) AS md, percentile(b, array(0.25, 0.75)) AS ps, "
                       "percentile_approx(k, 0.5) AS pa, percentile_approx(t, array(0.1, 0.9), 100) AS pas "
                       "FROM a GROUP BY i",
        "collections": "SELECT i, array_sort(collect_list(str)) AS l, array_sort(collect_set(b)) AS st, "
                       "size(collect_list(d)) AS n, array_sort(collect_list(m)) AS lm FROM a GROUP BY i",
        "by_and_if": "SELECT i, max_by(b % 7, b) AS mx, min_by(str, struct(k, str)) AS mn, count_if(d > 0) AS c, "
                     "bool_and(b > 0) AS ba, bool_or(str IS NULL) AS bo, every(t > 0) AS ev FROM a GROUP BY i",
        "listagg": "SELECT i, listagg(str, ',') WITHIN GROUP (ORDER BY str) AS la, "
                   "count_if(m > 0) FILTER (WHERE b > 0) AS cf FROM a GROUP BY i",
        "global": "SELECT percentile(s, 0.5) AS p, count_if(b > 0) AS c, array_sort(collect_list(i)) AS l, "
                  "max_by(id, struct(b, id)) AS top FROM a",
        # an array a collect_list makes, grouped by and joined on in turn
        "regrouped": "SELECT l, COUNT(*) AS n FROM (SELECT i, array_sort(collect_set(s)) AS l FROM a GROUP BY i) "
                     "GROUP BY l",
    },
    # grouping sets: a union of aggregates, the keys a set leaves out NULL, grouping() and
    # grouping_id() from each row's set; the empty set has no row over no rows
    "grouping_sets": {
        "rollup": "SELECT i, str, COUNT(*) AS n, SUM(b) AS s, MAX(d) AS mx, grouping_id() AS g FROM a "
                  "GROUP BY ROLLUP(i, str)",
        "cube": "SELECT i, t, COUNT(*) AS n, AVG(m) AS av, grouping(i) AS gi, grouping(t) AS gt FROM a "
                "GROUP BY CUBE(i, t)",
        "sets": "SELECT d, str, SUM(k) AS s, COUNT(DISTINCT i) AS di FROM a "
                "GROUP BY GROUPING SETS ((d), (str), (d, str), ()) HAVING COUNT(*) > 1",
        "mixed": "SELECT i, str, percentile(s, 0.5) AS p, grouping_id(i, str) AS g, grouping(str) AS gs FROM a "
                 "GROUP BY i, ROLLUP(str)",
    },
    "sets": {
        "distinct_double": "SELECT DISTINCT d, f FROM a",
        "union_double": "SELECT d FROM a UNION SELECT d FROM b",
        # the union's type is DECIMAL(38, 0): the first arm's decimals are rounded HALF_UP
        "union_rescaled": "SELECT i, x AS v FROM a UNION ALL SELECT i, z FROM b",
        "intersect_double": "SELECT d FROM a INTERSECT SELECT d FROM b",
        "except_double": "SELECT d FROM a EXCEPT SELECT d FROM b",
        "not_in_double": "SELECT id, d FROM a WHERE d NOT IN (SELECT d FROM b)",
    },
    "order": {
        # CAST(d AS STRING) tells -0.0 from 0.0, which Spark's ordering and partitioning do
        # not: with it the order is total and the batch answer unique
        "row_number_double": "SELECT id, d, i, ROW_NUMBER() OVER (PARTITION BY d ORDER BY id, CAST(d AS STRING), i, "
                             "b, m, x) AS rn FROM a",
        # ordered by a double: NaN above every number, both ways, NULLs where asked
        "row_number_by_double": "SELECT id, d, i, ROW_NUMBER() OVER (PARTITION BY i ORDER BY d DESC, id, "
                                "CAST(d AS STRING)) AS rn FROM a",
        "top_by_float": "SELECT * FROM (SELECT id, f, ROW_NUMBER() OVER (PARTITION BY str ORDER BY f NULLS LAST, id, "
                        "CAST(f AS STRING)) AS rn FROM a) WHERE rn <= 2",
        # ties everywhere: peers where Spark's ordering finds two doubles equal (NULLs,
        # NaNs, -0.0 and 0.0), which every ranking but ROW_NUMBER gives one value
        "ranks_by_double": "SELECT id, d, i, RANK() OVER (PARTITION BY i ORDER BY d DESC) AS r, "
                           "DENSE_RANK() OVER (PARTITION BY i ORDER BY d DESC) AS dr, "
                           "PERCENT_RANK() OVER (PARTITION BY i ORDER BY d DESC) AS pr, "
                           "CUME_DIST() OVER (PARTITION BY i ORDER BY d DESC) AS cd FROM a",
        "dense_top_float": "SELECT * FROM (SELECT id, f, str, DENSE_RANK() OVER (PARTITION BY str "
                           "ORDER BY f NULLS LAST) AS dr FROM a) WHERE dr <= 2",
        "rank_partitioned_by_double": "SELECT id, d, RANK() OVER (PARTITION BY d ORDER BY m) AS r FROM a",
        # another row's value: the order is total (every column read among its terms)
        "values_by_double": f"SELECT id, d, i, LAG(d) {_TOTAL} AS prev, LEAD(x, 2) {_TOTAL} AS nxt, "
                            f"LAG(m, 1, 0) {_TOTAL} AS pm, FIRST_VALUE(str) {_TOTAL} AS fs, "
                            f"LAST_VALUE(d) {_TOTAL} AS ld, NTH_VALUE(b, 2) {_TOTAL} AS nb FROM a",
        # NTILE, and the values a frame holds once its NULLs are skipped (a "last known value")
        "ntile_ignoring_nulls": f"SELECT id, i, NTILE(3) {_TOTAL} AS t3, FIRST_VALUE(str) IGNORE NULLS {_TOTAL} AS fs, "
                                f"LAST_VALUE(d) IGNORE NULLS {_TOTAL} AS ld, NTH_VALUE(x, 2) IGNORE NULLS OVER "
                                "(PARTITION BY i ORDER BY d DESC, id, CAST(d AS STRING), x, m, str, b ROWS BETWEEN "
                                "UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS nx, "
                                f"LAG(b, 2) IGNORE NULLS {_TOTAL} AS pb, LEAD(m) IGNORE NULLS {_TOTAL} AS nm FROM a",
        "last_of_partition": "SELECT id, i, LAST_VALUE(x) OVER (PARTITION BY i ORDER BY id, CAST(d AS STRING), b, m, x "
                             "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS lx FROM a",
        # running aggregates: to the last peer (ties on a double: NULLs, NaNs, both zeros;
        # a peer's values are equal, so the order among peers changes no sum) ...
        "running_to_peers": f"SELECT id, i, d, COUNT(*) {_PEERS} AS n, COUNT(f) {_PEERS} AS nf, "
                            f"SUM(d) {_PEERS} AS sd, AVG(d) {_PEERS} AS ad, SUM(i) {_PEERS} AS si, "
                            f"AVG(t) {_PEERS} AS at, SUM(m) {_PEERS} AS sm, AVG(m) {_PEERS} AS am, "
                            f"MAX(str) {_PEERS} AS xs, MIN(k) {_PEERS} AS mk, MAX(d) {_PEERS} AS xd FROM a",
        # ... and to the current row, over a total order: floats added in Spark's order
        "running_rows": f"SELECT id, i, SUM(d) {_ROWS} AS sd, AVG(f) {_ROWS} AS af, MIN(d) {_ROWS} AS md, "
                        f"MAX(f) {_ROWS} AS xf, SUM(k) {_ROWS} AS sk, MAX(x) {_ROWS} AS xx, "
                        f"COUNT(str) {_ROWS} AS ns FROM a",
        # bounded frames: each summed anew from its first row, as Spark sums it; frames
        # ahead of the row, and ending before it (empty at a partition's start)
        "sliding_rows": f"SELECT id, i, SUM(d) {_SLIDE} AS sd, AVG(m) {_SLIDE} AS am, MIN(f) {_SLIDE} AS mf, "
                        f"MAX(str) {_SLIDE} AS xs, COUNT(*) {_SLIDE} AS n, "
                        f"SUM(k) OVER ({_ALL} ROWS BETWEEN 1 FOLLOWING AND 3 FOLLOWING) AS sk, "
                        f"AVG(d) OVER ({_ALL} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS ad FROM a",
        # frames to the partition's end, and of all of it (summed in its order, as Spark does)
        "to_partition_end": f"SELECT id, i, SUM(k) OVER ({_ALL} ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS "
                            f"rest, MAX(d) OVER ({_ALL} ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS later, "
                            f"SUM(d) OVER ({_ALL} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS total, "
                            f"COUNT(*) OVER ({_ALL} ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS ahead FROM a",
        # variances and deviations over frames, updated a row at a time as Spark's buffer
        # (to the last peer of equal doubles; to the row and sliding, over a total order)
        "peer_moments": f"SELECT id, i, STDDEV(d) {_PEERS} AS sp, VAR_POP(d) {_PEERS} AS vp FROM a "
                        f"WHERE {_moderate('d')}",
        "running_moments": f"SELECT id, i, VAR_POP(d) {_ROWS} AS vr, VARIANCE(m) {_ROWS} AS vm, "
                           f"STDDEV_POP(b) {_SLIDE} AS sb, VAR_SAMP(k) {_SLIDE} AS vk FROM a WHERE {_moderate('d')}",
        # functions of several window specifications in one SELECT: each computed over the
        # touched partitions' rows, side by side
        "mixed_windows": f"SELECT id, i, ROW_NUMBER() {_TOTAL} AS rn, SUM(b) OVER (PARTITION BY i) AS s, "
                         f"COUNT(*) {_PEERS} AS n, SUM(k) {_ROWS} AS sk, MAX(str) OVER (PARTITION BY i, t) AS xs "
                         "FROM a",
        # RANGE frames of offsets: the rows whose ORDER BY value is near the row's own
        "range_frames": "SELECT id, i, COUNT(*) OVER (PARTITION BY str ORDER BY i RANGE BETWEEN 2 PRECEDING AND "
                        "CURRENT ROW) AS n, SUM(k) OVER (PARTITION BY str ORDER BY i RANGE BETWEEN 2 PRECEDING AND "
                        "1 FOLLOWING) AS sk, MAX(x) OVER (PARTITION BY str ORDER BY i RANGE BETWEEN CURRENT ROW AND "
                        "UNBOUNDED FOLLOWING) AS xx FROM a WHERE i BETWEEN -1000 AND 1000",
        # ... over doubles with NULLs, NaNs, infinities and both zeros (a NULL or NaN plus an
        # offset is itself: its peers), both directions, NULLs first and last
        "range_over_doubles": "SELECT id, i, COUNT(*) OVER (PARTITION BY i ORDER BY d RANGE BETWEEN 1.5 PRECEDING "
                              "AND 0.5 FOLLOWING) AS n, SUM(k) OVER (PARTITION BY i ORDER BY d DESC NULLS LAST RANGE "
                              "BETWEEN UNBOUNDED PRECEDING AND 1 FOLLOWING) AS sk FROM a",
        "range_desc": "SELECT id, m, SUM(i) OVER (PARTITION BY b ORDER BY m DESC RANGE BETWEEN 1.5 PRECEDING AND "
                      "0.25 FOLLOWING) AS si, MIN(str) OVER (PARTITION BY b ORDER BY m DESC RANGE BETWEEN UNBOUNDED "
                      "PRECEDING AND 1 PRECEDING) AS ms FROM a WHERE m BETWEEN -1000000 AND 1000000",
        # wide decimals, summed exactly (near their limits a frame's sum leaves the type:
        # test_running_sums_that_leave_their_type)
        "running_wide": "SELECT id, i, SUM(x) OVER (PARTITION BY i ORDER BY id) AS sx, "
                        "AVG(z) OVER (PARTITION BY i ORDER BY id) AS az, "
                        "AVG(x) OVER (PARTITION BY i ORDER BY id) AS ax "
                        f"FROM a WHERE x BETWEEN -{10 ** 19} AND {10 ** 19} AND z BETWEEN -{10 ** 37} AND {10 ** 37}",
        "order_limit_decimal": "SELECT id, x, b FROM a ORDER BY x DESC, b LIMIT 3",
        "order_limit_double": "SELECT id, d, CAST(d AS STRING) AS ds FROM a ORDER BY d DESC, id, ds LIMIT 3",
    },
}


#: the groups run with ANSI mode off too: it changes what overflow and division give and
#: how keys of two types compare; the others' answers do not depend on it
LEGACY_TOO = ("joins", "aggregates")
#: the group whose twin also runs the DataFrame evaluator on every tick (with ANSI mode on:
#: :func:`tests.twin.checked_placements`): keys of two types meet in its joins
EVALUATOR_TOO = ("joins",)


@pytest.mark.parametrize("group, ansi", [(g, a) for g in NUMERIC_SHAPES for a in (True, False) if a or g in LEGACY_TOO],
                         ids=lambda v: v if isinstance(v, str) else "ansi" if v else "legacy")
@given(data=st.data())
@SETTINGS
def test_numeric_shapes_equal_spark(spark, tmp_path_factory, local_new_york, group, ansi, data):
    run(data, spark, tmp_path_factory, NUMERIC_SOURCES, NUMERIC_SHAPES[group],
        {"spark.sql.ansi.enabled": str(ansi).lower()}, evaluator=group in EVALUATOR_TOO)


# --- findings, as fixed ticks --------------------------------------------------------------


def test_groups_and_partitions_keyed_by_both_zeros_or_both_nans(spark, tmp_path):
    """A tick whose rows spell one float key two ways (-0.0 and 0.0, NaNs of either sign)
    touches one group or partition, as in Spark: on arrangements its stored rows are read,
    and its emitted rows retracted, once (read once per spelling, they counted twice),
    while each row keeps its own -0.0 or 0.0; the same for a top-k over that column."""
    nan = math.nan
    twin = Twin(spark, str(tmp_path), {"t": "id INT, d DOUBLE"}, {
        "ranked": "SELECT id, d, ROW_NUMBER() OVER (PARTITION BY d ORDER BY id) AS rn FROM t",
        "grouped": "SELECT d, COUNT(*) AS n, MAX(id) AS top FROM t GROUP BY d",
        "top": "SELECT id, d FROM t ORDER BY d DESC, id LIMIT 2",
    })
    try:
        twin.step({"t": [((1, -0.0), 1), ((2, nan), 1), ((9, 1.0), 1)]})
        twin.step({"t": [((3, 0.0), 1), ((4, -0.0), 1), ((5, -nan), 1), ((6, nan), 1)]})
        twin.step({"t": [((1, -0.0), -1), ((3, 0.0), -1), ((7, 0.0), 1), ((2, nan), -1), ((8, -nan), 1)]})
        assert twin.arranged == 3, twin.paths
    finally:
        twin.close()


@ANSI
def test_keys_of_a_string_and_a_number_compare_as_spark(spark, tmp_path, ansi):
    """A join of a STRING key with a number or a DATE joins on the casts Spark's analysis
    makes (``CAST(s AS BIGINT) = CAST(i AS BIGINT)`` under ANSI, ``CAST(s AS INT) = i``
    without): each side's state arranged by its cast, every tick on arrangements in the
    driver and in tasks (it ran on the DataFrame evaluator), equal to Spark: whitespace,
    signs, a value past INT, NULL under ``<=>``; under ANSI a string that does not cast is
    Spark's error until a tick deletes it, without it NULL (no match)."""
    views = {
        "to_int": "SELECT a.id, b.id AS bid, a.s, b.i FROM a JOIN b ON a.s = b.i",
        "to_double": "SELECT a.id, b.id AS bid FROM a JOIN b ON b.d = a.s",
        "to_bigint": "SELECT a.id, b.id AS bid FROM a LEFT JOIN b ON a.s <=> b.bi",
        "to_decimal": "SELECT a.id, b.id AS bid FROM a JOIN b ON a.s = b.m AND a.id < b.id",
        "to_date": "SELECT a.id, b.id AS bid FROM a JOIN b ON a.day = b.dt",
    }
    with spark_conf(spark, {"spark.sql.ansi.enabled": str(ansi).lower()}):
        twin = Twin(spark, str(tmp_path), {"a": "id INT, s STRING, day STRING",
                                           "b": "id INT, i INT, d DOUBLE, dt DATE, bi BIGINT, m DECIMAL(10,2)"},
                    views, placements=("auto", "tasks"))
        try:
            twin.step({"a": [((1, "1", "2020-01-01"), 1), ((2, " 2 ", " 2020-01-02 "), 1), ((3, "-0", None), 1),
                             ((4, None, "2020-01-01"), 1), ((5, "2147483648", "2020-01-03"), 1)],
                       "b": [((1, 1, 1.0, day(2020, 1, 1), 1, Decimal("1.00")), 1),
                             ((2, 2, 2.0, day(2020, 1, 2), 2, Decimal("2")), 1),
                             ((3, 0, -0.0, None, None, Decimal(0)), 1),
                             ((4, None, float("nan"), day(2020, 1, 3), 2147483648, None), 1)]})
            twin.step({"a": [((6, "x1", "2020-13-01"), 1), ((7, "10", "2020-01-02"), 1), ((1, "1", "2020-01-01"), -1)],
                       "b": [((5, 10, 10.0, day(2020, 1, 2), 10, Decimal("10.5")), 1)]})
            twin.step({"a": [((6, "x1", "2020-13-01"), -1), ((8, "0", "2020-01-03"), 1)],
                       "b": [((2, 2, 2.0, day(2020, 1, 2), 2, Decimal("2")), -1)]})
            assert twin.arranged == 3, twin.paths
            assert "CAST(`a__s` AS BIGINT)" in twin.auto.explain("to_int") if ansi else \
                "CAST(`a__s` AS INT)" in twin.auto.explain("to_int")
            assert "compared by Spark" not in "".join(twin.auto.explain(v) for v in views)
            assert bool(twin.errors) == ansi, twin.errors  # the bad strings: Spark's error under ANSI
        finally:
            twin.close()


def test_a_decorrelated_subquery_joins_on_its_keys_alone(spark, tmp_path):
    """A correlated subquery's join (``ON (`a__k`) = (`_k0`)``, as the decorrelation
    writes it; ``<=>`` where NULLs match, NULL-safe as written) is a join on its keys: no
    part of ON is left to evaluate after the probe (in Spark, where Arrow does not compile
    it: in tasks, the tick's decline)."""
    twin = Twin(spark, str(tmp_path), {"a": "id INT, k INT, v INT", "b": "k INT, w INT"}, {
        "q": "SELECT a.id FROM a WHERE a.v = (SELECT MAX(b.w) FROM b WHERE b.k = a.k)",
    })
    try:
        twin.step({"a": [((1, None, 5), 1), ((2, 5, 7), 1)], "b": [((None, 5), 1), ((5, 7), 1)]})
        twin.step({"a": [((3, None, 5), 1), ((4, 5, 8), 1)], "b": [((None, 8), 1), ((5, 8), 1)]})
        twin.step({"a": [((1, None, 5), -1)], "b": [((5, 7), -1)]})
        assert twin.arranged == 3, twin.paths
        assert "the rest of ON" not in twin.auto.explain("q")
    finally:
        twin.close()


def test_rows_numbered_by_a_double_on_arrangements(spark, tmp_path):
    """ROW_NUMBER ordered by a DOUBLE runs on arrangements and numbers as Spark does: NaN
    above +Infinity ascending and descending, NULLs where asked, -0.0 tied with 0.0."""
    nan, inf = math.nan, math.inf
    twin = Twin(spark, str(tmp_path), {"t": "id INT, g INT, d DOUBLE"}, {
        "up": "SELECT id, d, ROW_NUMBER() OVER (PARTITION BY g ORDER BY d NULLS FIRST, id) AS rn FROM t",
        "top": "SELECT * FROM (SELECT id, g, d, ROW_NUMBER() OVER (PARTITION BY g ORDER BY d DESC, id) AS rn "
               "FROM t) WHERE rn <= 3",
    })
    try:
        twin.step({"t": [((1, 1, inf), 1), ((2, 1, nan), 1), ((3, 1, None), 1), ((4, 1, -0.0), 1), ((5, 2, 1.5), 1)]})
        twin.step({"t": [((6, 1, 0.0), 1), ((7, 1, -nan), 1), ((8, 2, -inf), 1), ((9, 2, None), 1)]})
        twin.step({"t": [((2, 1, nan), -1), ((1, 1, inf), -1), ((10, 1, 2.0), 1), ((11, 2, nan), 1)]})
        assert twin.arranged == 3, twin.paths
    finally:
        twin.close()


def test_avg_of_a_wide_decimal_rounds_at_its_result_scale(spark, tmp_path):
    """AVG of DECIMAL(38, 18) is DECIMAL(38, 22), divided at that scale as Spark's Average
    divides: 1E-18 and 0 average to 5E-19 (SQL's own division of the sum by the count
    rounds at 18 decimals, to 1E-18)."""
    with spark_conf(spark, {"spark.sql.ansi.enabled": "false"}):
        twin = Twin(spark, str(tmp_path), {"a": "id INT, i INT, x DECIMAL(38,18)"},
                    {"v": "SELECT i, SUM(x) AS s, AVG(x) AS av, COUNT(x) AS n FROM a GROUP BY i"})
        try:
            twin.step({"a": [((5, 2, Decimal(0)), 1)]})
            twin.step({"a": [((3, 2, Decimal("1E-18")), 1), ((6, 2, Decimal("0.000000000000000003")), 1)]})
            twin.step({"a": [((6, 2, Decimal("0.000000000000000003")), -1)]})
            assert twin.arranged == 3, twin.paths
        finally:
            twin.close()


@ANSI
def test_avg_of_bigints_sums_their_doubles(spark, tmp_path, ansi):
    """AVG of BIGINT sums the values' DOUBLEs as Spark's Average does: 2^63 - 1 and -2^63
    are ±2^63 in DOUBLE and average to 0.0 (their exact sum, -1, would give -0.5), while
    SUM stays exact: -1. The first tick's partial sums come from Spark, the later ones
    from the kernels: deleting what one added leaves nothing behind (Spark's own cast of
    2^63 to DECIMAL is 9223372036854776000)."""
    big = (1 << 63) - 1
    with spark_conf(spark, {"spark.sql.ansi.enabled": str(ansi).lower()}):
        twin = Twin(spark, str(tmp_path), {"a": "id INT, i INT, b BIGINT"},
                    {"v": "SELECT i, SUM(b) AS s, AVG(b) AS av, COUNT(*) AS n FROM a GROUP BY i"})
        try:
            twin.step({"a": [((1, 2, -5), 1), ((5, 2, big), 1), ((6, 3, big), 1)]})
            twin.step({"a": [((2, 2, big), 1), ((3, 2, -big - 1), 1), ((1, 2, -5), -1), ((5, 2, big), -1)]})
            twin.step({"a": [((2, 2, big), -1), ((4, 2, 1), 1), ((6, 3, big), -1), ((7, 3, 1), 1)]})
            assert twin.arranged == 3, twin.paths
        finally:
            twin.close()


def test_sample_moments_of_one_value_under_legacy_statistics(spark, tmp_path):
    """With ``spark.sql.legacy.statisticalAggregate`` on, a sample's variance or deviation
    of one value is NaN, not NULL: per group, over a partition and running, every tick
    equal to Spark's batch under the same setting and on arrangements, in the driver and
    in tasks."""
    views = {"grouped": "SELECT i, VAR_SAMP(d) AS v, STDDEV(d) AS s, VAR_POP(d) AS p FROM a GROUP BY i",
             "each": "SELECT id, VARIANCE(d) OVER (PARTITION BY i) AS v, STDDEV_SAMP(d) OVER (PARTITION BY i "
                     "ORDER BY id) AS r FROM a"}
    with spark_conf(spark, {"spark.sql.legacy.statisticalAggregate": "true"}):
        for placement in ("auto", "tasks"):
            twin = Twin(spark, str(tmp_path / placement), {"a": "id INT, i INT, d DOUBLE"}, views,
                        placements=(placement,))
            try:
                twin.step({"a": [((1, 1, 2.0), 1), ((2, 2, 3.0), 1), ((3, 2, 5.0), 1)]})
                twin.step({"a": [((3, 2, 5.0), -1), ((4, 3, None), 1), ((5, 1, 4.0), 1)]})
                twin.step({"a": [((5, 1, 4.0), -1), ((6, 3, 1.5), 1)]})
                assert twin.checks == 3 * 2 and twin.arranged == 3, twin.paths
            finally:
                twin.close()


@ANSI
def test_running_sums_that_leave_their_type(spark, tmp_path, ansi):
    """A running SUM of BIGINT past 2^63 - 1 at one row of its frame, and one of
    DECIMAL(38, 0) past 38 digits: with ANSI on the view fails as Spark's batch does (the
    kernel leaves the frame to Spark, whose error it is); off, Spark's wrapped BIGINT and
    NULL decimal. A later tick deleting the large values brings them back in range."""
    big, wide = (1 << 63) - 1, Decimal(10 ** 38 - 1)
    with spark_conf(spark, {"spark.sql.ansi.enabled": str(ansi).lower()}):
        twin = Twin(spark, str(tmp_path), {"a": "id INT, i INT, b BIGINT, z DECIMAL(38,0)"}, {
            "v": "SELECT id, SUM(b) OVER (PARTITION BY i ORDER BY id) AS sb, "
                 "SUM(z) OVER (PARTITION BY i ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sz, "
                 "COUNT(*) OVER (PARTITION BY i ORDER BY id) AS n FROM a"})
        try:
            twin.step({"a": [((1, 1, 5, Decimal(1)), 1), ((2, 1, -7, Decimal(2)), 1), ((3, 2, big, Decimal(3)), 1)]})
            twin.step({"a": [((4, 2, big, wide), 1), ((5, 2, 1, wide), 1), ((6, 1, big, Decimal(-4)), 1)]})
            twin.step({"a": [((4, 2, big, wide), -1), ((6, 1, big, Decimal(-4)), -1), ((7, 1, -big, Decimal(0)), 1)]})
            assert "running SUM(a__b), running SUM(a__z), running COUNT(*) in Arrow" in twin.auto.explain("v")
            if not ansi:  # every tick on arrangements: Spark computes only the frames out of range
                assert twin.arranged == 3, twin.paths
        finally:
            twin.close()


@ANSI
def test_a_tick_s_decimal_sums_past_38_digits_are_kept_exact(spark, tmp_path, ansi):
    """A tick whose rows of a group sum past DECIMAL(38, 0) (two values of 9e37): the
    group's SUM and AVG fail the view as Spark's batch does (ANSI on) or are NULL (off),
    and once rows are deleted and the sum is back in range they are Spark's again (the
    AVG of 9e37 and two small values is past DECIMAL(38, 4) too): the
    tick's partial sum is kept exactly, in rows that fit the type (Arrow's sum wrapped
    around 2^127, and Spark's partial sum is NULL: the group's later sums left its rows
    out). In the driver and in Spark tasks; the ticks keep to rows whose running sums in
    Spark's order stay in range (Spark's overflow follows its row order)."""
    wide = Decimal(9 * 10 ** 37)
    with spark_conf(spark, {"spark.sql.ansi.enabled": str(ansi).lower()}):
        twin = Twin(spark, str(tmp_path), {"t": "id INT, g INT, d DECIMAL(38,0)"},
                    {"sums": "SELECT g, AVG(d) AS a, SUM(d) AS s, COUNT(*) AS n FROM t GROUP BY g"},
                    placements=("auto", "tasks"))
        try:
            for tick in ([((1, 1, Decimal(1)), 1), ((2, 2, Decimal(2)), 1), ((3, 1, Decimal(3)), 1)],
                         [((4, 1, wide), 1), ((5, 1, wide), 1)],
                         [((4, 1, wide), -1), ((6, 2, Decimal(4)), 1)],
                         [((5, 1, wide), -1), ((7, 2, Decimal(4)), 1)],
                         [((8, 1, wide), 2), ((7, 2, Decimal(4)), 1)],
                         [((8, 1, wide), -1)]):
                twin.step({"t": tick})
            failed = {t for t, _ in twin.errors}
            assert failed == ({2, 3, 5, 6} if ansi else set()), twin.errors  # 6: AVG past DECIMAL(38, 4)
            assert twin.arranged == 6, twin.paths
        finally:
            twin.close()


#: the shape groups whose every operator runs in Spark tasks ("order" orders windows by an
#: expression only Spark computes exactly: a column computed before the window, by Spark
#: between two stages)
IN_TASKS = ("joins", "sets", "aggregates", "spark_aggregates", "grouping_sets", "order")


@pytest.mark.parametrize("group", IN_TASKS)
@given(data=st.data())
@SETTINGS
def test_numeric_shapes_equal_spark_in_tasks(spark, tmp_path_factory, local_new_york, group, data):
    """The same shapes with every tick after the first in Spark tasks (:mod:`.tasks`)."""
    run(data, spark, tmp_path_factory, NUMERIC_SOURCES, NUMERIC_SHAPES[group], {"spark.sql.ansi.enabled": "true"},
        placements=("tasks",))


#: Maps and Filters only Spark computes exactly (decimal division), over a source and after
#: an aggregate, one after another
BY_SPARK = {
    "ratio": "SELECT g, SUM(m) / SUM(n) AS r, 100.00 * SUM(m) / COUNT(*) AS p FROM a GROUP BY g",
    "picky": "SELECT id, m FROM a WHERE m / n > 1.5",
    "chained": "SELECT g, r * 3 / 7 AS r3 FROM (SELECT g, SUM(m) / SUM(n) AS r FROM a GROUP BY g) WHERE r / 3 > 0.1",
    # an aggregate's output computed by Spark, then probed by a join and regrouped: state
    # of its own (a task has no Spark to compute it over the probed rows)
    "joined": "SELECT a.id, t.r FROM a JOIN (SELECT g, SUM(m) / SUM(n) AS r FROM a GROUP BY g) t ON a.g = t.g",
    "regrouped": "SELECT g % 2 AS h, MAX(r) AS top, COUNT(*) AS k FROM (SELECT g, SUM(m) / SUM(n) AS r FROM a "
                 "GROUP BY g) WHERE r > -100 GROUP BY g % 2",
}
BY_SPARK_TICKS = [
    [((1, 1, Decimal("10.00"), Decimal("3.0000")), 1), ((2, 1, Decimal("-4.25"), Decimal("7.1234")), 1),
     ((3, 2, Decimal("99999999.99"), Decimal("0.0007")), 1), ((4, None, None, Decimal("1.0000")), 1)],
    [((5, 2, Decimal("1.00"), Decimal("-3.0000")), 1), ((1, 1, Decimal("10.00"), Decimal("3.0000")), -1),
     ((6, 3, Decimal("7.77"), Decimal("2.5000")), 1)],
    [((7, 1, Decimal("0.01"), Decimal("99999999.9999")), 1), ((3, 2, Decimal("99999999.99"), Decimal("0.0007")), -1)],
]


def test_spark_expressions_run_between_stages_in_tasks(spark, tmp_path):
    """A Map or Filter Arrow does not compute exactly runs in Spark between two stages of
    a tick in tasks (:func:`.tasks._through_spark`): every tick in tasks, each view
    Spark's batch answer, with the tick's rows held in the driver (split there) and
    handed over as a DataFrame (split by Spark's tasks)."""
    in_tasks_both_ways(spark, tmp_path, "id INT, g INT, m DECIMAL(10,2), n DECIMAL(12,4)", BY_SPARK, BY_SPARK_TICKS,
                       "by Spark")


def in_tasks_both_ways(spark, tmp_path, ddl: str, views: dict[str, str], ticks: list, explained: str | None) -> None:
    """``views`` over a source ``a`` of ``ddl`` (each explained with ``explained``): every
    tick in Spark tasks, each view Spark's batch answer, with the tick's rows held in the
    driver (a twin) and handed over as a DataFrame."""
    twin = Twin(spark, str(tmp_path / "twin"), {"a": ddl}, views, placements=("tasks",))
    pipe = Pipeline(spark, str(tmp_path / "frames"), placement="tasks")
    try:
        pipe.add_source("a", ddl)
        for name, sql in views.items():
            pipe.add_view(name, sql)
            assert explained is None or explained in pipe.explain(name), pipe.explain(name)
        for tick in ticks:
            twin.step({"a": tick})
            pipe.step({"a": spark.createDataFrame([(*row, w) for row, w in tick], f"{ddl}, _w BIGINT")})
            assert pipe.last_tick is not None and pipe.last_tick.path == "tasks", pipe.last_tick
        assert twin.arranged == len(ticks), twin.paths
        want = twin.oracle.answers(list(views))
        for name in views:
            assert compare_exact(pipe.snapshot(name).toArrow(), want[name]) is None, name
    finally:
        twin.close()
        pipe.close()


#: windows Arrow has no form of (a frame of months, a percentile, a distinct count), per
#: partition, over one partition of all rows, and beside a window Arrow computes
WINDOWS_BY_SPARK = {
    "months": "SELECT id, g, SUM(n) OVER (PARTITION BY g ORDER BY ts RANGE BETWEEN INTERVAL 1 MONTH PRECEDING "
              "AND CURRENT ROW) AS s FROM a",
    "counted": "SELECT id, g, approx_count_distinct(n) OVER (PARTITION BY g ORDER BY id) AS kinds, "
               "percentile(n, 0.5) OVER (PARTITION BY g) AS med, count_if(n > 5) OVER (PARTITION BY g) AS big FROM a",
    "whole": "SELECT id, COUNT(*) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 2 MONTH PRECEDING AND CURRENT ROW) AS k "
             "FROM a",
    "ranked": "SELECT id, g, RANK() OVER (PARTITION BY g ORDER BY n) AS r, MAX(ts) OVER (PARTITION BY g ORDER BY ts "
              "RANGE BETWEEN INTERVAL 1 MONTH PRECEDING AND CURRENT ROW) AS latest FROM a WHERE n IS NOT NULL",
    "top": "SELECT * FROM (SELECT id, g, n, ROW_NUMBER() OVER (PARTITION BY g ORDER BY ts, id) AS rn, "
           "bool_or(n > 5) OVER (PARTITION BY g) AS any_big FROM a) WHERE rn <= 2",
}
WINDOWS_BY_SPARK_TICKS = [
    [((1, 1, 10, day(2026, 1, 31)), 1), ((2, 1, 20, day(2026, 2, 28)), 1), ((3, 2, None, day(2026, 3, 1)), 1),
     ((4, None, 7, day(2026, 1, 1)), 1), ((5, 1, 20, day(2026, 2, 28)), 2)],
    [((6, 2, 5, day(2026, 4, 1)), 1), ((1, 1, 10, day(2026, 1, 31)), -1), ((7, 1, -3, day(2025, 12, 31)), 1)],
    [((5, 1, 20, day(2026, 2, 28)), -1), ((3, 2, None, day(2026, 3, 1)), -1), ((8, None, None, None), 1)],
]


def test_windows_arrow_has_no_form_of_are_spark_s_between_stages_in_tasks(spark, tmp_path):
    """A window with no Arrow kernel runs in Spark between two stages of a tick in tasks
    (:func:`.tasks._window_through_spark`): the touched partitions' rows gathered in one
    stage (with the retraction of what the window emitted for them), Spark's window over
    them, the next stage consolidating its rows. Every tick in tasks, each view Spark's
    batch answer, the tick's rows held in the driver and handed over as a DataFrame."""
    in_tasks_both_ways(spark, tmp_path, "id INT, g INT, n INT, ts DATE", WINDOWS_BY_SPARK, WINDOWS_BY_SPARK_TICKS,
                       "the window by Spark")


def test_a_ratio_of_decimal_sums_rounds_as_spark(spark, tmp_path):
    """SUM of a DECIMAL(p, s) is DECIMAL(p + 10, s), as in Spark, before what is computed
    from it: SUM(DECIMAL(10,2)) / SUM(DECIMAL(12,4)) is DECIMAL(38,16) with 16 exact
    decimals (a sum kept as DECIMAL(38, s) made the ratio's type DECIMAL(38,6), then
    widened: 0.5679910000000000 for Spark's 0.5679909911689749)."""
    twin = Twin(spark, str(tmp_path), {"a": "id INT, g INT, m DECIMAL(10,2), n DECIMAL(12,4)"},
                {"ratio": BY_SPARK["ratio"]})
    try:
        for tick in BY_SPARK_TICKS:
            twin.step({"a": tick})
        assert twin.arranged == len(BY_SPARK_TICKS), twin.paths
    finally:
        twin.close()


#: aggregates over adversarial groups: floating-point keys (NaN, -0.0 beside 0.0, NULL),
#: DISTINCT beside MIN/MAX, moments, wide decimals, sums of doubles with NaN and infinities
GROUPS_BY_SPARK = {
    "linear": "SELECT g, COUNT(*) AS n, COUNT(d) AS nd, SUM(b) AS sb, AVG(b) AS ab, SUM(x) AS sx, AVG(x) AS ax, "
              "SUM(d) AS sd, AVG(d) AS ad FROM a GROUP BY g",
    "float_keys": "SELECT d, COUNT(*) AS n, SUM(x) AS sx, MAX(b) AS mb FROM a GROUP BY d",
    "two_keys": "SELECT g, d, AVG(b) AS ab, COUNT(DISTINCT x) AS dx FROM a GROUP BY g, d",
    "distinct": "SELECT g, COUNT(DISTINCT d) AS dd, SUM(DISTINCT b) AS sdb, AVG(DISTINCT x) AS adx, MIN(x) AS mx "
                "FROM a GROUP BY g",
    "moments": "SELECT g, stddev(d) AS sdv, var_pop(b) AS vp, MAX(d) AS md FROM a GROUP BY g",
    "having": "SELECT g, SUM(b) AS s FROM a GROUP BY g HAVING COUNT(*) > 1",
    "global": "SELECT COUNT(*) AS n, SUM(b) AS sb, AVG(x) AS ax, SUM(d) AS sd, COUNT(d) AS nd FROM a",
    # a keyless aggregate's one row, of COUNT 0 once its only row is deleted
    "global_one": "SELECT COUNT(*) AS n, SUM(x) AS sx FROM a WHERE id = 5",
}
_NAN, _INF = float("nan"), float("inf")
GROUPS_BY_SPARK_TICKS = [
    [((1, 1, 0.0, 5, Decimal("1234567890.123456789012345678")), 1), ((2, 1, -0.0, -7, Decimal("-0.5")), 2),
     ((3, 2, _NAN, None, None), 1), ((4, 2, _NAN, 3, Decimal("1")), 1), ((5, None, None, 9, Decimal("2.25")), 1),
     ((6, 3, _INF, (1 << 62), Decimal("99999999999999.999999999999999999")), 1)],
    [((2, 1, -0.0, -7, Decimal("-0.5")), -1), ((7, 1, 1.5, 5, Decimal("1234567890.123456789012345678")), 3),
     ((3, 2, _NAN, None, None), -1), ((8, 3, -_INF, -(1 << 62), Decimal("-1")), 1), ((9, None, 0.0, None, None), 1)],
    [((6, 3, _INF, (1 << 62), Decimal("99999999999999.999999999999999999")), -1), ((1, 1, 0.0, 5,
      Decimal("1234567890.123456789012345678")), -1), ((10, 2, -0.0, 1, Decimal("0.000000000000000001")), 2)],
    [((5, None, None, 9, Decimal("2.25")), -1), ((11, 3, 2.5, 4, Decimal("-7.5")), 1)],
]


def test_aggregates_spark_computes_between_stages_equal_spark(spark, tmp_path, monkeypatch):
    """Every aggregate with keys or linear, and every tick's partial sums, computed by
    Spark between two stages in tasks, as Arrow declining them would have them (the layout
    is told so: :func:`.tasks.layout`'s ``by_spark``): a linear aggregate summing and
    finishing its touched groups' partial sums (a keyless one keeping its row of COUNT 0),
    another aggregating its touched groups' rows as window functions, partial sums of the
    tick's rows as windows: every tick in tasks, each view
    Spark's batch answer, the rows held in the driver and handed over as a DataFrame
    (ANSI on: no value here overflows; the overflows' NULL with ANSI off is
    :func:`test_a_tick_s_decimal_sums_past_38_digits_are_kept_exact`'s)."""
    from dbt_incremental_stream.circuit.operators import GroupDiff, Partials, walk
    from dbt_incremental_stream.runtime.spark import tasks

    layout, forced = tasks.layout, set()

    def through_spark(plan, states, by_spark=frozenset()):
        nodes = {op.id for op in walk(*states)
                 if isinstance(op, Partials) or isinstance(op, GroupDiff) and (op.keys or op.linear)}
        forced.update(nodes)
        return layout(plan, states, set(by_spark) | nodes)

    monkeypatch.setattr(tasks, "layout", through_spark)
    with spark_conf(spark, {"spark.sql.ansi.enabled": "true"}):
        in_tasks_both_ways(spark, tmp_path, "id INT, g INT, d DOUBLE, b BIGINT, x DECIMAL(38,18)", GROUPS_BY_SPARK,
                           GROUPS_BY_SPARK_TICKS, None)
    assert forced
