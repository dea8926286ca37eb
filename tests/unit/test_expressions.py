"""Expressions Arrow evaluates give exactly what Spark gives: the rows a predicate keeps
(NULLs, NOT, LIKE, IN) and the values and types of computed columns (exact decimals)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from functools import partial

import pyarrow as pa
import pytest

from dbt_incremental_stream.runtime.arrow import expressions
from dbt_incremental_stream.runtime.spark import zsets

SCHEMA = ("i INT, b BIGINT, d DECIMAL(15,2), s STRING, day DATE, f BOOLEAN, x DOUBLE, big DECIMAL(38,10), "
          "ts TIMESTAMP")
ROWS = [
    (1, 10, Decimal("0.05"), "abc%BRASS", dt.date(1995, 1, 1), True, 1.0, Decimal("123.5"),
     dt.datetime(2026, 3, 29, 23, 59, 59, 999999)),
    (None, 11, Decimal("0.07"), "small_tin", dt.date(1994, 12, 31), False, float("nan"), None,
     dt.datetime(1969, 12, 31, 23, 30, 0, 1)),
    (3, None, None, None, None, None, None, Decimal("1.0000000001"), None),
    (24, 7, Decimal("-1.00"), "", dt.date(1996, 3, 1), True, 0.0, Decimal("-3"), dt.datetime(2024, 2, 29, 0, 0)),
    (-5, 2**40, Decimal("0.06"), "ÄBRASS", dt.date(1995, 1, 2), None, -0.0, Decimal("0"),
     dt.datetime(1900, 1, 1, 12, 0, 0, 500000)),
]
PREDICATES = [
    "`i` < 24", "`i` <> 3", "`b` >= 11 OR `i` IS NULL", "NOT (`i` = 1 AND `f`)", "`i` = `b`",
    "`d` BETWEEN 0.05 AND 0.07", "`d` NOT BETWEEN 0.05 AND 0.07", "`d` > 0.00", "`d` = 0.050", "`d` < `i`",
    "`s` LIKE '%BRASS'", "`s` NOT LIKE '%BRASS'", "`s` LIKE 'small\\\\_%'", "`s` LIKE '_BRASS'", "`s` < 'b'",
    "`i` IN (1, 3, 7)", "`i` NOT IN (1, 3, 7)", "`s` IN ('', 'small_tin')",
    "`day` < CAST('1995-01-02' AS DATE)", "`day` BETWEEN CAST('1995-01-01' AS DATE) AND CAST('1995-12-31' AS DATE)",
    "`f`", "NOT `f`", "`f` = TRUE", "`s` IS NOT NULL AND `day` IS NULL", "TRUE",
    "0.908 * `b` > 10", "`d` * (1 - `d`) < 0.05", "`i` + 1 = 2", "SUBSTRING(`s`, 1, 2) IN ('ab', 'Äb', 'sm')",
    "`i` % 2 = 1", "upper(SUBSTRING(`s`, 2, 3)) = 'BC%'", "HOUR(`ts`) BETWEEN 8 AND 18",
    "`ts` > DATE_TRUNC('DAY', `ts`) - INTERVAL '1' HOUR", "`ts` + INTERVAL 2 DAYS <= DATE_TRUNC('MONTH', `ts`)",
    "`ts` BETWEEN TIMESTAMP_SECONDS(0) AND TIMESTAMP_SECONDS(0) + INTERVAL '30' MINUTE",
    # doubles as Spark orders them: NaN = NaN, NaN above every number, -0.0 = 0.0
    "`x` > 0", "`x` = `x`", "`x` <> 0", "`x` < 1", "`x` >= 0", "`x` <= `x`", "`x` > `i`", "`i` >= `x`",
    "`x` BETWEEN -1 AND 1", "`x` NOT BETWEEN 0 AND 1", "`x` > 1 OR `x` IS NULL", "COALESCE(`x`, 0) > 1",
    "-`x` < 0",
]
VALUES = [
    "`d` * (1 - `d`)", "`d` * (1 - `d`) * (1 + `d`)", "`d` * `i`", "0.908 * `b`", "`i` + 1", "-`i`", "`b` - `i` * 2",
    "CASE WHEN `s` LIKE 'small%' THEN `d` * 2 ELSE 0 END", "CASE WHEN `i` < 10 THEN 1 END",
    "CASE WHEN `i` IS NULL THEN NULL ELSE `d` END", "EXTRACT(YEAR FROM `day`)", "EXTRACT(MONTH FROM `day`)", "TRUE",
    "0.2 * `d`", "`d` * 0.0001000000", "`i` IN (1, 3)", "`big` * `big`", "`big` * 0.5 + `d`",
    "SUBSTRING(`s`, 1, 2)", "SUBSTRING(`s`, 2, 3)", "SUBSTRING(`s`, 1, 0)",
    "COALESCE(`i`, 0)", "COALESCE(`d`, `i`)", "COALESCE(`b`, `i`, 7)", "COALESCE(`s`, 'none')", "COALESCE(`i`, NULL)",
    "CAST(`i` AS BIGINT)", "CAST(`b` AS INT)", "CAST(`d` AS DECIMAL(20,4))", "CAST(`d` AS DECIMAL(3,2))",
    "CAST(`s` AS STRING)", "CAST(`ts` AS TIMESTAMP)", "CAST(`d` AS INT)", "CAST(`i` AS DECIMAL(2,0))",
    "DATE_TRUNC('DAY', `ts`)", "DATE_TRUNC('MONTH', `ts`)", "DATE_TRUNC('WEEK', `ts`)", "DATE_TRUNC('HOUR', `ts`)",
    "DATE_TRUNC('YEAR', `ts`)", "DATE_TRUNC('QUARTER', `ts`)", "DATE_TRUNC('SECOND', `ts`)",
    "`i` % 7", "`b` % -3", "`i` % `b`", "`b` / 4", "FLOOR(`b` / 4)", "FLOOR(`i`)", "`i` / 0", "`b` % 0",
    "HOUR(`ts`)", "MINUTE(`ts`)", "SECOND(`ts`)", "EXTRACT(HOUR FROM `ts`)", "LENGTH(`s`)", "REPLACE(`s`, 'A', '')",
    "REPLACE(`s`, 'BRASS', 'x')", "LOWER(SUBSTRING(`s`, 2, 3))", "UPPER(SUBSTRING(`s`, 2, 3))", "LOWER(`s`)",
    "UNIX_SECONDS(`ts`)", "TIMESTAMP_SECONDS(FLOOR(UNIX_SECONDS(`ts`) / 10) * 10)", "DATE_FORMAT(`ts`, 'yyyy-MM-dd')",
    "DATE_FORMAT(`ts`, 'HH:mm')", "DATE_FORMAT(`ts`, 'yyyy-MM-dd HH:mm:ss')",
    "REGEXP_EXTRACT(`s`, '(B|s)([A-Z]*)', 2)", "REGEXP_EXTRACT(`s`, '^(a)', 1)",
    "REGEXP_EXTRACT(`s`, '([^_]*)_(t)?', 2)",
    "TRY_ELEMENT_AT(SPLIT(`s`, '_'), 2)", "TRY_ELEMENT_AT(SPLIT(`s`, 'B'), 1)", "TRY_ELEMENT_AT(SPLIT(`s`, '%'), 3)",
    "`ts` - INTERVAL '1' HOUR", "`ts` + INTERVAL 2 DAYS", "`ts` - INTERVAL '-90' MINUTE", "`ts` + INTERVAL 59 SECOND",
    "REGEXP_EXTRACT(`s`, '(x)|(s)', 1)", "REGEXP_EXTRACT(`s`, '(&|^)small_([^&]*)', 2)",
    "REGEXP_EXTRACT(`s`, '([a-z]+)')",
    # days and times: a DATE's start, a TIMESTAMP's day (in the session's zone), days added
    "CAST(`ts` AS DATE)", "CAST(`day` AS TIMESTAMP)", "CAST(`day` AS TIMESTAMP_NTZ)", "`day` + 3", "`day` - `i`",
    "DATE_SUB(`day`, 2)", "DATE_ADD(`day`, `i`)", "CAST(CAST(`ts` AS DATE) + 1 AS TIMESTAMP)", "TO_DATE(`ts`)",
    # integers as floats where they are exact (Arrow raises where Spark rounds); a float negated
    "CAST(`i` AS DOUBLE)", "CAST(`b` AS DOUBLE)", "CAST(`i` AS FLOAT)", "CAST(`b` * 10001 + 1 AS DOUBLE)", "-`x`",
]
#: values Spark rounds, truncates or overflows: Arrow declines these at run time
DECLINED_AT_RUN_TIME = {"CAST(`b` * 10001 + 1 AS DOUBLE)",
                        "CAST(`b` AS INT)", "CAST(`d` AS INT)", "CAST(`i` AS DECIMAL(2,0))", "`i` / 0", "`b` % 0",
                        "LOWER(`s`)"}
SPARK_ONLY = ["TRY_ELEMENT_AT(SPLIT(`s`, '.'), 1) = 'a'", "ELEMENT_AT(SPLIT(`s`, '_'), 1) = 'a'",
              "REGEXP_EXTRACT(`s`, 'a.c', 0) = 'abc'", "REGEXP_EXTRACT(`s`, '(?i)(a)', 1) = 'a'",
              "REGEXP_EXTRACT(`s`, '(a)$', 1) = 'a'", "REGEXP_EXTRACT(`s`, '(\\\\d)', 1) = '1'",
              "REGEXP_EXTRACT(`s`, '(a)', 2) = 'a'", "`d` / 2 > 0", "`x` / 2 > 0", "DATE_FORMAT(`ts`, 'EEE') = 'Mon'",
              "REPLACE(`s`, '', 'x') = 'x'",
              "CAST(`i` AS STRING) = '1'", "CAST(`x` AS INT) = 1", "DATE_TRUNC('DAY', `day`) IS NULL",
              "SUBSTRING(`s`, 0, 2) = 'ab'", "SUBSTRING(`s`, `i`, 2) = 'ab'", "`b` > 1e3",
              "`i` > 1.5 + `x`", "`d` / 7.0",
              "`ts` - INTERVAL '1' MONTH > `ts`", "`ts` + INTERVAL '1.5' SECOND > `ts`"]


@pytest.fixture(scope="module")
def frame(spark):
    df = spark.createDataFrame(ROWS, SCHEMA)
    return df, zsets.collect_arrow(df)


def types(spark, df):
    return lambda exprs: list(zsets.arrow_schema(df.selectExpr(*exprs).schema).types)


@pytest.mark.parametrize("predicate", PREDICATES)
def test_arrow_keeps_the_rows_spark_keeps(spark, frame, predicate):
    df, table = frame
    compiled = expressions.predicate(predicate, table.schema, types(spark, df))
    assert compiled is not None, predicate
    kept = table.filter(expressions.as_column(compiled(table), table.num_rows))
    assert sorted(map(repr, spark.createDataFrame(kept, df.schema).collect())) == \
        sorted(map(repr, df.where(predicate).collect()))


@pytest.mark.parametrize("sql", VALUES)
def test_arrow_computes_what_spark_computes(spark, frame, sql):
    """Equal values of the same type, or (where Spark rounds or overflows) Arrow declines at run time."""
    df, table = frame
    compiled = expressions.value(sql, table.schema, types(spark, df))
    assert compiled is not None, sql
    if sql in DECLINED_AT_RUN_TIME:
        with pytest.raises((pa.ArrowInvalid, pa.ArrowNotImplementedError)):
            compiled(table)
        return
    want = zsets.collect_arrow(df.selectExpr(f"{sql} AS v"))
    try:
        got = expressions.as_column(compiled(table), table.num_rows)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        assert sql.startswith("`big`"), sql  # Spark's precision loss: only these may decline
        return
    assert got.type == want.schema.field("v").type
    assert list(map(repr, got.to_pylist())) == list(map(repr, want.column("v").to_pylist()))  # NaN, -0.0


@pytest.mark.parametrize("sql", SPARK_ONLY)
def test_what_arrow_could_decide_differently_stays_with_spark(spark, frame, sql):
    df, table = frame
    assert expressions.predicate(sql, table.schema, types(spark, df)) is None
    assert expressions.value(sql, table.schema, types(spark, df)) is None


def test_date_trunc_is_spark_s_only_in_utc(spark, frame):
    """Spark truncates a timestamp in the session's time zone; Arrow only in UTC."""
    df, table = frame
    assert expressions.value("DATE_TRUNC('DAY', `ts`)", table.schema, types(spark, df), "America/New_York") is None
    assert expressions.value("DATE_TRUNC('DAY', `ts`)", table.schema, types(spark, df), "UTC") is not None
    for sql in ("HOUR(`ts`)", "DATE_FORMAT(`ts`, 'yyyy-MM-dd')"):
        assert expressions.value(sql, table.schema, types(spark, df), "Asia/Kolkata") is None


def test_casts_between_dates_and_times_are_spark_s_in_any_zone(spark, frame):
    """Outside UTC a TIMESTAMP's day and a DATE's start follow the zone's midnights, asked
    of Spark; without them the cast is Spark's."""
    df, table = frame
    zone = "America/New_York"
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        for sql in ("CAST(`ts` AS DATE)", "CAST(`day` AS TIMESTAMP)", "CAST(CAST(`ts` AS DATE) - 1 AS TIMESTAMP)"):
            assert expressions.value(sql, table.schema, types(spark, df), zone) is None
            midnights = partial(zsets.midnights, spark, zone)
            compiled = expressions.value(sql, table.schema, types(spark, df), zone, midnights)
            assert compiled is not None, sql
            want = zsets.collect_arrow(df.selectExpr(f"{sql} AS v")).column("v")
            got = expressions.as_column(compiled(table), table.num_rows)
            assert got.type == want.type and got.to_pylist() == want.to_pylist(), sql
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
