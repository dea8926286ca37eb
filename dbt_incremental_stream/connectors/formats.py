"""Message formats: a Kafka record's bytes as a document (what an envelope reads), and back.

- ``json``: a JSON value (an object for a row);
- ``csv``: one line holding the declared columns in order (an empty field is NULL);
- ``avro``: binary Avro. The writer schema comes from a schema file (the message is the
  bare Avro body) or from a schema registry (Confluent framing: a zero byte, the schema's
  4-byte id, the body). Sinks register their schema under ``<topic>-value`` / ``<topic>-key``.

Values are checked against the declared column types here, once for every format: a value
of another type, or one the column cannot hold exactly (an integer out of its range, a
decimal with more digits than its precision or scale allow, a float out of range, a time
out of range), is bad input, never a guess: nothing is rounded or truncated.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
import struct
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal, InvalidOperation
from functools import lru_cache, partial
from typing import Any, Callable, Mapping, Sequence, cast

import msgspec
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType,
                               DoubleType, FloatType, IntegerType, LongType, MapType, ShortType, StringType,
                               StructField, StructType, TimestampType)

from ..errors import ConnectorError, StreamError

FORMATS = ("json", "csv", "avro")
Row = tuple[Any, ...]
_INTS = (LongType, IntegerType, ShortType, ByteType)


class Bad(Exception):
    """A record that cannot be read; the message says why (it goes to the dead letters)."""


class _Misfit(ValueError):
    """A value of the right kind that the column cannot hold exactly; says why."""


# --- schema registry ---------------------------------------------------------------------

@dataclass(frozen=True)
class Registry:
    """A Confluent-compatible schema registry, spoken to over its REST API."""

    url: str
    user_info: str | None = None  # ``basic.auth.user.info``: "user:secret"
    timeout: float = 10.0

    @staticmethod
    def from_config(block: Mapping[str, Any] | None) -> Registry | None:
        if not block:
            return None
        if not block.get("url"):
            raise StreamError("`schema_registry` needs a `url`")
        return Registry(str(block["url"]).rstrip("/"), block.get("basic.auth.user.info") or block.get("user_info"))

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        import requests

        auth = cast(tuple[str, str], tuple(self.user_info.split(":", 1))) if self.user_info else None
        try:
            r = requests.request(method, self.url + path, json=body, auth=auth, timeout=self.timeout,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        except requests.RequestException as e:
            raise ConnectorError(f"schema registry at {self.url} is not reachable ({type(e).__name__}); "
                                 "check `kafka.schema_registry.url` in the profile") from e
        if r.status_code in (401, 403):
            raise ConnectorError(f"schema registry at {self.url} refused the credentials (HTTP {r.status_code}); "
                                 "check `kafka.schema_registry.basic.auth.user.info`")
        if r.status_code == 404:
            raise _NotFound(f"schema registry at {self.url}: {path} not found")
        if r.status_code >= 400:
            raise ConnectorError(f"schema registry at {self.url}: {method} {path} answered HTTP {r.status_code}: "
                                 f"{r.text[:200]}")
        return r.json()

    def schema(self, schema_id: int) -> Any:
        return _parsed(self, schema_id)

    def register(self, subject: str, schema: Mapping[str, Any]) -> int:
        return int(self._call("POST", f"/subjects/{subject}/versions", {"schema": json.dumps(schema)})["id"])


class _NotFound(ConnectorError):
    pass


@lru_cache(maxsize=256)
def _parsed(registry: Registry, schema_id: int) -> Any:
    import fastavro

    doc = registry._call("GET", f"/schemas/ids/{schema_id}")
    return fastavro.parse_schema(json.loads(doc["schema"]))


# --- decoding ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Decoder:
    """Bytes → document for one source. ``columns`` are the ones a CSV line holds."""

    format: str
    columns: StructType
    avro_schema: str | None = None  # the writer schema's JSON, from a schema file
    registry: Registry | None = None

    def __post_init__(self) -> None:
        if self.format == "avro" and self.avro_schema is None and self.registry is None:
            raise StreamError("an Avro source needs `schema_file` (or `avro_schema`) or a `schema_registry` "
                              "in the profile's kafka block")

    def __call__(self, payload: bytes) -> Any:
        if self.format == "json":
            try:
                # a number as written: a decimal column holds it exactly
                return json.loads(payload, parse_float=Decimal)
            except (ValueError, UnicodeDecodeError) as e:
                raise Bad(f"not JSON: {e}") from e
        if self.format == "csv":
            return self._csv(payload)
        return _plain(self.avro_document(payload))

    def _csv(self, payload: bytes) -> dict[str, Any]:
        try:
            lines = list(csv.reader(io.StringIO(payload.decode("utf-8"))))
        except (csv.Error, UnicodeDecodeError) as e:
            raise Bad(f"not CSV: {e}") from e
        if len(lines) != 1 or len(lines[0]) != len(self.columns.fields):
            found = len(lines[0]) if len(lines) == 1 else f"{len(lines)} lines"
            raise Bad(f"a CSV record is one line of {len(self.columns.fields)} fields, got {found}")
        return {f.name: from_text(f, v) for f, v in zip(self.columns.fields, lines[0])}

    def avro_document(self, payload: bytes) -> Any:
        """An Avro value as fastavro reads it (times aware, in UTC)."""
        import fastavro

        if self.registry is not None:
            if len(payload) < 5 or payload[0] != 0:
                raise Bad("not a schema-registry Avro record (no magic byte and schema id)")
            schema_id = struct.unpack(">I", payload[1:5])[0]
            try:
                schema = self.registry.schema(schema_id)
            except _NotFound:
                raise Bad(f"schema id {schema_id} is not in the schema registry") from None
            body = payload[5:]
        else:
            schema, body = _schema_of(self.avro_schema), payload
        try:
            return fastavro.schemaless_reader(io.BytesIO(body), schema, None)
        except Exception as e:  # fastavro raises several types for corrupt input
            detail = re.sub(r"\s*(from\s+)?<[^<>]* at 0x[0-9a-f]+>", "", str(e))  # no object addresses
            raise Bad(f"not Avro for its schema: {type(e).__name__}: {detail}") from e


@lru_cache(maxsize=64)
def _schema_of(text: str) -> Any:
    import fastavro

    return fastavro.parse_schema(json.loads(text))


def _plain(v: Any) -> Any:
    """Avro's timestamps come back aware (UTC); columns hold them naive, as Spark does."""
    if isinstance(v, dict):
        return {k: _plain(x) if isinstance(x, (dict, datetime)) else x for k, x in v.items()}
    if isinstance(v, datetime) and v.tzinfo is not None:
        return (v if v.tzinfo is timezone.utc else v.astimezone(timezone.utc)).replace(tzinfo=None)
    return v


