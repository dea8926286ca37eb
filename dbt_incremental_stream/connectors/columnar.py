"""A chunk of Kafka messages decoded into one Arrow record batch of a source's rows.

The rows are :func:`.datasource.row_schema`'s: the source's columns, ``_w``, the record's
partition and offset, and for a dead letter its raw value and the reason.

JSON values take a fast path: each value is decoded by a typed msgspec decoder (C code; a
value of another JSON type than the column's, or a missing field, is refused, as the row
decoder refuses it), the envelope's too (a row; ``{"insert": row}`` or ``{"delete": row}``;
debezium's ``before``/``after``, in a ``payload`` or not), and each column is built by
Arrow with its declared type, which checks integer ranges and decimal precision and scale.
Times, dates and bytes are decoded as text and converted by the row decoder's own rules.
A chunk the fast path refuses anywhere is decoded again record by record: every record
it takes keeps its row; every other one goes through the row decoder
(:func:`.envelopes.source_changes`), which either accepts it (a field named in another
case, a time in a form RFC 3339 does not have) or gives the reason it is a dead letter.
So the rows are always the row decoder's, only faster; ``tests/fast/test_columnar.py``
holds the two to that on random and malformed values.

Avro values are decoded one by one (fastavro, C code) and taken through the envelope by
the row decoder's own rules; each column is then built by Arrow from the values of the
types the row decoder takes as they are (any other goes to the row decoder).

CSV values of one line take a fast path too: Python's csv reader (C code) parses each as
the row decoder does, and each column's texts are cast by Arrow. A text is cast only in
the form Python's ``int()``, ``float()`` or ``Decimal()`` reads the same way (Arrow would
take ``0x1F`` as an integer); any other goes to the row decoder.

Upsert tombstones and sources with nested column types go through the row decoder, whose
rows Arrow reads (:func:`.zsets.arrow_rows`).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from operator import attrgetter, itemgetter
from typing import Any, Callable, Optional, Sequence, Union

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DataType, DateType, DecimalType, DoubleType,
                               FloatType, MapType, StringType, StructField, StructType, TimestampType)

from ..runtime.arrow import kernels
from ..runtime.spark import zsets
from .envelopes import Record, envelope_changes, field_of, source_changes
from .formats import _FLOAT_MAX, _INTS, Bad, Decoder, converter
from .kafka import KafkaSource, record

#: Python types the fast decoder reads each column type's JSON values as
_FAST: list[tuple[tuple[type, ...], type]] = [
    (_INTS, int), ((DoubleType, FloatType), float), ((DecimalType,), Decimal), ((StringType,), str),
    ((BooleanType,), bool), ((TimestampType, DateType, BinaryType), str)]


#: the element and map value types the fast decoder reads inside an array or a map: those
#: Arrow builds exactly as the row decoder converts them (not a FLOAT: its range is checked)
_INSIDE: list[tuple[tuple[type, ...], type]] = [
    (_INTS, int), ((DoubleType,), float), ((StringType,), str), ((BooleanType,), bool)]


def _fast_type(t: DataType) -> Any:
    """The Python type the fast decoder reads a column of ``t`` as: a scalar, a list of
    scalars (an array), a dict of them by text (a map); None for one it leaves to the row
    decoder (a struct, a map keyed by another type)."""
    if isinstance(t, (ArrayType, MapType)):
        inner = t.elementType if isinstance(t, ArrayType) else t.valueType
        python = next((p for spark_types, p in _INSIDE if isinstance(inner, spark_types)), None)
        if python is None:
            return None
        if isinstance(t, ArrayType):
            return list[Optional[python]]  # type: ignore[valid-type]
        return dict[str, Optional[python]] if isinstance(t.keyType, StringType) else None  # type: ignore[valid-type]
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
    _fast: Callable[[bytes], Any] | None = field(init=False)  # a value as the fast path decodes it
    _expand: Callable[[list[Any]], Expanded] = field(init=False)  # decoded values' rows, weights, owners
    _get: list[Callable[[Any], Any]] = field(init=False)  # a column's value in a fast-decoded row
    _column: list[Callable[[list[Any]], pa.Array]] = field(init=False)  # a column's values as Arrow

    def __post_init__(self) -> None:
        self._arrow = zsets.arrow_schema(self.row_schema)
        columns = self.source.schema.fields
        types = [_fast_type(f.dataType) for f in columns]
        arrow = [self._arrow.field(f.name).type for f in columns]
        self._fast, self._expand, self._get, self._column = None, _one, [], []
        if any(t is None for t in types):
            return
        if self.decode.format == "json":
            names = [f"c{i}" for i in range(len(columns))]
            row = msgspec.defstruct("Row", [(n, Optional[t]) for n, t in zip(names, types)],
                                    rename=dict(zip(names, (f.name for f in columns))), gc=False)
            self._fast, self._expand = _json_changes(self.source.envelope, row)
            self._get = [attrgetter(n) for n in names]
            self._column = [partial(_json_column, f, t) for f, t in zip(columns, arrow)]
        elif self.decode.format == "csv":
            if any(isinstance(f.dataType, (ArrayType, MapType)) for f in columns):
                return  # a nested value in a CSV field: the row decoder says what it makes of it
            self._fast = partial(_csv_line, len(columns))
            self._get = [itemgetter(i) for i in range(len(columns))]
            self._column = [partial(_text_column, f, t) for f, t in zip(columns, arrow)]
        else:  # Avro: records decoded one by one (fastavro), columns built by Arrow
            self._fast = partial(_decoded_changes, self.decode.avro_document, self.source.envelope)
            self._expand = _flatten
            self._get = [partial(_field_of, f.name) for f in columns]
            self._column = [partial(_value_column, f, t) for f, t in zip(columns, arrow)]

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
            except (msgspec.DecodeError, UnicodeDecodeError, Bad, _Slow):
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

    def _columns(self, taken: list[Any], records: list[Any]) -> pa.Table:
        """Fast-decoded records' changes as rows; Bad when a value does not fit its column
        or an upsert key is null (the row decoder says why)."""
        columns = self.source.schema.fields
        rows, weights, owners = self._expand(taken)
        msgs = records if owners is None else [records[i] for i in owners]
        arrays = [column([get(row) for row in rows]) for get, column in zip(self._get, self._column)]
        if self.source.envelope == "upsert":
            names = self.source.schema.fieldNames()
            if any(arrays[names.index(k)].null_count for k in self.source.key):
                raise Bad("an upsert key is null")
        if self.source.metadata:
            records = [record(m) for m in msgs]
            for (kind, _), f in zip(self.source.metadata, self.source.columns.fields[len(columns):]):
                arrays.append(_array([r.metadata(kind) for r in records], self._arrow.field(f.name).type, f.dataType))
        n = len(rows)
        return pa.Table.from_arrays(
            arrays + [pa.array(weights, pa.int64()) if weights is not None else kernels.ones(n),
                      pa.array(list(map(Message.partition, msgs)), pa.int32()),
                      pa.array(list(map(Message.offset, msgs)), pa.int64()), pa.nulls(n, pa.binary()),
                      pa.nulls(n, pa.string())], schema=self._arrow)

    # --- the row decoder -----------------------------------------------------------------

    def _row_table(self, records: list[Record]) -> pa.Table:
        return zsets.arrow_rows(self.row_schema, self.rows(records))

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


class _Slow(Exception):
    """A record the fast path leaves to the row decoder (which takes it or says why not)."""


#: decoded values' rows, their weights (None: all 1) and the value each comes from (None:
#: one row per value)
Expanded = tuple[list[Any], Optional[list[int]], Optional[list[int]]]


def _one(taken: list[Any]) -> Expanded:
    """Values that are one row each, inserted."""
    return taken, None, None


def _flatten(taken: list[list[tuple[Any, int]]]) -> Expanded:
    """Values that are lists of (row, weight)."""
    return ([row for changes in taken for row, _ in changes], [w for changes in taken for _, w in changes],
            [i for i, changes in enumerate(taken) for _ in changes])


def _json_changes(envelope: str, row: type) -> tuple[Callable[[bytes], Any], Callable[[list[Any]], Expanded]]:
    """How typed msgspec decoders read a JSON value in ``envelope`` (msgspec.DecodeError or
    _Slow for a value the fast path leaves to the row decoder), and how the values they give
    expand to rows. The structs are not tracked by Python's garbage collector: a chunk
    holds many, and collections over them would cost more than the decoding."""
    if envelope in ("append", "upsert"):
        return msgspec.json.Decoder(row).decode, _one
    if envelope == "insert_delete":  # exactly one of the two set, no other field
        change = msgspec.defstruct("Change", [("insert", Optional[row], None), ("delete", Optional[row], None)],
                                   forbid_unknown_fields=True, gc=False)
        decode_change = msgspec.json.Decoder(change).decode

        def insert_delete(value: bytes) -> Any:
            c: Any = decode_change(value)  # a struct defined at run time
            if (c.insert is None) == (c.delete is None):
                raise _Slow
            return c

        def expand(taken: list[Any]) -> Expanded:
            return ([c.insert if c.delete is None else c.delete for c in taken],
                    [1 if c.delete is None else -1 for c in taken], None)
        return insert_delete, expand
    side = Union[row, None, msgspec.UnsetType]  # type: ignore[valid-type]
    body = msgspec.defstruct("Body", [("before", side, msgspec.UNSET), ("after", side, msgspec.UNSET)], gc=False)
    doc = msgspec.defstruct("Debezium", [("before", side, msgspec.UNSET), ("after", side, msgspec.UNSET),
                                         ("payload", Union[body, None, msgspec.UnsetType], msgspec.UNSET)], gc=False)
    decode_doc = msgspec.json.Decoder(doc).decode

    def debezium(value: bytes) -> list[tuple[Any, int]]:
        d: Any = decode_doc(value)  # structs defined at run time
        # the row decoder's choice: a payload object, else the record
        b: Any = d.payload if isinstance(d.payload, body) else d
        if b.before is msgspec.UNSET and b.after is msgspec.UNSET:
            raise _Slow
        return [(r, w) for r, w in ((b.before, -1), (b.after, 1)) if r is not None and r is not msgspec.UNSET]
    return debezium, _flatten


def _json_column(f: StructField, arrow: pa.DataType, values: list[Any]) -> pa.Array:
    """A column's fast-decoded JSON values: times, dates and bytes (decoded as text) by the
    row decoder's rules, the rest as decoded; Bad when one does not fit."""
    if isinstance(f.dataType, TimestampType):
        return _times(values, converter(f)).cast(arrow)
    if isinstance(f.dataType, (DateType, BinaryType)):
        convert = converter(f)
        values = [None if v is None else convert(v) for v in values]
    return _array(values, arrow, f.dataType)


