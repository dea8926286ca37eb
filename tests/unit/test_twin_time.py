"""The twin harness on time, and the harness's own checks: views over dates and
timestamps equal Spark's batch answer on both placements, with a session time zone and a
process local time that are New York's (DST days, year 1, year 9999), ANSI on and off.
"""
from __future__ import annotations

import math
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import StructType

from dbt_incremental_stream.differential import (Mismatch, SparkOracle, Twin, arrow_delta, compare_exact, float_equal,
                                                 scan_order_zeros)
from tests.twin import ANSI, SETTINGS, TIME_ZONE, run, spark_conf

TIME_SOURCES = {"e": "id INT, ts TIMESTAMP, dt DATE, v INT", "g": "id INT, ts TIMESTAMP, dt DATE"}
#: view shapes over TIME_SOURCES, by group
TIME_SHAPES: dict[str, dict[str, str]] = {
    "calendar": {
        "ts_plus_month": "SELECT id, ts + INTERVAL 1 MONTH AS next_month, dt + INTERVAL 1 MONTH AS next_month_day "
                         "FROM e",
        "date_trunc_group": "SELECT date_trunc('DAY', ts) AS day, COUNT(*) AS n, MIN(ts) AS first FROM e "
                            "GROUP BY date_trunc('DAY', ts)",
        "cast_date_group": "SELECT CAST(ts AS DATE) AS day, COUNT(*) AS n, MAX(v) AS top FROM e "
                           "GROUP BY CAST(ts AS DATE)",
        "global_time_extremes": "SELECT MIN(ts) AS first, MAX(ts) AS last, MAX(dt) AS last_day FROM e",
        # RANGE frames of intervals: the rows within an hour, half an hour either side, a week
        "moving_hour": "SELECT id, ts, COUNT(*) OVER (PARTITION BY dt ORDER BY ts RANGE BETWEEN INTERVAL 1 HOUR "
                       "PRECEDING AND CURRENT ROW) AS n, SUM(v) OVER (PARTITION BY dt ORDER BY ts RANGE BETWEEN "
                       "INTERVAL '30' MINUTE PRECEDING AND INTERVAL '30' MINUTE FOLLOWING) AS sv FROM e "
                       "WHERE ts BETWEEN TIMESTAMP'1900-01-01 00:00:00' AND TIMESTAMP'2100-01-01 00:00:00'",
        "moving_week": "SELECT id, dt, SUM(v) OVER (PARTITION BY id % 3 ORDER BY dt RANGE BETWEEN INTERVAL 7 DAYS "
                       "PRECEDING AND CURRENT ROW) AS week FROM e "
                       "WHERE dt BETWEEN DATE'1900-01-01' AND DATE'2100-01-01'",
    },
    "date_join": {  # alone: were its join declined, every tick of the twin's circuit would run in Spark
        "join_date_ts": "SELECT e.id, g.id AS gid, e.dt, g.ts FROM e JOIN g ON e.dt = g.ts",
    },
}


@ANSI
@pytest.mark.parametrize("group", list(TIME_SHAPES))
@given(data=st.data())
@SETTINGS
def test_time_shapes_equal_spark_in_new_york(spark, tmp_path_factory, local_new_york, group, ansi, data):
    run(data, spark, tmp_path_factory, TIME_SOURCES, TIME_SHAPES[group],
        {"spark.sql.ansi.enabled": str(ansi).lower(), "spark.sql.session.timeZone": TIME_ZONE})


# --- findings, as fixed ticks --------------------------------------------------------------


