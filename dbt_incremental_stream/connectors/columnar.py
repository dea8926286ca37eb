"""A chunk of Kafka messages decoded into one Arrow record batch of a source's rows.

The rows are :func:`.datasource.row_schema`'s: the source's columns, ``_w``, the record's
partition and offset, and for a dead letter its raw value and the reason.

JSON values of an ``append`` or ``upsert`` source take a fast path: each value is decoded
by a typed msgspec decoder (C code; a value of another JSON type than the column's, or a
missing field, is refused, as the row decoder refuses it), and each column is built by
Arrow with its declared type, which checks integer ranges and decimal precision and scale.
Times, dates and bytes are decoded as text and converted by the row decoder's own rules.
A chunk the fast path refuses anywhere is decoded again record by record: every record
it takes keeps its row; every other one goes through the row decoder
(:func:`.envelopes.source_changes`), which either accepts it (a field named in another
case, a time in a form RFC 3339 does not have) or gives the reason it is a dead letter.
So the rows are always the row decoder's, only faster; ``tests/fast/test_columnar.py``
holds the two to that on random and malformed values.

Other formats and envelopes, and sources with nested column types, go through the row
decoder a chunk at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from operator import attrgetter
from typing import Any, Callable, Optional, Sequence

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message
from pyspark.sql.types import (BinaryType, BooleanType, DataType, DateType, DecimalType, DoubleType, FloatType,
                               StringType, StructField, StructType, TimestampType)

from ..runtime import zsets
from .envelopes import Record, source_changes
from .formats import _FLOAT_MAX, _INTS, Bad, Decoder, converter
from .kafka import KafkaSource, record

#: Python types the fast decoder reads each column type's JSON values as
_FAST: list[tuple[tuple[type, ...], type]] = [
    (_INTS, int), ((DoubleType, FloatType), float), ((DecimalType,), Decimal), ((StringType,), str),
    ((BooleanType,), bool), ((TimestampType, DateType, BinaryType), str)]


def _fast_type(t: DataType) -> type | None:
    for spark_types, python in _FAST:
        if isinstance(t, spark_types):
            return python
    return None


@dataclass
class ChunkDecoder:
    """Messages → one record batch of ``row_schema`` for one source."""

    source: KafkaSource
    decode: Decoder  # the row decoder
    row_schema: StructType
    _arrow: pa.Schema = field(init=False)
    _fast: Callable[[bytes], Any] | None = field(init=False)
    _then: list[Callable[[Any], Any] | None] = field(init=False)  # a column's conversion after the fast decoder

    def __post_init__(self) -> None:
        self._arrow = zsets.arrow_schema(self.row_schema)
        columns = self.source.schema.fields
        types = [_fast_type(f.dataType) for f in columns]
        fast = (self.decode.format == "json" and self.source.envelope in ("append", "upsert")
                and all(t is not None for t in types))
        self._fast, self._then = None, []
        if fast:
            names = [f"c{i}" for i in range(len(columns))]
            row = msgspec.defstruct("Row", [(n, Optional[t]) for n, t in zip(names, types)],  # type: ignore[misc]
                                    rename=dict(zip(names, (f.name for f in columns))))
            self._fast = msgspec.json.Decoder(row).decode
            self._then = [_then(f) for f in columns]

    @property
    def columnar(self) -> bool:
        """Whether the batch can be Arrow (not for nested column types, which only Spark converts)."""
        return not any(pa.types.is_nested(t) for t in self._arrow.types)

    def __call__(self, msgs: Sequence[Any]) -> pa.Table:
        if self._fast is not None:
            table = self._fast_table(msgs)
            if table is not None:
                return table
        return self._row_table([record(m) for m in msgs])

    # --- the fast path -----------------------------------------------------------------

    def _fast_table(self, msgs: Sequence[Any]) -> pa.Table | None:
        """The chunk by the fast path, the records it refuses by the row decoder; None when
        it takes none of them."""
        assert self._fast is not None
        decode = self._fast
        taken: list[Any] = []
        at: list[int] = []
        slow: list[int] = []
        for i, m in enumerate(msgs):
            v = m.value()
            if v is None:
                slow.append(i)
                continue
            try:
                taken.append(decode(v))
                at.append(i)
            except (msgspec.DecodeError, UnicodeDecodeError):
                slow.append(i)
        if not taken:
            return None
        parts: list[pa.Table] = []

        def build(lo: int, hi: int) -> None:
            """Records [lo, hi) as columns; halves of them when a value does not fit, down
            to the record, which the row decoder then takes."""
            try:
                parts.append(self._columns(taken[lo:hi], [msgs[i] for i in at[lo:hi]]))
            except Bad:
                if hi - lo == 1:
                    slow.append(at[lo])
                    return
                build(lo, (lo + hi) // 2)
                build((lo + hi) // 2, hi)

        build(0, len(taken))
        if slow:
            parts.append(self._row_table([record(msgs[i]) for i in sorted(slow)]))
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _columns(self, taken: list[Any], msgs: list[Any]) -> pa.Table:
        """Fast-decoded records as rows; Bad when a value does not fit its column or an
        upsert key is null (the row decoder says why)."""
        columns = self.source.schema.fields
        arrays = []
        for i, (f, then) in enumerate(zip(columns, self._then)):
            values = list(map(attrgetter(f"c{i}"), taken))
            if isinstance(f.dataType, TimestampType):
                arrays.append(_times(values, then).cast(self._arrow.field(f.name).type))  # type: ignore[arg-type]
                continue
            if then is not None:
                values = [None if v is None else then(v) for v in values]
            arrays.append(_array(values, self._arrow.field(f.name).type, f.dataType))
        if self.source.envelope == "upsert":
            names = self.source.schema.fieldNames()
            if any(arrays[names.index(k)].null_count for k in self.source.key):
                raise Bad("an upsert key is null")
        if self.source.metadata:
            records = [record(m) for m in msgs]
            for (kind, _), f in zip(self.source.metadata, self.source.columns.fields[len(columns):]):
                arrays.append(_array([r.metadata(kind) for r in records], self._arrow.field(f.name).type, f.dataType))
        n = len(taken)
        return pa.Table.from_arrays(
            arrays + [pa.array([1] * n, pa.int64()), pa.array(list(map(Message.partition, msgs)), pa.int32()),
                      pa.array(list(map(Message.offset, msgs)), pa.int64()), pa.nulls(n, pa.binary()),
                      pa.nulls(n, pa.string())], schema=self._arrow)

    # --- the row decoder -----------------------------------------------------------------

    def _row_table(self, records: list[Record]) -> pa.Table:
        table = zsets.arrow_rows(self.row_schema, self.rows(records))
        assert table is not None, "nested column types are decoded as rows"
        return table

    def rows(self, records: Sequence[Record]) -> list[tuple[Any, ...]]:
        """The rows of ``records`` by the row decoder."""
        source = self.source
        nothing = (None,) * len(source.columns.fields)
        out = []
        for r in records:
            try:
                changes = source_changes(source.envelope, source.schema, source.key, self.decode, r)
            except Bad as e:
                out.append(nothing + (0, r.partition, r.offset, r.value, str(e)))
                continue
            meta = tuple(r.metadata(kind) for kind, _ in source.metadata)
            out += [row + meta + (weight, r.partition, r.offset, None, None) for row, weight in changes]
        return out


def _then(f: StructField) -> Callable[[Any], Any] | None:
    """What becomes of a column's fast-decoded value: times, dates and bytes by the row
    decoder's rules (raising Bad), the rest as decoded."""
    if isinstance(f.dataType, (TimestampType, DateType, BinaryType)):
        return converter(f)
    return None