def _decoded_changes(decode: Callable[[bytes], Any], envelope: str, value: bytes) -> list[tuple[Any, int]]:
    """A value's changes by the row decoder's decoding and envelope rules, each row still a
    document; _Slow for a row that is not an object (the row decoder says why)."""
    changes = envelope_changes(envelope, decode(value))
    for doc, _ in changes:
        if type(doc) is not dict:
            raise _Slow
    return changes


def _field_of(name: str, doc: Any) -> Any:
    return field_of(doc, name)


#: the Python types of the values the row decoder takes for each column type as they are
_EXACT: list[tuple[tuple[type, ...], set[type]]] = [
    (_INTS, {int}), ((DoubleType, FloatType), {int, float}), ((DecimalType,), {int, Decimal}), ((StringType,), {str}),
    ((BooleanType,), {bool})]


def _value_column(f: StructField, arrow: pa.DataType, values: list[Any]) -> pa.Array:
    """A column's decoded values (Avro's): those of the types the row decoder takes as they
    are built by Arrow, times, dates and bytes converted by its rules; Bad when one does not
    fit (a value of another type included)."""
    for spark_types, python in _EXACT:
        if isinstance(f.dataType, spark_types):
            if not set(map(type, values)) <= python | {type(None)}:
                raise Bad("a value of another type")
            return _array(values, arrow, f.dataType)
    convert = converter(f)
    return _array([None if v is None else convert(v) for v in values], arrow, f.dataType)