#: three ticks of TIME_SOURCES at the instants where New York's calendar is not UTC's: its
#: midnights on the days clocks change, the first instant Spark's calendar has (a date of
#: year 0 in New York) and the last
NEW_YORK_TICKS: list[dict[str, list[tuple[tuple, int]]]] = [
    {"e": [((1, datetime(2026, 3, 8, 5, tzinfo=timezone.utc), date(2026, 3, 8), 1), 1),
           ((2, datetime(1, 1, 1, tzinfo=timezone.utc), date(1, 1, 1), 2), 1)],
     "g": [((1, datetime(2026, 3, 8, 5, tzinfo=timezone.utc), date(2026, 3, 8)), 1),
           ((2, datetime(2026, 3, 8, tzinfo=timezone.utc), None), 1)]},
    {"e": [((3, datetime(2026, 3, 8, 7, tzinfo=timezone.utc), date(2026, 3, 8), 3), 1),
           ((4, datetime(1, 1, 1, tzinfo=timezone.utc), date(2026, 11, 1), 4), 1),
           ((5, datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc), date(9999, 12, 31), 5), 1)],
     "g": [((3, datetime(2026, 11, 1, 4, tzinfo=timezone.utc), None), 1),
           ((4, datetime(2026, 3, 8, 5, tzinfo=timezone.utc), None), 1)]},
    {"e": [((6, datetime(2026, 11, 1, 5, 30, tzinfo=timezone.utc), date(2026, 11, 1), 6), 1),
           ((1, datetime(2026, 3, 8, 5, tzinfo=timezone.utc), date(2026, 3, 8), 1), -1)],
     "g": [((5, datetime(2026, 11, 1, 6, 30, tzinfo=timezone.utc), date(2026, 3, 8)), 1),
           ((6, datetime(1, 1, 1, 5, tzinfo=timezone.utc), None), 1)]},
]


#: the time shapes NEW_YORK_TICKS run in one twin
NEW_YORK_SHAPES = ("date_trunc_group", "cast_date_group", "join_date_ts")


def test_time_shapes_run_on_arrangements_in_new_york(spark, tmp_path, local_new_york):
    """NEW_YORK_TICKS in New York's time zone (ANSI off): every view equals Spark's batch
    answer, and "auto" runs every tick on arrangements."""
    views = {name: sql for shapes in TIME_SHAPES.values() for name, sql in shapes.items() if name in NEW_YORK_SHAPES}
    with spark_conf(spark, {"spark.sql.ansi.enabled": "false", "spark.sql.session.timeZone": TIME_ZONE}):
        twin = Twin(spark, str(tmp_path), TIME_SOURCES, views)
        try:
            for tick in NEW_YORK_TICKS:
                twin.step(tick)
            assert twin.arranged == len(NEW_YORK_TICKS), f"auto's paths: {twin.paths}"
        finally:
            twin.close()


#: views of a calendar day, read with the time (``current_date()`` is the session zone's day)
DAY_VIEWS = {
    "today": "SELECT id, v FROM e WHERE CAST(ts AS DATE) = current_date()",
    "last_week": "SELECT v, COUNT(*) AS n, MAX(ts) AS last FROM e WHERE CAST(ts AS DATE) >= current_date() - 7 "
                 "GROUP BY v",
    "before_today": "SELECT COUNT(*) AS n FROM e WHERE to_date(ts) < current_date()",
    "yesterday": "SELECT id FROM e WHERE CAST(ts AS DATE) = date_sub(current_date(), 1)",
    "up_to_today": "SELECT id, ts FROM e WHERE CAST(ts AS DATE) <= current_date() AND v > 1",
    "days_ahead": "SELECT id FROM e WHERE dt > current_date()",
}
_HOUR = timedelta(hours=1)
#: the times DAY_VIEWS are read at: New York's and UTC's midnights and New York's days
#: of 23 and 25 hours (2026-03-08, 2026-11-01)
DAY_TIMES = [datetime(2026, 3, 7, 12, tzinfo=timezone.utc), datetime(2026, 3, 8, 4, 59, tzinfo=timezone.utc),
             datetime(2026, 3, 8, 5, tzinfo=timezone.utc), datetime(2026, 3, 9, 3, 59, tzinfo=timezone.utc),
             datetime(2026, 3, 9, 4, tzinfo=timezone.utc), datetime(2026, 3, 16, tzinfo=timezone.utc),
             datetime(2026, 11, 1, 3, 59, tzinfo=timezone.utc), datetime(2026, 11, 2, 4, 59, tzinfo=timezone.utc),
             datetime(2026, 11, 2, 5, tzinfo=timezone.utc)]