def from_text(f: StructField, v: str) -> Any:
    """A CSV field as the column's type."""
    if v == "":
        return None
    t = f.dataType
    try:
        if isinstance(t, _INTS):
            return int(v)
        if isinstance(t, (DoubleType, FloatType)):
            return float(v)
        if isinstance(t, BooleanType):
            if v.lower() not in ("true", "false"):
                raise ValueError(v)
            return v.lower() == "true"
    except ValueError as e:
        raise Bad(f"field {f.name!r}: {v!r} is not a {t.simpleString()}") from e
    return v  # checked (and parsed) by value()


def value(f: StructField, v: Any) -> Any:
    """``v`` as column ``f`` holds it."""
    return converter(f)(v)


def converter(f: StructField) -> Callable[[Any], Any]:
    """:func:`value` for one column, its type dispatched once (a source decodes every
    record's fields through these)."""
    t: DataType = f.dataType
    convert = _convert(t)

    def checked(v: Any) -> Any:
        if v is None:
            return None
        try:
            return convert(v)
        except _Misfit as e:
            raise Bad(f"field {f.name!r}: {v!r} does not fit {t.simpleString()}: {e}") from e
        except (TypeError, ValueError, InvalidOperation, OverflowError) as e:
            raise Bad(f"field {f.name!r}: {v!r} is not a {t.simpleString()}") from e
    return checked


def _convert(t: DataType) -> Callable[[Any], Any]:
    """The conversion of a non-null document value to type ``t``; raises TypeError or
    ValueError for a value of another type (a value is never guessed)."""
    def of(*types: type, then: Callable[[Any], Any] = lambda v: v) -> Callable[[Any], Any]:
        def convert(v: Any) -> Any:
            if type(v) not in types:  # exact types: a JSON true is not the number 1
                raise TypeError
            return then(v)
        return convert

    if isinstance(t, _INTS):
        return of(int, then=_in_range(_INT_BITS[type(t)]))
    if isinstance(t, FloatType):
        return of(int, float, Decimal, then=_float32)
    if isinstance(t, DoubleType):
        return of(int, float, Decimal, then=float)
    if isinstance(t, DecimalType):
        return of(int, float, str, Decimal, then=partial(_decimal, t))
    if isinstance(t, StringType):
        return of(str, then=_utf8)
    if isinstance(t, BooleanType):
        return of(bool)
    if isinstance(t, TimestampType):  # a text with an offset is that instant, held in UTC as Spark's CAST does
        return lambda v: _plain(v if isinstance(v, datetime) else datetime.fromisoformat(str(v).replace("Z", "+00:00")))
    if isinstance(t, DateType):
        return lambda v: v if isinstance(v, date) and not isinstance(v, datetime) else date.fromisoformat(str(v))
    if isinstance(t, BinaryType):
        return of(bytes, str, then=lambda v: v.encode() if isinstance(v, str) else v)
    if isinstance(t, ArrayType):
        element = _or_null(_convert(t.elementType))
        return of(list, then=lambda v: [element(x) for x in v])
    if isinstance(t, MapType):
        key, item = _convert(t.keyType), _or_null(_convert(t.valueType))
        return of(dict, then=lambda v: {key(k): item(x) for k, x in v.items()})
    if isinstance(t, StructType):
        fields = [(f.name, _or_null(_convert(f.dataType))) for f in t.fields]
        return of(dict, then=lambda v: tuple(convert(v.get(name)) for name, convert in fields))
    raise TypeError(f"no conversion to {t.simpleString()}")