def _csv_line(fields: int, value: bytes) -> list[str]:
    """A CSV value's one row of text fields, parsed as the row decoder parses it (a value of
    one line: the same reader sees the same line); _Slow for any other."""
    text = value.decode("utf-8")
    if "\n" in text or "\r" in text:
        raise _Slow
    try:
        lines = list(csv.reader((text,)))
    except csv.Error:
        raise _Slow from None
    if len(lines) != 1 or len(lines[0]) != fields:
        raise _Slow
    return lines[0]


#: the texts a CSV field of each kind is cast by Arrow from, exactly as Python's int(),
#: float() and Decimal() read them (Arrow alone would also take, say, "0x1F" as an integer)
_INTEGER = r"^[+-]?[0-9]+$"
_REAL = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_FIXED = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$"


def _text_column(f: StructField, arrow: pa.DataType, values: list[str]) -> pa.Array:
    """A column's CSV fields as :func:`.formats.from_text` then the column's converter make
    them (an empty field is NULL), cast by Arrow; Bad when one does not fit."""
    t = f.dataType
    text = pa.array(values, pa.string())
    text = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    if isinstance(t, StringType):
        return text
    if isinstance(t, BooleanType):
        lower = pc.utf8_lower(text)
        _all(pc.is_in(lower, pa.array(["true", "false", None])))  # a null field too
        return pc.equal(lower, "true")
    if isinstance(t, _INTS):  # Arrow reads no "+"
        return _cast(pc.replace_substring_regex(text, r"^\+", ""), _INTEGER, arrow)
    if isinstance(t, DoubleType):
        return _cast(text, _REAL, arrow)
    if isinstance(t, FloatType):  # as float() then a float32: the range checked on the double
        wide = _cast(text, _REAL, pa.float64())
        _all(pc.invert(pc.and_(pc.is_finite(wide), pc.greater(pc.abs(wide), _FLOAT_MAX))))
        return wide.cast(pa.float32(), safe=False)
    if isinstance(t, DecimalType):
        return _cast(text, _FIXED, arrow)
    return _json_column(f, arrow, [None if v == "" else v for v in values])  # times, dates, bytes: as JSON text


def _all(ok: pa.Array) -> None:
    if pc.all(ok).as_py() is False:
        raise Bad("a field the fast path does not take")


def _cast(text: pa.Array, form: str, arrow: pa.DataType) -> pa.Array:
    _all(pc.match_substring_regex(text, form))
    try:
        return pc.cast(text, arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise Bad(str(e)) from e


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
    if isinstance(spark, DecimalType) and any(isinstance(v, Decimal) and v and v.adjusted() < -spark.scale
                                               for v in values):
        raise Bad("a digit past the scale")  # Arrow made 4.750296090368391e-216 a DECIMAL(10, 2) 0.00
    if isinstance(spark, FloatType):
        wide = pa.array(values, pa.float64())
        if pc.any(pc.and_(pc.is_finite(wide), pc.greater(pc.abs(wide), _FLOAT_MAX))).as_py():
            raise Bad("out of a float's range")
    return array
