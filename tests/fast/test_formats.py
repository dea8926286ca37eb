"""Decoding a document's values into columns, without Spark."""
from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from pyspark.sql.types import DecimalType, LongType, StructField, TimestampType

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
