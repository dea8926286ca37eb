"""Envelopes: how a record's document says what changed, and how a change is written.

Sources:

- ``append``: every record is a new row;
- ``upsert``: the ``key`` columns identify a row; a record replaces the row with that key, a
  record with a null value (tombstone) deletes it (its key read from the record key);
- ``debezium``: ``{"before": row|null, "after": row|null, "op": ...}`` (optionally inside
  ``"payload"``): ``before`` is deleted, ``after`` inserted;
- ``insert_delete``: ``{"insert": row}`` or ``{"delete": row}`` (Feldera's format).

Sinks write the same shapes; ``append`` only for results that never retract a row.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql.types import DataType, IntegerType, LongType, StringType, StructType, TimestampType

from .formats import Bad, Decoder, Row, avro_record, converter, from_text, value

ENVELOPES = ("append", "upsert", "debezium", "insert_delete")
#: the envelopes a format carries: a CSV line has no room for before/after or insert/delete
ENVELOPES_OF = {"json": ENVELOPES, "avro": ENVELOPES, "csv": ("append", "upsert")}
#: Kafka metadata a source may include as columns, with their types
METADATA: dict[str, DataType] = {"partition": IntegerType(), "offset": LongType(), "timestamp": TimestampType(),
                                 "key": StringType(), "headers": StringType()}  # headers as a JSON object


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: int | None  # ms since the epoch
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def metadata(self, kind: str) -> Any:
        if kind == "partition":
            return self.partition
        if kind == "offset":
            return self.offset
        if kind == "timestamp":
            if self.timestamp is None:
                return None
            return datetime.fromtimestamp(self.timestamp / 1000, timezone.utc).replace(tzinfo=None)
        if kind == "key":
            return None if self.key is None else self.key.decode("utf-8", errors="replace")
        return json.dumps({k: None if v is None else v.decode("utf-8", errors="replace") for k, v in self.headers})


def source_changes(envelope: str, columns: StructType, key: Sequence[str], decode: Decoder,
                   record: Record) -> list[tuple[Row, int]]:
    """A record's changes to the source's value ``columns``: weighted rows; for ``upsert``, the
    row with weight 1, or (a tombstone) the key with the other columns null and weight 0."""
    if record.value is None and envelope == "upsert":
        return [(_key_row(columns, key, decode, record), 0)]
    doc = None if record.value is None else decode(record.value)
    changes = [(_row(columns, body), w) for body, w in envelope_changes(envelope, doc)]
    if envelope == "upsert":
        row = changes[0][0]
        for k in key:
            if row[columns.fieldNames().index(k)] is None:
                raise Bad(f"upsert key column {k!r} is null")
    return changes


def envelope_changes(envelope: str, doc: Any) -> list[tuple[Any, int]]:
    """A decoded record value's changes in ``envelope``: (row document, weight); Bad for a
    value the envelope does not have."""
    if envelope in ("append", "upsert"):
        return [(doc, 1)]
    if envelope == "debezium":
        if not isinstance(doc, dict):
            raise Bad("a debezium record is an object with before/after")
        body = doc["payload"] if isinstance(doc.get("payload"), dict) else doc
        if "before" not in body and "after" not in body:
            raise Bad("a debezium record needs `before` and/or `after`")
        return [(body[part], w) for part, w in (("before", -1), ("after", 1)) if body.get(part) is not None]
    # insert_delete: exactly one of the two is set (an Avro record carries both, one null)
    parts = [(k, v) for k, v in doc.items() if v is not None] if isinstance(doc, dict) else []
    if len(parts) != 1 or parts[0][0] not in ("insert", "delete") or set(doc) - {"insert", "delete"}:
        raise Bad('an insert_delete record is {"insert": row} or {"delete": row}')
    kind, body = parts[0]
    return [(body, 1 if kind == "insert" else -1)]


def _key_row(columns: StructType, key: Sequence[str], decode: Decoder, record: Record) -> Row:
    """A tombstone's key: the record key in the source's format (an object with the key
    columns, or for one key column its bare value), the other columns null."""
    if record.key is None:
        raise Bad("a tombstone (null value) needs a record key")
    fields = {f.name: f for f in columns.fields}
    if decode.format == "avro" and decode.registry is not None and record.key[:1] == b"\x00":
        doc = decode(record.key)
    else:
        text = record.key.decode("utf-8", errors="replace")
        try:
            doc = json.loads(text, parse_float=Decimal)
        except ValueError:
            doc = text
        if not isinstance(doc, (dict, str)) and len(key) == 1:
            doc = from_text(fields[key[0]], text)
    if not isinstance(doc, dict):
        if len(key) != 1:
            raise Bad(f"the record key must be an object with {list(key)}")
        doc = {key[0]: doc}
    given = {k: value(fields[k], field_of(doc, k)) for k in key}
    return tuple(given.get(f.name) for f in columns.fields)


def field_of(doc: Mapping[str, Any], name: str) -> Any:
    """Field ``name`` of a document, its name matched without regard to case."""
    if name in doc:
        return doc[name]
    for k, v in doc.items():
        if k.lower() == name:
            return v
    raise Bad(f"missing field {name!r}")


def _row(columns: StructType, doc: Any) -> Row:
    if not isinstance(doc, dict):
        raise Bad(f"expected an object with the columns, got {type(doc).__name__}")
    return tuple(convert(field_of(doc, name)) for name, convert in _converters(columns))


_CONVERTERS: dict[int, tuple[StructType, list[tuple[str, Callable[[Any], Any]]]]] = {}


def _converters(columns: StructType) -> list[tuple[str, Callable[[Any], Any]]]:
    """Each column's name and converter, made once per schema object (every record of a
    source is decoded through the same one)."""
    cached = _CONVERTERS.get(id(columns))
    if cached is None or cached[0] is not columns:
        if len(_CONVERTERS) >= 64:  # a long-lived worker sees a new schema object per task
            _CONVERTERS.clear()
        cached = _CONVERTERS[id(columns)] = (columns, [(f.name, converter(f)) for f in columns.fields])
    return cached[1]


# --- sinks -------------------------------------------------------------------------------

Message = tuple[Any, Any]  # (key document or None, value document or None)


def sink_messages(envelope: str, key: Sequence[str], docs: Sequence[tuple[dict[str, Any], int]],
                  refuse: Callable[[str], Exception]) -> list[Message]:
    """One tick's consolidated changes (row as a document, weight) as messages. ``refuse``
    makes the error for a change the envelope cannot say (a retraction on an ``append`` sink)."""
    keyed = (lambda d: {k: d[k] for k in key}) if key else (lambda d: None)
    if envelope in ("append", "insert_delete"):
        if envelope == "append" and any(w < 0 for _, w in docs):
            raise refuse("its result retracted rows, which an `append` sink cannot say; use the insert_delete, "
                         "upsert or debezium envelope")
        wrap = (lambda d, w: d) if envelope == "append" else (lambda d, w: {"insert" if w > 0 else "delete": d})
        return [(keyed(d), wrap(d, w)) for d, w in docs for _ in range(abs(w))]
    if envelope == "upsert":
        out: dict[tuple[Any, ...], Message] = {}
        for d, w in sorted(docs, key=lambda dw: dw[1]):  # deletes first: an update's insert wins
            k = tuple(d[c] for c in key)
            out[k] = (dict(zip(key, k)), d if w > 0 else None)
        return list(out.values())
    # debezium: with key columns, a delete and an insert of one key are one update
    before: dict[Any, list[dict[str, Any]]] = {}
    msgs: list[Message] = []
    for d, w in docs:
        if w < 0:
            before.setdefault(json.dumps(keyed(d), default=str), []).extend([d] * -w)
    for d, w in docs:
        for _ in range(max(w, 0)):
            old = before.get(json.dumps(keyed(d), default=str)) if key else None
            if old:
                msgs.append((keyed(d), {"before": old.pop(), "after": d, "op": "u"}))
            else:
                msgs.append((keyed(d), {"before": None, "after": d, "op": "c"}))
    msgs += [(keyed(d), {"before": d, "after": None, "op": "d"}) for olds in before.values() for d in olds]
    return msgs


def sink_schemas(envelope: str, name: str, columns: StructType, key: Sequence[str]) -> tuple[dict, dict | None]:
    """The Avro schemas of a sink's values and keys."""
    row = avro_record(name, columns)
    key_schema = avro_record(f"{name}_key", StructType([columns[k] for k in key])) if key else None
    if envelope in ("append", "upsert"):
        return row, key_schema
    if envelope == "insert_delete":
        return {"type": "record", "name": f"{name}_change",
                "fields": [{"name": "insert", "type": ["null", row], "default": None},
                           {"name": "delete", "type": ["null", name], "default": None}]}, key_schema
    return {"type": "record", "name": f"{name}_envelope",
            "fields": [{"name": "before", "type": ["null", row], "default": None},
                       {"name": "after", "type": ["null", name], "default": None},
                       {"name": "op", "type": "string"}]}, key_schema
