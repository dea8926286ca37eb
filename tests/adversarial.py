"""Adversarial values per Spark type, and random workloads of them for the twin harness.

Every column may be NULL. Each type's domain is a handful of values chosen where
engines disagree — NaN, signed zeros, infinities, integer and decimal limits, strings
equal only after normalisation, instants before 1970 or at the ends of the calendar,
and around daylight-saving changes — and weighted towards a few ordinary values, so
that joins match, groups collide and duplicates occur. Domains overlap across types
(1 is an INT, a DOUBLE and a DECIMAL), so joins across types match too. A nested value
is NULL, empty, or a few elements (a map's entries, a struct's fields) of its types'
values, elements and fields NULL too (a map's keys never are: Spark forbids it).
"""
from __future__ import annotations

import math
import struct
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from dbt_incremental_stream.differential import Twin

Row = tuple[Any, ...]
UTC = timezone.utc

#: a NaN with the sign bit set: another bit pattern of the same value to Spark
NEGATIVE_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]

DOUBLES = [0.0, 0.0, 1.0, 1.0, -1.0, 2.0, 0.5, -0.0, math.nan, NEGATIVE_NAN, math.inf, -math.inf,
           5e-324, 1.7976931348623157e308, 0.1]
FLOATS = [0.0, 0.0, 1.0, 1.0, -1.0, 2.0, 0.5, -0.0, math.nan, math.inf, -math.inf,
          1.401298464324817e-45, 3.4028234663852886e38]


def _integers(bits: int) -> list[int]:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return [0, 1, 1, 2, 2, 3, -1, low, high]


def decimal_limit(precision: int, scale: int) -> Decimal:
    """The largest value of DECIMAL(precision, scale), exactly (no arithmetic: Python's
    decimal context rounds results to 28 digits)."""
    digits = "9" * precision
    return Decimal(f"{digits[:precision - scale]}.{digits[precision - scale:]}" if scale else digits)


def _decimals(precision: int, scale: int) -> list[Decimal]:
    top = decimal_limit(precision, scale)
    values = [Decimal(0), Decimal(1), Decimal(1), Decimal(2), Decimal(-1), top, top.copy_negate()]
    if scale:
        values += [Decimal("0.5"), Decimal(f"1E-{scale}")]  # the smallest step
    if (precision, scale) == (38, 0):  # BIGINT's limits, for joins of BIGINT with DECIMAL(38,0)
        values += [Decimal((1 << 63) - 1), Decimal(-(1 << 63))]
    return values


#: per width in bits (TINYINT 8 ... BIGINT 64)
INTEGERS = {bits: _integers(bits) for bits in (8, 16, 32, 64)}
#: per (precision, scale)
DECIMALS = {ps: _decimals(*ps) for ps in ((38, 0), (38, 18), (10, 0), (10, 2))}

STRINGS = ["a", "a", "b", "", "a ", "A", "é", "e\u0301", "😀"]

DATES = [date(2026, 3, 8), date(2026, 3, 8), date(2026, 11, 1), date(1970, 1, 1), date(1969, 12, 31),
         date(1, 1, 1), date(9999, 12, 31)]

TIMESTAMPS = [
    datetime(2026, 3, 8, 5, 0, tzinfo=UTC),  # midnight in New York on the day clocks go forward
    datetime(2026, 3, 8, 6, 59, 59, 999999, tzinfo=UTC),  # 01:59:59.999999 EST, the last before the jump
    datetime(2026, 3, 8, 7, 0, tzinfo=UTC),  # 03:00 EDT: 02:00 local never happens
    datetime(2026, 11, 1, 4, 0, tzinfo=UTC),  # midnight in New York on the day clocks go back
    datetime(2026, 11, 1, 5, 30, tzinfo=UTC),  # 01:30 EDT, the first one
    datetime(2026, 11, 1, 6, 30, tzinfo=UTC),  # 01:30 EST, the second one
    datetime(2026, 3, 8, 0, 0, tzinfo=UTC),  # midnight UTC
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]


def _maybe_null(values: list[Any]) -> st.SearchStrategy:
    return st.one_of(st.sampled_from(values), st.sampled_from(values), st.sampled_from(values), st.none())


def values(dtype: DataType) -> st.SearchStrategy:
    """Adversarial values of a Spark type (NULL included)."""
    if isinstance(dtype, DoubleType):
        return _maybe_null(DOUBLES)
    if isinstance(dtype, FloatType):
        return _maybe_null(FLOATS)
    bits = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}
    for kind, n in bits.items():
        if isinstance(dtype, kind):
            return _maybe_null(_integers(n))
    if isinstance(dtype, DecimalType):
        return _maybe_null(_decimals(dtype.precision, dtype.scale))
    if isinstance(dtype, StringType):
        return _maybe_null(STRINGS)
    if isinstance(dtype, DateType):
        return _maybe_null(DATES)
    if isinstance(dtype, TimestampType):
        return _maybe_null(TIMESTAMPS)
    if isinstance(dtype, ArrayType):
        return st.one_of(st.none(), st.lists(values(dtype.elementType), max_size=3))
    if isinstance(dtype, MapType):
        keys = values(dtype.keyType).filter(lambda k: k is not None)
        return st.one_of(st.none(), st.dictionaries(keys, values(dtype.valueType), max_size=3))
    if isinstance(dtype, StructType):
        return st.one_of(st.none(), st.tuples(*(values(f.dataType) for f in dtype.fields)))
    raise NotImplementedError(f"no adversarial values for {dtype.simpleString()}")


def row(schema: StructType) -> st.SearchStrategy[Row]:
    """A row of ``schema``: a small id (1-6, never NULL) in a first INT column named ``id``,
    adversarial values in the others."""
    return st.tuples(*(st.integers(1, 6) if f.name == "id" else values(f.dataType) for f in schema.fields))


def changes(data: st.DataObject, twin: Twin, sources: list[str]) -> dict[str, list[tuple[Row, int]]]:
    """One tick against ``twin``'s current input (what its ``schema`` and ``rows`` say):
    for each source some inserts, deletes of present rows and updates (a delete plus an
    insert of the same row with one column changed)."""
    out: dict[str, list[tuple[Row, int]]] = {}
    for source in sources:
        rows = row(twin.schema(source))
        current = twin.rows(source)
        inserts = st.lists(rows, min_size=0 if current else 3, max_size=6)  # a first tick of a few rows at least
        ops: list[tuple[Row, int]] = [(r, 1) for r in data.draw(inserts, label=f"+{source}")]
        if current:  # rows drawn by position: a row present twice may be deleted twice
            present = st.sampled_from(list(enumerate(current)))
            deleted = data.draw(st.lists(present, max_size=3, unique_by=lambda p: p[0]), label=f"-{source}")
            ops += [(old, -1) for _, old in deleted]
            updated = data.draw(st.lists(present, max_size=2, unique_by=lambda p: p[0]), label=f"~{source}")
            gone = {i for i, _ in deleted}
            for i, old in updated:
                if i in gone:
                    continue
                fresh = data.draw(rows, label=f"new {source}")
                at = data.draw(st.integers(0, len(old) - 1), label="column")
                ops += [(old, -1), (old[:at] + (fresh[at],) + old[at + 1:], 1)]
        out[source] = ops
    return out