@pytest.mark.parametrize("placement", ["auto", "tasks"])
def test_day_views_equal_spark_in_new_york(spark, tmp_path, local_new_york, placement):
    """Views of today, yesterday and the last week read by a row's time cast to a date
    equal Spark's batch answer at each of :data:`DAY_TIMES` in New York's time zone, rows
    of every hour around them inserted and deleted; every tick runs on arrangements, in
    the driver or in Spark tasks (a temporal filter read by the instants the days start)."""
    start = datetime(2026, 3, 1, tzinfo=timezone.utc)
    hours = [start + k * _HOUR for k in range(24 * 17)] + [start + k * _HOUR for k in range(5800, 5900)]
    rows = [((k, t, t.date(), k % 4), 1) for k, t in enumerate(hours)] + [((-1, None, None, 2), 1)]
    with spark_conf(spark, {"spark.sql.ansi.enabled": "false", "spark.sql.session.timeZone": TIME_ZONE}):
        twin = Twin(spark, str(tmp_path), {"e": TIME_SOURCES["e"]}, DAY_VIEWS, placements=(placement,))
        try:
            times = DAY_TIMES if placement == "auto" else DAY_TIMES[::3]  # a tick in tasks costs jobs
            twin.step({"e": rows}, now=times[0])
            for i, now in enumerate(times[1:]):
                twin.step({"e": [rows[i * 7], ((-2 - i, now, now.date(), i % 4), 1)]}, now=now)
            assert twin.arranged == len(times), f"{placement}'s paths: {twin.paths}"
        finally:
            twin.close()


# --- the harness itself ------------------------------------------------------------------