def _or_null(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``convert`` for an element, a map value or a field, which may be NULL."""
    return lambda v: None if v is None else convert(v)


_INT_BITS = {LongType: 64, IntegerType: 32, ShortType: 16, ByteType: 8}
_FLOAT_MAX = 3.4028234663852886e38


def _in_range(bits: int) -> Callable[[int], int]:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def check(v: int) -> int:
        if not low <= v <= high:
            raise _Misfit(f"out of range [{low}, {high}]")
        return v
    return check


def _utf8(v: str) -> str:
    """Text a column holds: a JSON escape of half a surrogate pair has no UTF-8."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise _Misfit("a lone surrogate (\\ud800-\\udfff) is not text") from None
    return v


def _float32(v: int | float) -> float:
    v = float(v)
    if math.isfinite(v) and abs(v) > _FLOAT_MAX:
        raise _Misfit("out of a float's range")
    return v


def _decimal(t: DecimalType, v: int | float | str | Decimal) -> Decimal:
    """``v`` as a decimal ``t`` holds it exactly (a float by its shortest text)."""
    d = Decimal(str(v))
    if not d.is_finite():
        raise _Misfit("not a finite number")
    n = d.normalize()
    decimals = max(0, -int(n.as_tuple().exponent))
    if decimals > t.scale:
        raise _Misfit(f"{decimals} digits after the point, at most {t.scale}")
    whole = n.adjusted() + 1 if n else 0
    if whole > t.precision - t.scale:
        raise _Misfit(f"{whole} digits before the point, at most {t.precision - t.scale}")
    return d


# --- encoding ----------------------------------------------------------------------------

#: Avro types of Spark's atomic types (decimals take their precision and scale)
_AVRO: list[tuple[type, Any]] = [
    (LongType, "long"), (IntegerType, "int"), (ShortType, "int"), (ByteType, "int"), (DoubleType, "double"),
    (FloatType, "float"), (BooleanType, "boolean"), (StringType, "string"), (BinaryType, "bytes"),
    (TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
    (DateType, {"type": "int", "logicalType": "date"})]


def avro_type(t: DataType) -> Any:
    """The Avro type of a nullable column of Spark type ``t``."""
    if isinstance(t, DecimalType):
        return ["null", {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}]
    for spark_type, avro in _AVRO:
        if isinstance(t, spark_type):
            return ["null", avro]
    raise StreamError(f"a column of type {t.simpleString()} cannot be written as Avro")


def avro_record(name: str, columns: StructType) -> dict[str, Any]:
    return {"type": "record", "name": name,
            "fields": [{"name": f.name, "type": avro_type(f.dataType), "default": None} for f in columns.fields]}


@dataclass(frozen=True)
class Encoder:
    """Documents → bytes for one sink topic: the value's (or key's) Avro schema is registered
    once and its id framed into every message."""

    format: str
    topic: str
    registry: Registry | None = None
    binary: bool = False  # a column holds bytes (written as text, not msgspec's base64)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise StreamError(f"sink: format {self.format!r} is not one of {FORMATS}")
        if self.format == "avro" and self.registry is None:
            raise StreamError("an Avro sink needs a `schema_registry` in the profile's kafka block (readers find "
                              "the schema there)")

    def __call__(self, doc: Any, columns: Sequence[str], schema: dict[str, Any] | None, part: str = "value") -> bytes:
        if self.format == "json":  # times as RFC 3339, decimals as text: no precision lost
            return json.dumps(doc, default=_json_default).encode() if self.binary else _JSON.encode(doc)
        if self.format == "csv":
            out: io.StringIO | io.BytesIO  # a BytesIO for Avro below
            out = io.StringIO()
            csv.writer(out, lineterminator="").writerow(["" if doc[c] is None else _text(doc[c]) for c in columns])
            return out.getvalue().encode()
        import fastavro

        assert schema is not None and self.registry is not None
        text = json.dumps(schema, sort_keys=True)
        out = io.BytesIO()
        out.write(b"\x00" + struct.pack(">I", _registered(self.registry, f"{self.topic}-{part}", text)))
        fastavro.schemaless_writer(out, _schema_of(text), doc)
        return out.getvalue()


@lru_cache(maxsize=64)
def _registered(registry: Registry, subject: str, schema: str) -> int:
    return registry.register(subject, json.loads(schema))


_JSON = msgspec.json.Encoder(enc_hook=str)


def _json_default(v: Any) -> Any:
    if isinstance(v, (datetime, date)):
        return v.isoformat(sep=" ") if isinstance(v, datetime) else v.isoformat()
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    return str(v)  # Decimal: as text, no precision lost


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return _json_default(v) if isinstance(v, (datetime, date, bytes, Decimal)) else str(v)