#: times Arrow's cast reads exactly as Python's ``fromisoformat`` does (no offset; any
#: other form is converted value by value)
_PLAIN_TIME = r"^\d{4}-\d{2}-\d{2}[T ]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?$"


def _times(values: list[Any], convert: Callable[[Any], Any]) -> pa.Array:
    """Timestamps (UTC, no zone) from text: the plain ones cast by Arrow, the others (an
    offset, a date alone) by the row decoder's rules; Bad when one is no time."""
    try:
        text = pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:  # a lone surrogate
        raise Bad(str(e)) from e
    plain = pc.fill_null(pc.match_substring_regex(text, _PLAIN_TIME), False)
    try:
        parsed = pc.cast(pc.if_else(plain, text, None), pa.timestamp("us"))
    except pa.ArrowInvalid:  # a day the month does not have: each by the row decoder
        plain = pa.array([False] * len(values))
        parsed = pa.nulls(len(values), pa.timestamp("us"))
    if pc.sum(plain).as_py() == len(values) - text.null_count:
        return parsed
    rest = [None if v is None or p else convert(v) for v, p in zip(values, plain.to_pylist())]
    return pc.if_else(plain, parsed, _array(rest, pa.timestamp("us"), TimestampType()))


def _array(values: list[Any], arrow: pa.DataType, spark: DataType) -> pa.Array:
    """A column as Arrow; Bad when a value does not fit (the row decoder says why)."""
    try:
        if isinstance(spark, TimestampType):
            return pa.array(values, pa.timestamp("us")).cast(arrow)  # naive values are UTC
        array = pa.array(values, arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as e:
        raise Bad(str(e)) from e
    if isinstance(spark, FloatType):
        wide = pa.array(values, pa.float64())
        if pc.any(pc.and_(pc.is_finite(wide), pc.greater(pc.abs(wide), _FLOAT_MAX))).as_py():
            raise Bad("out of a float's range")
    return array