def _table(columns: dict[str, list], types: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({n: pa.array(v, types[n]) for n, v in columns.items()})


def test_compare_exact_floats_by_one_rule():
    assert float_equal(math.nan, -math.nan) and float_equal(math.inf, math.inf) and float_equal(0.0, 0.0)
    assert not float_equal(0.0, -0.0) and not float_equal(math.inf, -math.inf) and not float_equal(math.nan, 1.0)
    assert float_equal(0.1 + 0.2, 0.3) and float_equal(1e-13, 0.0) and float_equal(-0.0, 1e-13)
    assert not float_equal(1.0, 1.0 + 1e-8) and not float_equal(1e300, math.inf)
    t = {"d": pa.float64()}
    assert compare_exact(_table({"d": [0.1 + 0.2, math.nan, None]}, t), _table({"d": [None, 0.3, math.nan]}, t)) is None
    found = compare_exact(_table({"d": [-0.0, 1.0]}, t), _table({"d": [0.0, 1.0]}, t))
    assert found and "only engine (1): [(-0.0,)]" in found and "only batch (1): [(0.0,)]" in found


def test_compare_exact_pairs_many_rows_differing_in_their_last_bits():
    """A view whose every float differs from Spark's in its last bits (a sum
    over a partition in another order) equals it: rows are paired within the rows alike
    in all but their floats, not across all of them (which was cut off past 250,000 pairs
    and then failed)."""
    t = {"id": pa.int64(), "share": pa.float64()}
    n = 5_000
    ids = list(range(n))
    got = _table({"id": ids, "share": [(i + 0.1) / 3 for i in ids]}, t)
    want = _table({"id": ids[::-1], "share": [math.nextafter((i + 0.1) / 3, math.inf) for i in ids[::-1]]}, t)
    assert compare_exact(got, want) is None
    found = compare_exact(got, _table({"id": ids, "share": [(i + 0.1) / 3 * (1 + 1e-6) for i in ids]}, t))
    assert found and f"only engine ({n})" in found


def test_compare_exact_counts_multiplicities_and_types():
    t = {"k": pa.string(), "n": pa.int64()}
    assert compare_exact(_table({"k": ["a", "a", "b"], "n": [1, 1, 2]}, t),
                         _table({"k": ["b", "a", "a"], "n": [2, 1, 1]}, t)) is None
    found = compare_exact(_table({"k": ["a", "b"], "n": [1, 2]}, t), _table({"k": ["a", "a", "b"], "n": [1, 1, 2]}, t))
    assert found and "2 rows vs 3" in found and "only batch (1): [('a', 1)]" in found
    assert compare_exact(_table({"k": ["é"], "n": [1]}, t), _table({"k": ["e\u0301"], "n": [1]}, t))
    dec = compare_exact(_table({"x": [Decimal("1.50")]}, {"x": pa.decimal128(38, 2)}),
                        _table({"x": [Decimal("1.500000")]}, {"x": pa.decimal128(38, 6)}))
    assert dec and "types differ (x: decimal128(38, 2) vs decimal128(38, 6))" in dec and "rows" not in dec
    assert compare_exact(_table({"x": [Decimal("1.01")]}, {"x": pa.decimal128(38, 2)}),
                         _table({"x": [Decimal("1.00")]}, {"x": pa.decimal128(38, 2)}))


def test_compare_exact_timestamps_as_microseconds():
    utc = pa.timestamp("us", tz="UTC")
    t0 = datetime(1, 1, 1, tzinfo=timezone.utc)
    assert compare_exact(pa.table({"ts": pa.array([t0], utc)}), pa.table({"ts": pa.array([t0], utc)})) is None
    found = compare_exact(pa.table({"ts": pa.array([0], pa.int64()).cast(utc), "d": pa.array([date(9999, 12, 31)])}),
                          pa.table({"ts": pa.array([1], pa.int64()).cast(utc), "d": pa.array([date(9999, 12, 31)])}))
    assert found and "1970-01-01T00:00:00Z" in found and "1970-01-01T00:00:00.000001Z" in found


def test_twin_finds_a_wrong_view_and_a_crash_on_each_placement(spark, tmp_path, monkeypatch):
    """The harness is not blind: a placement that loses a row, or whose step raises, is
    reported with the placement, the view and the rows; the other placement is not. On
    narrow values DuckDB agrees too."""
    twin = Twin(spark, str(tmp_path), {"t": "id INT, d DOUBLE"},
                {"n": "SELECT d, COUNT(*) AS n, SUM(id) AS s FROM t GROUP BY d", "all": "SELECT id, d FROM t"},
                duckdb=True)
    try:
        twin.step({"t": [((1, 0.5), 1), ((2, 1.5), 1), ((3, None), 1), ((3, None), 1)]})
        assert twin.checks == 2 * 3 and twin.rows("t").count((3, None)) == 2
        snapshot = twin.dataframe.snapshot
        monkeypatch.setattr(twin.dataframe, "snapshot",
                            lambda name, **kw: snapshot(name, **kw).where("id <> 2") if name == "all"
                            else snapshot(name, **kw))
        with pytest.raises(Mismatch) as caught:
            twin.step({"t": [((4, 1.5), 1), ((3, None), -1)]})
        (found,) = caught.value.findings
        assert (found.view, found.placement, found.kind) == ("all", "dataframe", "mismatch"), found
        assert "only batch (1): [(2, 1.5)]" in found.description
        assert twin.auto.last_tick.path == "arranged" and twin.arranged == 2
        monkeypatch.setattr(twin.auto, "step", lambda *a, **k: 1 / 0)
        with pytest.raises(Mismatch, match="auto step: crash: crash out of step: ZeroDivisionError"):
            twin.step({"t": [((5, 2.0), 1)]})
        assert set(twin.broken) == {"auto"} and len(twin.history) == 3
    finally:
        twin.close()


def test_oracle_keeps_every_adversarial_value_exactly(spark, local_new_york):
    """Every adversarial value goes into the oracle's Spark and comes back bit for bit
    (NaN, -0.0, 0001-01-01 and 9999-12-31 instants, combining characters), with a session
    time zone and a process local time that are New York's; rows told apart exactly are
    kept apart, and a row inserted twice and deleted once stays once."""
    from tests.adversarial import DATES, DECIMALS, DOUBLES, FLOATS, INTEGERS, STRINGS, TIMESTAMPS

    columns = {"d": DOUBLES, "f": FLOATS, "b": INTEGERS[64], "t": INTEGERS[8], "x": DECIMALS[(38, 18)],
               "z": DECIMALS[(38, 0)], "m": DECIMALS[(10, 2)], "s": STRINGS, "dt": DATES, "ts": TIMESTAMPS}
    ddl = ("d DOUBLE, f FLOAT, b BIGINT, t TINYINT, x DECIMAL(38,18), z DECIMAL(38,0), m DECIMAL(10,2), s STRING, "
           "dt DATE, ts TIMESTAMP")
    n = max(map(len, columns.values()))
    rows = [tuple(values[i % len(values)] for values in columns.values()) for i in range(n)] + [(None,) * 10]
    with spark_conf(spark, {"spark.sql.session.timeZone": TIME_ZONE}):
        oracle = SparkOracle(spark)
        schema = StructType.fromDDL(ddl)
        oracle.add_source("t", schema)
        oracle.integrate("t", arrow_delta(schema, [(r, 1) for r in rows] + [(rows[0], 1)]))
        oracle.integrate("t", arrow_delta(schema, [(rows[0], -1)]))
        want = arrow_delta(schema, [(r, 1) for r in rows]).drop_columns(["_w"])
        got = oracle.query("SELECT * FROM t")
        assert compare_exact(got, want) is None
        # Spark's own equality in batch: -0.0 = 0.0 and NaN = NaN (of either sign)
        assert oracle.query("SELECT count(DISTINCT d) AS n FROM t").column("n").to_pylist() == [11]


def test_an_overflow_of_spark_row_order_is_not_a_finding(spark, tmp_path):
    """Spark's ANSI BIGINT sum of 1, MAX, 1, -1, -1 in that order overflows on the way
    (in one partition or two); the engine's exact sum is MAX, which is Spark's wrapped
    (ANSI off) total: not a finding. A total out of range is an error on every side."""
    top = (1 << 63) - 1
    with spark_conf(spark, {"spark.sql.ansi.enabled": "true"}):
        twin = Twin(spark, str(tmp_path), {"t": "id INT, b BIGINT"}, {"s": "SELECT SUM(b) AS s FROM t"})
        try:
            twin.step({"t": [((1, 1), 1), ((2, top), 1), ((3, 1), 1), ((4, -1), 1), ((5, -1), 1)]})
            assert twin.oracle.answers(["s"])["s"].startswith("ARITHMETIC_OVERFLOW")
            assert not twin.auto.failed and twin.auto.snapshot("s").collect()[0].s == top
            twin.step({"t": [((4, -1), -1), ((5, -1), -1)]})
            assert "s" in twin.auto.failed and "s" in twin.dataframe.failed
        finally:
            twin.close()


def test_the_zero_of_a_spark_scan_order_is_not_a_finding(spark, tmp_path):
    """Over a group holding -0.0 and 0.0, Spark's MIN/MAX give the zero its scan met first;
    a stream has no scan order, so either zero is Spark's answer in a column that is the
    MIN/MAX itself, and only there. These ticks (found by the twin) leave Spark's scan
    meeting -0.0 first and the engine answering 0.0: not a finding."""
    sql = "SELECT d, MIN(d) AS mn, MAX(d) AS mx, COUNT(*) AS n FROM t GROUP BY d"
    assert scan_order_zeros(sql) == {1, 2}
    assert scan_order_zeros("SELECT MIN(d) OVER (PARTITION BY g) AS m, -MIN(d) AS n FROM t") == {0}
    assert scan_order_zeros("SELECT * FROM (SELECT MIN(d) AS m FROM t)") == frozenset()
    twin = Twin(spark, str(tmp_path), {"t": "id INT, d DOUBLE"}, {"v": sql}, placements=("auto",))
    try:
        twin.step({"t": [((5, 1.0), 1), ((4, 0.0), 1), ((5, 1.0), 1), ((1, 1.0), 1)]})
        twin.step({"t": [((4, -0.0), 1)]})
        twin.step({"t": [((5, 1.0), -1), ((4, 0.0), -1), ((2, 0.0), 1), ((2, -0.0), 1)]})
        want, got = twin.oracle.answers(["v"])["v"], twin.auto.snapshot("v").toArrow()
        assert compare_exact(got, want) is not None  # the zeros' signs differ: the case in point
        assert compare_exact(got, want, either_zero=scan_order_zeros(sql)) is None
    finally:
        twin.close()
    zero, negative = pa.table({"m": [0.0], "s": [0.0]}), pa.table({"m": [-0.0], "s": [-0.0]})
    assert compare_exact(zero, negative, either_zero={0}) is not None  # s is not a MIN/MAX
    assert compare_exact(zero.select(["m"]), negative.select(["m"]), either_zero={0}) is None
