"""Decoding a document's values into columns, without Spark."""
from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal

import pytest
from pyspark.sql.types import (ByteType, DecimalType, FloatType, IntegerType, LongType, ShortType, StructField,
                               TimestampType)

from dbt_incremental_stream.connectors.formats import Bad, value


def test_a_timestamp_with_an_offset_is_that_instant_in_utc():
    column = StructField("t", TimestampType())
    assert value(column, "2026-01-01T12:00:00+02:00") == datetime(2026, 1, 1, 10, 0)
    assert value(column, "2026-01-01 12:00:00Z") == datetime(2026, 1, 1, 12, 0)
    assert value(column, "2026-01-01T12:00:00.5") == datetime(2026, 1, 1, 12, 0, 0, 500000)


def test_a_value_of_another_type_is_never_guessed():
    assert value(StructField("n", LongType()), 7) == 7
    assert value(StructField("d", DecimalType(12, 2)), "10.25") == Decimal("10.25")
    for column, bad in [(StructField("n", LongType()), True), (StructField("n", LongType()), "7"),
                        (StructField("t", TimestampType()), "noon")]:
        with pytest.raises(Bad, match=f"field {column.name!r}"):
            value(column, bad)


@pytest.mark.parametrize("column, bad, says", [
    (DecimalType(12, 2), "99999999999999.99", "14 digits before the point, at most 10"),
    (DecimalType(12, 2), "10.125", "3 digits after the point, at most 2"),
    (DecimalType(12, 2), 10.125, "3 digits after the point, at most 2"),
    (DecimalType(12, 2), "NaN", "not a finite number"),
    (LongType(), 1 << 63, "out of range"),
    (IntegerType(), 2_147_483_648, "out of range"),
    (ShortType(), -32_769, "out of range"),
    (ByteType(), 128, "out of range"),
    (FloatType(), 1e39, "out of a float's range"),
])
def test_a_value_the_column_cannot_hold_exactly_is_bad_not_rounded(column, bad, says):
    with pytest.raises(Bad, match=f"field 'c': .* does not fit {re.escape(column.simpleString())}: {says}"):
        value(StructField("c", column), bad)


def test_values_that_fit_are_kept_exactly():
    assert value(StructField("c", DecimalType(12, 2)), "9999999999.99") == Decimal("9999999999.99")
    assert value(StructField("c", DecimalType(12, 2)), "10.10") == Decimal("10.10")
    assert value(StructField("c", DecimalType(12, 2)), 1e3) == Decimal("1000.0")
    assert value(StructField("c", DecimalType(5, 5)), "0.00001") == Decimal("0.00001")
    assert value(StructField("c", ByteType()), -128) == -128
    assert value(StructField("c", LongType()), (1 << 63) - 1) == (1 << 63) - 1
    assert value(StructField("c", FloatType()), float("inf")) == float("inf")


def test_a_time_out_of_range_is_bad():
    with pytest.raises(Bad, match="field 't'"):
        value(StructField("t", TimestampType()), "0001-01-01T00:00:00+01:00")
