"""The per-bucket work of a tick on arrangements, as Arrow/numpy functions (no Spark).

Every table here is a weighted batch: data columns plus the weight ``_w`` (int64). A
*run* is such a batch sorted by ``_h``, a 64-bit hash of its key columns, so that a probe
is a binary search per probed key (``numpy.searchsorted``) followed by an exact compare
of the key columns among the hash's candidates; hash collisions cost a compare, never a
wrong answer. The hash is a function of the key values and their Arrow types only, so it
is the same in every process, and a row's bucket is a residue of ``_h`` (:mod:`.arrangement`).

The kernels work on whole columns: ``group_by`` for consolidation and partial sums,
``searchsorted``/``repeat`` for probes, ``take`` for gathering. Integer arithmetic is
checked: an overflow raises ``ArrowInvalid``, and the tick goes to Spark, whose answer
(an error with ANSI on, a wrapped sum with it off) is the one given.

Keys follow Spark's ``NormalizeFloatingNumbers``: wherever rows are matched or grouped by
a key (joins, GROUP BY, DISTINCT, set operations, partitions), -0.0 equals 0.0 and every
NaN equals every NaN, and a group's key comes out normalized, as Spark's does. A row's
identity in a Z-set (:func:`consolidate`) is its exact values: -0.0 stays apart from 0.0,
as in Spark's bags.
"""
from __future__ import annotations

import decimal
import math
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...circuit.operators import COUNT, MOMENTS, WEIGHT, AggCall, nonfinite_columns, partial_columns
from ...process import map_all

HASH = "_h"
#: an arrangement key ``(ORDERED, column)``: runs sorted by that column's values (NULLs left
#: out: no comparison holds for them), read by ranges of it
ORDERED = "__ordered_by"
_NULL = np.uint64(0x9E3779B97F4A7C15)  # what a NULL key value hashes to
_MUL = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_POLY = np.uint64(0x100000001B3)
_SEED = np.uint64(0x2545F4914F6CDD1D)  # a hash before its first key
_ROW = "__row_number"  # a row's position, where a group keeps its first row
HASH_BLOCK = 1 << 14  # rows a key hash mixes at a time (its scratch stays in the CPU's cache)
_EXACT = pa.decimal128(38, 0)  # integer sums are summed in it
_DECIMAL_LIMIT = 10 ** 38  # the unscaled magnitude no DECIMAL reaches (precision 38)
SIDE_BY_SIDE = 1 << 20  # rows from which a consolidation by sorting runs on two threads
INSTANT = pa.timestamp("us", tz="UTC")  # Spark's TIMESTAMP, as the engine holds it
DAY_MICROS = 86_400_000_000


class UnsupportedKey(TypeError):
    """A key column of a type the kernels do not hash (nested types)."""


# --- hashing -------------------------------------------------------------------------


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit moves every output bit (of a copy of ``z``)."""
    z = z.copy()
    _mix_into(z, np.empty_like(z))
    return z


def _mix_into(z: np.ndarray, t: np.ndarray) -> None:
    """:func:`_mix` in place, ``t`` (as long as ``z``) its scratch: no allocation, so that
    a block of :data:`HASH_BLOCK` values is mixed in the CPU's cache."""
    np.right_shift(z, np.uint64(30), out=t)
    z ^= t
    z *= _MUL
    np.right_shift(z, np.uint64(27), out=t)
    z ^= t
    z *= _MUL2
    np.right_shift(z, np.uint64(31), out=t)
    z ^= t


def _column_values(arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """A uint64 per value, equal for equal values of one type, before mixing; and which
    values are valid (None: all are). Arrow's buffers are used as they are where they can
    be (no NULLs, a 64-bit type): the values are read, never written."""
    t = arr.type
    n = len(arr)
    if pa.types.is_dictionary(t):
        return _column_values(arr.dictionary_decode())
    if pa.types.is_null(t):
        return np.zeros(n, np.uint64), np.zeros(n, bool)
    valid = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else None
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        values = _filled(arr, pa.int64(), 0).view(np.uint64)
    elif pa.types.is_floating(t):
        f = _filled(arr, pa.float64(), 0.0) + 0.0  # -0.0 is 0.0
        f[np.isnan(f)] = np.nan
        values = f.view(np.uint64)
    elif pa.types.is_date32(t) or pa.types.is_time32(t):
        values = _filled(arr.view(pa.int32()), pa.int64(), 0).view(np.uint64)
    elif pa.types.is_temporal(t):
        values = _filled(arr.view(pa.int64()), pa.int64(), 0).view(np.uint64)
    elif pa.types.is_decimal(t):
        words = decimal_words(arr.cast(pa.decimal128(t.precision, t.scale)) if t.bit_width != 128 else arr)
        values = np.bitwise_xor(_mix(words[:, 0].view(np.uint64)), words[:, 1].view(np.uint64))
    elif _bytes_like(t):
        values = _bytes_hash(arr.cast(pa.large_binary()))
    elif pa.types.is_nested(t) and not pa.types.is_union(t):
        values = _identity(arr, True, _SEED)
    else:
        raise UnsupportedKey(f"cannot hash a key of type {t}")
    return values, valid


# --- nested values ------------------------------------------------------------------

#: the seeds of a nested value's two identities (:func:`identities`)
_SEEDS = (np.uint64(0x243F6A8885A308D3), np.uint64(0x13198A2E03707344))
#: a second base for strings' polynomial hash, so that the two identities' string leaves differ
_POLY2 = np.uint64(0x9FB21C651E98DF25)


def identities(arr: pa.Array, zero: bool) -> np.ndarray:
    """An (n, 2) uint64 of each value's two independent 128-bit identity: equal for
    equal values; for different ones, equal with a chance near 2^-128. An array's,
    map's or struct's value is hashed by its elements in order, recursively, a NULL as a
    constant. Floats: every NaN one value; -0.0 is 0.0 with ``zero`` (Spark's key
    equality, inside nested values too), else its own bits (a bag's rows are exact). It is
    how nested values are compared and grouped: Arrow compares and groups none of them."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    return np.stack([_identity(arr, zero, seed) for seed in _SEEDS], axis=1)


def _identity(arr: pa.Array, zero: bool, seed: np.uint64) -> np.ndarray:
    """One of :func:`identities`' words (``seed`` picks which), mixed."""
    t, n = arr.type, len(arr)
    if pa.types.is_dictionary(t):
        return _identity(arr.dictionary_decode(), zero, seed)
    if pa.types.is_struct(t):
        h = np.full(n, seed, np.uint64)
        for i, child in enumerate(arr.flatten()):
            h = _mix(h * _MUL + _identity(child, zero, seed) + np.uint64(i))
    elif pa.types.is_fixed_size_list(t):
        offsets = np.arange(n + 1, dtype=np.int64) * t.list_size
        h = _elements(_identity(arr.flatten(), zero, seed), offsets, seed)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offsets = arr.offsets.to_numpy().astype(np.int64)
        start, end = int(offsets[0]), int(offsets[-1])
        h = _elements(_identity(arr.values.slice(start, end - start), zero, seed), offsets - start, seed)
    elif _bytes_like(t):
        h = _mix(_bytes_hash(arr.cast(pa.large_binary()), _POLY if seed == _SEEDS[0] else _POLY2) ^ seed)
    elif pa.types.is_floating(t) and not zero:
        f = _filled(arr, pa.float64(), 0.0).copy()
        f[np.isnan(f)] = np.nan
        h = _mix(f.view(np.uint64) ^ seed)
    elif pa.types.is_nested(t):
        raise UnsupportedKey(f"cannot hash a value of type {t}")
    else:
        h = _mix(_column_values(arr)[0] ^ seed)
    if arr.null_count:
        h[~arr.is_valid().to_numpy(zero_copy_only=False)] = _NULL ^ seed
    return h


def _elements(values: np.ndarray, offsets: np.ndarray, seed: np.uint64) -> np.ndarray:
    """A hash per list of the element hashes ``values`` between consecutive ``offsets``
    (from 0): each element mixed with its position, summed, mixed with the length."""
    lengths = np.diff(offsets)
    if values.size:
        pos = (np.arange(values.size, dtype=np.int64) - np.repeat(offsets[:-1], lengths)).astype(np.uint64)
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(_mix(values + pos * _POLY), dtype=np.uint64)])
        per = sums[offsets[1:]] - sums[offsets[:-1]]
    else:
        per = np.zeros(len(lengths), np.uint64)
    return _mix(per + lengths.astype(np.uint64) * _MUL2 + seed)


def has_floats(t: pa.DataType) -> bool:
    """Whether a type holds floating-point values, at any depth."""
    if pa.types.is_floating(t):
        return True
    if pa.types.is_struct(t):
        return any(has_floats(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return has_floats(t.key_type) or has_floats(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return has_floats(t.value_type)
    return False


def _surrogates(table: pa.Table, columns: Sequence[str], zero: bool) -> tuple[pa.Table, list[str]]:
    """``table`` with each nested column of ``columns`` as two uint64 columns of its
    :func:`identities` (named ``__id0_<c>``, ``__id1_<c>``), and the columns to group by."""
    keys = []
    for c in columns:
        if not pa.types.is_nested(table.schema.field(c).type):
            keys.append(c)
            continue
        ids = identities(table.column(c), zero)
        names = [f"__id0_{c}", f"__id1_{c}"]
        table = table.append_column(names[0], pa.array(ids[:, 0])).append_column(names[1], pa.array(ids[:, 1]))
        keys += names
    return table, keys


def decimal_words(arr: pa.Array) -> np.ndarray:
    """A decimal128 array's values as their two's complement, an (n, 2) int64 view of
    Arrow's buffer: the low word, then the high one (NULLs hold whatever is there)."""
    return np.frombuffer(arr.buffers()[1], np.int64)[2 * arr.offset:2 * (arr.offset + len(arr))].reshape(len(arr), 2)


#: :func:`hash_order` finds at most this many ties among the hashes' high bits before it
#: sorts whole (a vast table of many keys; random hashes of 1M rows tie about 0.03 times)
ORDER_TIES = 256


def hash_order(h: np.ndarray) -> np.ndarray:
    """``np.argsort(h, kind="stable")`` of key hashes, 2.5-3x faster: each hash's high bits
    and its row number packed in one uint64 and the values sorted (a vectorized sort that
    argsort does not have). Equal hashes stay in row order; hashes that differ only in the
    low bits the row number took (rare for mixed hashes) are then put in order among
    themselves."""
    n = len(h)
    bits = max(1, (n - 1).bit_length())
    if n < 2 or bits > 40:
        return np.argsort(h, kind="stable")
    shift = np.uint64(bits)
    packed = (h >> shift) << shift
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    order = (packed & np.uint64((1 << bits) - 1)).astype(np.int64)
    ordered = h[order]
    ties = np.flatnonzero(ordered[1:] < ordered[:-1])
    if ties.size > ORDER_TIES:
        return np.argsort(h, kind="stable")
    if ties.size:
        high = packed >> shift
        starts, ends = np.searchsorted(high, high[ties], "left"), np.searchsorted(high, high[ties], "right")
        for lo, hi in set(zip(starts.tolist(), ends.tolist())):
            part = order[lo:hi]
            order[lo:hi] = part[np.argsort(h[part], kind="stable")]
    return order


def _filled(arr: pa.Array, t: pa.DataType, null: Any) -> np.ndarray:
    """``arr``'s values as numpy values of Arrow type ``t``, a NULL as ``null``: Arrow's
    buffer as it is where it can be (``t`` already, no NULLs), else one copy."""
    if arr.type == t and not arr.null_count:
        return arr.to_numpy()
    if arr.type != t and not arr.null_count and not pa.types.is_boolean(arr.type):
        return arr.to_numpy().astype(t.to_pandas_dtype())  # one copy, not Arrow's cast then fill
    return arr.cast(t).fill_null(null).to_numpy(zero_copy_only=False)


def _bytes_like(t: pa.DataType) -> bool:
    """Whether values of ``t`` are hashed as their bytes (:func:`_bytes_hash`)."""
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
        or pa.types.is_large_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t)


def _bytes_hash(arr: pa.Array, poly: np.uint64 = _POLY) -> np.ndarray:
    """A polynomial hash of each value's bytes, mixed with its length (vectorized)."""
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset: arr.offset + n + 1]
    data = arr.buffers()[2]
    start, end = int(offsets[0]), int(offsets[-1])
    raw = (np.frombuffer(data, np.uint8)[start:end] if data is not None and end > start
           else np.zeros(0, np.uint8)).astype(np.uint64)
    lengths = np.diff(offsets)
    if raw.size:
        pos = np.arange(raw.size, dtype=np.int64) - np.repeat(offsets[:-1] - start, lengths)
        powers = np.cumprod(np.full(int(lengths.max()), poly, np.uint64))
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(raw * powers[pos], dtype=np.uint64)])
        per_value = sums[offsets[1:] - start] - sums[offsets[:-1] - start]
    else:
        per_value = np.zeros(n, np.uint64)
    return per_value + lengths.astype(np.uint64) * _MUL2


def normal_float(values: pa.Array | pa.ChunkedArray, zero: bool = True) -> pa.Array | pa.ChunkedArray:
    """Floating-point values as Spark normalizes keys: every NaN one NaN and, with
    ``zero``, -0.0 as 0.0; other types as they are."""
    if not pa.types.is_floating(values.type):
        return values
    nan = pa.scalar(float("nan"), values.type)
    out = pc.if_else(pc.is_nan(values), nan, values)
    return pc.add(out, pa.scalar(0.0, values.type)) if zero else out  # -0.0 + 0.0 is 0.0


def normal_keys(table: pa.Table, keys: Iterable[str], zero: bool = True) -> pa.Table:
    """``table`` with its floating-point ``keys`` columns normalized (:func:`normal_float`)."""
    for k in keys:
        i = table.schema.get_field_index(k)
        if pa.types.is_floating(table.schema.field(i).type):
            table = table.set_column(i, table.schema.field(i), normal_float(table.column(i), zero))
    return table


def key_hash(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """The ``_h`` of each row: a hash of its ``keys`` columns (no keys: one constant).
    Per key, ``h = mix(h * MUL + v)``, where ``v`` is the value mixed (a NULL: a constant);
    computed a block of :data:`HASH_BLOCK` rows at a time, whatever the number of keys (a
    whole column's pass per step was bound by memory, not arithmetic)."""
    n = table.num_rows
    h = np.full(n, _SEED, np.uint64)
    columns = [_column_values(table.column(k).combine_chunks()) for k in keys]
    if not columns or not n:
        return h
    v, t = np.empty(min(n, HASH_BLOCK), np.uint64), np.empty(min(n, HASH_BLOCK), np.uint64)
    for start in range(0, n, HASH_BLOCK):
        stop = min(n, start + HASH_BLOCK)
        hb, vb, tb = h[start:stop], v[:stop - start], t[:stop - start]
        for values, valid in columns:
            np.copyto(vb, values[start:stop])
            _mix_into(vb, tb)
            if valid is not None:
                np.copyto(vb, _NULL, where=~valid[start:stop])
            hb *= _MUL
            hb += vb
            _mix_into(hb, tb)
    return h


# --- weighted batches ---------------------------------------------------------------


def data_columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c not in (WEIGHT, HASH)]


def concat(tables: Iterable[pa.Table | None]) -> pa.Table | None:
    """Tables of one schema as one (None: none given)."""
    present = [t for t in tables if t is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return pa.concat_tables(present, promote_options="permissive")


def spark_cast(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` cast to ``schema`` as Spark casts: a decimal to fewer decimals is rounded
    HALF_UP first, where Arrow's cast refuses to drop digits (a UNION of two decimal types
    takes the wider one's integer digits: ``DecimalType.boundedPreferIntegralDigits``). A
    value past the target's precision still raises ``ArrowInvalid``."""
    columns = []
    for column, field in zip(table.columns, schema):
        t = column.type
        if pa.types.is_decimal(t) and pa.types.is_decimal(field.type) and field.type.scale < t.scale:
            wider = column.cast(pa.decimal256(t.precision + 1, t.scale))  # room for a carry
            column = pc.round(wider, ndigits=field.type.scale, round_mode="half_towards_infinity"
                              ).cast(pa.decimal256(t.precision + 1, field.type.scale))
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names).cast(schema)


def ones(n: int) -> pa.Array:
    """A weight column of ``n`` insertions."""
    return pa.array(np.ones(n, np.int64))


def inserted(table: pa.Table) -> pa.Table:
    """``table``'s rows, each inserted once (a weight column of 1)."""
    return table.append_column(WEIGHT, ones(table.num_rows))


def negate(table: pa.Table) -> pa.Table:
    return table.set_column(table.schema.get_field_index(WEIGHT), WEIGHT,
                            pc.negate_checked(table.column(WEIGHT)))


def consolidate(table: pa.Table) -> pa.Table:
    """One row per distinct tuple with its summed weight; zero weights dropped."""
    cols = data_columns(table)
    if not cols:
        total = pc.sum(table.column(WEIGHT)).as_py() or 0
        return pa.table({WEIGHT: pa.array([total] if total else [], pa.int64())})
    rows = normal_keys(table.select(cols + [WEIGHT]), cols, zero=False)
    try:
        h = key_hash(rows, cols)
    except UnsupportedKey:  # nested columns: every row through the group-by
        out = _summed(rows, cols)
    else:
        # rows whose hash no other row has are alone in their group already: only rows that
        # share a hash (equal rows, or a collision) go through the group-by, which is most of
        # a tick's time when its delta has no duplicates
        ordered = np.sort(h)
        shared = ordered[1:][ordered[1:] == ordered[:-1]]
        if not shared.size:
            out = rows
        elif shared.size * 16 <= len(h):
            mask = pc.is_in(pa.array(h), value_set=pa.array(np.unique(shared)))
            out = concat([rows.filter(pc.invert(mask)), _summed(rows.filter(mask), cols)])
        else:  # most rows have a twin (a table compared with what was held of it): by sorting
            out = _sorted_sums(rows, cols, h)
    zero = pc.equal(out.column(WEIGHT), 0)
    return out.filter(pc.invert(zero)) if pc.any(zero).as_py() else out  # no copy when none cancelled


def diff(current: pa.Table, before: pa.Table | None) -> pa.Table:
    """The Z-set that turns ``before`` (a Z-set of ``current``'s columns and types) into
    ``current`` (a bag of rows): :func:`.zsets.diff`, in Arrow."""
    now = inserted(current)
    if before is None:
        return consolidate(now)
    return consolidate(pa.concat_tables([now, negate(before.select(now.column_names).cast(now.schema))]))


def _sorted_sums(rows: pa.Table, cols: list[str], h: np.ndarray) -> pa.Table:
    """:func:`_summed` by sorting on the rows' hashes ``h``: a run of equal rows is one
    group (its weights summed, its first row kept). Half the time of Arrow's group-by when
    most rows have a twin, and ordered by hash (the same output for the same input). A
    large one is summed as two halves by the hash's top bit, side by side (sorting and
    gathering release the GIL): equal rows are in one half, and the halves in turn are the
    whole in order."""
    if len(h) < SIDE_BY_SIDE:
        return _sorted_part(rows, cols, h, hash_order(h))
    top = h >= np.uint64(1 << 63)
    halves = map_all("sort", lambda part: _sorted_part(rows, cols, h, part[hash_order(h[part])]),
                     (np.flatnonzero(~top), np.flatnonzero(top)))
    return pa.concat_tables(halves, promote_options="permissive")


def _sorted_part(rows: pa.Table, cols: list[str], h: np.ndarray, order: np.ndarray) -> pa.Table:
    """:func:`_sorted_sums` of the rows at ``order`` (which sorts their hashes; not stably:
    rows of one hash are equal, or go through the group-by). A run of one hash holding
    rows that differ (a collision, or 0.0 beside -0.0, which hash alike) may keep equal
    rows apart: its rows go through the group-by."""
    if not len(order):  # a half with no rows
        return rows.slice(0, 0)
    hs = h[order]
    rows = rows.take(pa.array(order))
    same = hs[1:] == hs[:-1]  # row i+1 has row i's hash
    equal = same.copy()
    for c in cols:
        equal &= _equal_to_previous(rows.column(c))
    starts = np.flatnonzero(np.concatenate([[True], ~equal]))
    sums = np.add.reduceat(rows.column(WEIGHT).to_numpy(), starts) if len(starts) else np.zeros(0, np.int64)
    mixed = same & ~equal
    if not mixed.any():
        return rows.take(pa.array(starts)).set_column(len(cols), WEIGHT, pa.array(sums, pa.int64()))
    run = np.concatenate([[0], np.cumsum(~same)])  # which run of one hash each row is in
    flagged = np.zeros(int(run[-1]) + 1, bool)
    flagged[run[1:][mixed]] = True
    apart = flagged[run]
    keep = starts[~apart[starts]]
    return concat([rows.take(pa.array(keep)).set_column(len(cols), WEIGHT, pa.array(sums[~apart[starts]], pa.int64())),
                   _summed(rows.filter(pa.array(apart)), cols)])


def _equal_to_previous(column: pa.ChunkedArray) -> np.ndarray:
    """Per value after the first, whether it equals the value before it: NULL equals NULL,
    floats by their bits (NaN is one NaN after :func:`normal_keys`; -0.0 is not 0.0)."""
    a = column.combine_chunks()
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    valid = a.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_null(a.type):
        return np.ones(max(len(a) - 1, 0), bool)
    if pa.types.is_nested(a.type):
        ids = identities(a, zero=False)
        values = (ids[1:] == ids[:-1]).all(axis=1)
    elif pa.types.is_floating(a.type):
        bits = a.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False).view(np.uint64)
        values = bits[1:] == bits[:-1]
    else:
        values = pc.fill_null(pc.equal(a.slice(1), a.slice(0, max(len(a) - 1, 0))), False).to_numpy(
            zero_copy_only=False)
    return (~valid[1:] & ~valid[:-1]) | (valid[1:] & valid[:-1] & values)


def _summed(rows: pa.Table, cols: list[str]) -> pa.Table:
    """One row per distinct tuple of ``cols`` with its summed weight (nested values
    grouped by their :func:`identities`, each group's first row kept)."""
    if any(pa.types.is_nested(rows.schema.field(c).type) for c in cols):
        table, keys = _surrogates(rows.append_column(_ROW, pa.array(np.arange(rows.num_rows))), cols, zero=False)
        out = table.group_by(keys, use_threads=False).aggregate([(WEIGHT, "sum"), (_ROW, "min")])
        return rows.select(cols).take(out.column(f"{_ROW}_min")).append_column(WEIGHT, out.column(f"{WEIGHT}_sum"))
    out = rows.group_by(cols, use_threads=False).aggregate([(WEIGHT, "sum")])
    return out.rename_columns([WEIGHT if c == f"{WEIGHT}_sum" else c for c in out.column_names]).select(cols + [WEIGHT])


def sum_by(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """An additive table consolidated: every non-key column summed per key (:func:`fitted`),
    groups whose sums are all zero or NULL dropped (a group's COUNT can net to 0 while a
    SUM does not)."""
    out = fitted(table, keys)
    values = [c for c in out.column_names if c not in keys]
    if not values:
        return out
    live = None
    for c in values:
        nonzero = pc.fill_null(pc.not_equal(out.column(c), pa.scalar(0).cast(out.schema.field(c).type)), False)
        live = nonzero if live is None else pc.or_(live, nonzero)
    return out.filter(live)


def fitted(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Every non-key column summed per key, as :func:`group_sums`, in the table's types: a
    key whose DECIMAL sum leaves 38 digits (Spark's widest) gets as many rows as its sum
    takes, each in range (the others' sums on its first row, zeros on the next). An
    additive table: a key's rows sum to its exact sums (whoever reads a key sums its
    rows: :func:`split`)."""
    try:
        out = group_sums(table, keys)
    except pa.ArrowInvalid:
        out = None
    decimals = {f.name: f.type.scale for f in table.schema if f.name not in keys and pa.types.is_decimal(f.type)}
    if out is not None and all(_within(out.column(c), scale) for c, scale in decimals.items()):
        return out
    table = table.select(list(keys) + [c for c in table.column_names if c not in keys and c != HASH])
    wide = pa.schema([pa.field(f.name, pa.decimal256(76, decimals[f.name])) if f.name in decimals else f
                      for f in table.schema])
    sums = aggregate(table.cast(wide), keys, [(c, "sum") for c in table.column_names if c not in keys])
    sums = sums.select(table.column_names)
    fits = np.ones(sums.num_rows, bool)
    for c, scale in decimals.items():
        fits &= pc.fill_null(pc.less_equal(pc.abs(sums.column(c)), pa.scalar(_largest(scale), wide.field(c).type)),
                             True).to_numpy(zero_copy_only=False)
    rows = []
    for r in sums.filter(pa.array(~fits)).to_pylist():
        pieces = {c: _pieces(r[c], scale) for c, scale in decimals.items()}
        for n in range(max(map(len, pieces.values()))):
            rows.append({c: r[c] if c in keys else pieces[c][n] if c in pieces and n < len(pieces[c])
                         else r[c] if n == 0 or r[c] is None else type(r[c])(0) for c in table.column_names})
    return pa.concat_tables([sums.filter(pa.array(fits)).cast(table.schema),
                             pa.Table.from_pylist(rows, schema=table.schema)])


def _within(values: pa.ChunkedArray, scale: int) -> bool:
    """Whether every value of a DECIMAL column is a DECIMAL(38, ``scale``)."""
    if pa.types.is_decimal128(values.type) and values.type.precision <= 38:
        return True  # Arrow's checked casts keep it so
    top = pc.max(pc.abs(values)).as_py() if len(values) else None
    return top is None or top <= _largest(scale)


def _largest(scale: int) -> Decimal:
    """The largest DECIMAL(38, ``scale``)."""
    return Decimal(_DECIMAL_LIMIT - 1).scaleb(-scale, decimal.Context(prec=80))


def _pieces(total: Decimal | None, scale: int) -> list[Decimal | None]:
    """``total`` as a sum of DECIMAL(38, ``scale``) values: the largest as often as it
    takes, then the rest."""
    if total is None:
        return [None]
    with decimal.localcontext(decimal.Context(prec=80)):
        largest = _largest(scale).copy_sign(total)
        n = int(abs(total) // abs(largest))
        rest = total - largest * n
        pieces: list[Decimal | None] = [largest] * n
        return pieces + ([rest] if rest or not n else [])


def split(table: pa.Table) -> bool:
    """Whether an additive table may hold a key in several rows (:func:`fitted`'s pieces
    of a sum: a DECIMAL(38, s) at its largest magnitude)."""
    for f in table.schema:
        if pa.types.is_decimal128(f.type) and f.type.precision == 38 and table.num_rows:
            top = pc.max(pc.abs(table.column(f.name))).as_py()
            if top is not None and top == _largest(f.type.scale):
                return True
    return False


def distinct_keys(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The key columns of ``table``, one row per key (NULL a key as any; no keys: one row)."""
    if not keys:
        return table.select([]).slice(0, 1)
    return table.select(list(keys)).group_by(list(keys), use_threads=False).aggregate([])


def group_sums(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Every non-key column summed per key (no keys: one row, if there are rows)."""
    values = [c for c in table.column_names if c not in keys and c != HASH]
    if not keys and not table.num_rows:
        return table.select(values)
    out = aggregate(table.select(list(keys) + values), keys, [(c, "sum") for c in values])
    return out.select(list(keys) + values)


def aggregate(table: pa.Table, keys: Sequence[str], specs: Sequence[tuple]) -> pa.Table:
    """``table.group_by(keys).aggregate(specs)`` as Spark groups: floating-point keys
    normalized, each output column named as its input column, and integer and decimal
    sums exact (summed as decimal(38, 0) or decimal(76, s) and cast back: a sum out of
    its type's range raises ``ArrowInvalid``, where Arrow's own would wrap). No keys: one
    row, of NULL sums when there are no rows. A column whose largest magnitude times its
    row count stays in range cannot overflow: it is summed as it is (a cast is most of a
    large tick's aggregate)."""
    summed: dict[str, pa.DataType] = {}
    for c in (s[0] for s in specs if s[1] == "sum"):
        kind = table.schema.field(c).type
        if pa.types.is_integer(kind):
            bounds = pc.min_max(table.column(c))
            low, high = bounds["min"].as_py() or 0, bounds["max"].as_py() or 0
            if max(-low, high) * table.num_rows >= 1 << 63:
                summed[c] = kind
                table = table.set_column(table.schema.get_field_index(c), c, table.column(c).cast(_EXACT))
        elif pa.types.is_decimal128(kind):
            largest = pc.max(pc.abs(table.column(c))).as_py() or Decimal(0)
            if int(largest.scaleb(kind.scale, decimal.Context(prec=80))) * table.num_rows >= _DECIMAL_LIMIT:
                summed[c] = pa.decimal128(38, kind.scale)
                table = table.set_column(table.schema.get_field_index(c), c,
                                         table.column(c).cast(pa.decimal256(76, kind.scale)))
    nested = [k for k in keys if pa.types.is_nested(table.schema.field(k).type)]
    if nested:
        floats = [k for k in nested if has_floats(table.schema.field(k).type)]
        if floats:  # Spark's group key holds its floats normalized: Spark groups it
            raise UnsupportedKey(f"a group key of nested type holding floats ({', '.join(floats)})")
        rows, grouped = _surrogates(table.append_column(_ROW, pa.array(np.arange(table.num_rows))), keys, zero=True)
        out = rows.group_by(grouped, use_threads=False).aggregate([*specs, (_ROW, "min")])
        firsts = table.select(list(keys)).take(out.column(f"{_ROW}_min"))
        rest = out.drop_columns([c for c in out.column_names if c in grouped or c == f"{_ROW}_min"])
        out = pa.Table.from_arrays([*firsts.columns, *rest.columns], names=[*keys, *rest.column_names])
    else:
        out = normal_keys(table, keys).group_by(list(keys), use_threads=False).aggregate(list(specs))
    named = {f"{s[0]}_{s[1]}": s[0] for s in specs}
    out = out.rename_columns([named.get(c, c) for c in out.column_names])
    return out.cast(pa.schema([pa.field(c, summed.get(c, t)) for c, t in zip(out.column_names, out.schema.types)]))


# --- runs and probes ----------------------------------------------------------------


def sort_run(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``table`` with its key hash in ``_h``, sorted by it: a run. Ordered by a column's
    values instead for an :data:`ORDERED` key (``_h`` then hashes that column)."""
    if keys and keys[0] == ORDERED:
        column = keys[1]
        cols = [c for c in table.column_names if c != HASH]
        valid = table.select(cols).filter(pc.is_valid(table.column(column)))
        out = valid.take(pc.sort_indices(valid.column(column)))
        return out.append_column(HASH, pa.array(key_hash(out, [column]), pa.uint64())).combine_chunks()
    h = key_hash(table, keys)
    return _gathered(table, h, hash_order(h))


def _gathered(table: pa.Table, h: np.ndarray, order: np.ndarray) -> pa.Table:
    """``table``'s rows at ``order`` with their key hashes ``h`` in ``_h``, in one chunk."""
    cols = [c for c in table.column_names if c != HASH]
    out = table.select(cols).take(pa.array(order)).append_column(HASH, pa.array(h[order], pa.uint64()))
    return out.combine_chunks()


def sorted_parts(table: pa.Table, keys: Sequence[str], bucket_of: Callable[[np.ndarray], np.ndarray],
                 count: int) -> dict[int, pa.Table]:
    """``table`` as runs (:func:`sort_run`) split by bucket (``bucket_of`` a key hash, in
    ``range(count)``), as :func:`split_by` splits a run: its rows ordered by bucket, then
    hash, and gathered once (a run and then its split gather every row twice)."""
    if count == 1 or (keys and keys[0] == ORDERED):
        run = sort_run(table, keys)
        return split_by(run, bucket_of(run.column(HASH).to_numpy()), count)
    h = key_hash(table, keys)
    order = hash_order(h)
    within, bounds = grouped(bucket_of(h[order]), count)
    return _parts(_gathered(table, h, order[within]), bounds)


def grouped(index: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by their ``index`` in ``range(count)`` (a bucket, a task), each group in
    row order: (the rows' order, where each group starts, and the end). A radix sort where
    the indexes fit 16 bits (8x faster than numpy's stable sort of int64)."""
    small = index.astype(np.int16) if count <= 1 << 15 else index
    order = np.argsort(small, kind="stable")
    return order, np.searchsorted(small[order], np.arange(count + 1))


def split_by(run: pa.Table, index: np.ndarray, count: int) -> dict[int, pa.Table]:
    """A run split by each row's ``index`` in ``range(count)`` (its bucket), each part still
    in the run's order."""
    if count == 1:
        return {0: run} if run.num_rows else {}
    order, bounds = grouped(index, count)
    return _parts(run.take(pa.array(order)), bounds)


def _parts(ordered: pa.Table, bounds: np.ndarray) -> dict[int, pa.Table]:
    """The non-empty slices of ``ordered`` between consecutive ``bounds``, by index."""
    return {i: ordered.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))
            for i in range(len(bounds) - 1) if bounds[i + 1] > bounds[i]}


def in_ranges(table: pa.Table, column: str, regions: Sequence[tuple[pa.Scalar, pa.Scalar]],
              ordered: bool = True) -> pa.Table:
    """The rows of ``table`` whose ``column`` lies in one of the closed ``regions`` (each
    row once), without ``_h``. An ``ordered`` table (a run sorted by ``column``) is cut by
    binary search, so the cost follows the rows found."""
    table = table.drop_columns([HASH]) if HASH in table.column_names else table
    if not ordered:
        values = table.column(column)
        masks = [pc.and_kleene(pc.greater_equal(values, lo), pc.less_equal(values, hi)) for lo, hi in regions]
        mask = masks[0] if masks else pa.array([False] * table.num_rows)
        for m in masks[1:]:
            mask = pc.or_kleene(mask, m)
        return table.filter(mask)
    values = _ordinals(table.column(column))
    spans = sorted((int(np.searchsorted(values, ordinal(lo), "left")),
                    int(np.searchsorted(values, ordinal(hi), "right")))
                   for lo, hi in regions)
    merged: list[list[int]] = []
    for start, stop in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        elif stop > start:
            merged.append([start, stop])
    parts = [table.slice(start, stop - start) for start, stop in merged]
    return pa.concat_tables(parts) if parts else table.slice(0, 0)


def orders_exactly(kind: pa.DataType) -> bool:
    """Whether values of ``kind`` become numbers in the same order (:func:`_ordinals`)."""
    return (pa.types.is_integer(kind) or pa.types.is_timestamp(kind) or pa.types.is_date(kind)
            or pa.types.is_decimal128(kind) and kind.precision <= 18)


def beyond(runs: Sequence[pa.Table], column: str, desc: bool, n: int) -> tuple[list[pa.Table], pa.Scalar | None]:
    """From runs sorted by ``column``: the rows at or beyond a cut (the largest values when
    ``desc``, else the smallest) such that no run has more than ``n`` rows beyond it, and
    the cut; every row and None when no run has ``n``."""
    values = [_ordinals(r.column(column)) for r in runs]
    cuts = [(v[-n] if desc else v[n - 1], i) for i, v in enumerate(values) if len(v) >= n]
    runs = [r.drop_columns([HASH]) if HASH in r.column_names else r for r in runs]
    if not cuts:
        return runs, None
    at, i = max(cuts) if desc else min(cuts)
    cut = runs[i].column(column)[(len(values[i]) - n) if desc else n - 1]
    if desc:
        return [r.slice(int(np.searchsorted(v, at, "left"))) for r, v in zip(runs, values)], cut
    return [r.slice(0, int(np.searchsorted(v, at, "right"))) for r, v in zip(runs, values)], cut


def _ordinals(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Integer, date, timestamp or decimal(≤18) values as numbers in the same order."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_decimal128(values.type) and values.type.precision <= 18:  # the unscaled values' low words
        words = np.frombuffer(values.buffers()[1], dtype=np.int64)
        return words[2 * values.offset:2 * (values.offset + len(values)):2]
    if pa.types.is_timestamp(values.type) or pa.types.is_date64(values.type):
        values = values.cast(pa.int64())
    elif pa.types.is_date32(values.type):
        values = values.cast(pa.int32())
    return values.to_numpy(zero_copy_only=False)


def ordinal(value: pa.Scalar) -> int:
    """One value as :func:`_ordinals` numbers it."""
    return int(_ordinals(pa.array([value.as_py()], value.type))[0])


def from_ordinal(n: int, kind: pa.DataType) -> pa.Scalar:
    """The value of ``kind`` (an integer, date or timestamp) that :func:`ordinal` numbers ``n``."""
    return pa.array([n], pa.int32() if pa.types.is_date32(kind) else pa.int64()).cast(kind)[0]


def lowest(kind: pa.DataType) -> pa.Scalar:
    """The least value of ``kind`` (an integer, date or timestamp)."""
    width = pa.int32() if pa.types.is_date32(kind) else kind if pa.types.is_integer(kind) else pa.int64()
    return from_ordinal(int(np.iinfo(width.to_pandas_dtype()).min), kind)


#: a probe of at least this many rows searches the run in hash order (cache-friendly)
SORTED_PROBE = 4096


def candidates(run_hashes: np.ndarray, probe_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(probe row, run row) pairs whose hashes are equal, in a run sorted by hash. A run
    much smaller than the probe (a dimension's arrangement) is looked up in a hash table
    of its distinct hashes; else the run is binary searched, by a large probe in hash
    order: a search of random hashes in a run larger than the caches is 10x slower."""
    n, m = len(probe_hashes), len(run_hashes)
    if m and 4 * m <= n:
        first = np.flatnonzero(np.concatenate(([True], run_hashes[1:] != run_hashes[:-1])))
        found = pc.index_in(pa.array(probe_hashes), value_set=pa.array(run_hashes[first]))
        at = found.fill_null(-1).to_numpy()
        hit = np.flatnonzero(at >= 0)
        if len(first) == m:  # distinct hashes: one run row each
            return hit, at[hit].astype(np.int64)
        return _pairs(hit, first[at[hit]], np.diff(np.append(first, m))[at[hit]])
    order = hash_order(probe_hashes) if n >= SORTED_PROBE else None
    keys = probe_hashes if order is None else probe_hashes[order]
    lo = np.searchsorted(run_hashes, keys, "left")
    hi = np.searchsorted(run_hashes, keys, "right")
    return _pairs(np.arange(n) if order is None else order, lo, hi - lo)


def _pairs(probe_rows: np.ndarray, lo: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(probe row, run row) pairs of probe rows each matching ``counts`` run rows from ``lo`` on."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
    return np.repeat(probe_rows, counts), starts + np.arange(total)


def gather(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table``'s ``rows``, in that order: the table itself when they are all its rows in
    order (a large probe of a dimension, each row matching once), without copying them."""
    if len(rows) == table.num_rows and np.array_equal(rows, np.arange(len(rows))):
        return table
    return table.take(pa.array(rows))


def generate(table: pa.Table, column: str, kind: str, outer: bool) -> pa.Table:
    """The rows a generator makes of each row of ``table`` (Spark's ``explode``,
    ``posexplode`` or ``inline`` of an array or map ``column``): the row's columns, the
    position for ``posexplode``, the element (a map's key and value, a struct's fields
    for ``inline``), then the weight. With ``outer`` a row whose collection is empty or
    NULL gives one row of NULLs. The rows come in no particular order: a Z-set's."""
    values = table.column(column).combine_chunks()
    if pa.types.is_map(values.type):  # a map is a list of its entries
        values = values.cast(pa.list_(pa.struct([values.type.key_field, values.type.item_field])))
    lengths = pc.list_value_length(values).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    parents = np.repeat(np.arange(len(values), dtype=np.int64), lengths)
    flat = pc.list_flatten(values)
    made: list[pa.Array] = []
    if kind == "posexplode":
        starts = np.cumsum(lengths) - lengths
        made.append(pa.array((np.arange(len(flat), dtype=np.int64) - np.repeat(starts, lengths)).astype(np.int32)))
    if pa.types.is_struct(flat.type) and (kind == "inline" or pa.types.is_map(table.schema.field(column).type)):
        made += [pc.struct_field(flat, [i]) for i in range(flat.type.num_fields)]
    else:
        made.append(flat)
    if outer:
        missing = np.flatnonzero(lengths == 0)
        parents = np.concatenate([parents, missing])
        made = [pa.concat_arrays([m, pa.nulls(len(missing), m.type)]) for m in made]
    rows = table.drop_columns([WEIGHT]).take(pa.array(parents))
    names = rows.column_names + [f"_g{i}" for i in range(len(made))] + [WEIGHT]
    return pa.Table.from_arrays([*rows.columns, *made, table.column(WEIGHT).take(pa.array(parents))], names=names)


def keys_equal(left: pa.Table, lkeys: Sequence[str], right: pa.Table, rkeys: Sequence[str],
               null_safe: Sequence[bool]) -> np.ndarray:
    """Row-aligned tables: True where every key pair is equal (NULL equals NULL only
    where ``null_safe``)."""
    ok = np.ones(left.num_rows, bool)
    for a, b, safe in zip(lkeys, rkeys, null_safe):
        x, y = left.column(a), right.column(b)
        if x.type != y.type:
            x = x.cast(y.type)
        if pa.types.is_nested(y.type):  # by identity, Spark's key equality inside too
            same = (identities(x, zero=True) == identities(y, zero=True)).all(axis=1)
            both = pc.and_(pc.is_valid(x), pc.is_valid(y)).to_numpy(zero_copy_only=False)
            nulls = pc.and_(pc.is_null(x), pc.is_null(y)).to_numpy(zero_copy_only=False)
            ok &= (same & both) | (nulls & safe)
            continue
        eq = pc.equal(x, y)  # -0.0 = 0.0, as IEEE and Spark's keys say
        if pa.types.is_floating(y.type):  # NaN = NaN, as Spark's keys say
            eq = pc.or_kleene(eq, pc.and_(pc.is_nan(x), pc.is_nan(y)))
        if safe:
            eq = pc.or_kleene(eq, pc.and_(pc.is_null(x), pc.is_null(y)))
        ok &= pc.fill_null(eq, False).to_numpy(zero_copy_only=False)
    return ok


def _exact_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_decimal(t)


class Midnights:
    """The instant each day starts in one time zone, as Spark casts a DATE to TIMESTAMP
    there (``LocalDate.atStartOfDay``: midnight; the end of a gap in the clock that midnight
    falls in; the earlier of two midnights), in runs of days: the days from ``days[i]`` on
    start ``offsets[i]`` microseconds after their midnight in UTC, up to the next run's
    first day or ``end``, the first day not known."""

    def __init__(self, days: np.ndarray, offsets: np.ndarray, end: int):
        self.days, self.offsets, self.end = days.astype(np.int64), offsets.astype(np.int64), end
        self._firsts = self.days * DAY_MICROS + self.offsets  # the instant each run's first day starts
        self._ends = np.append(self.days[1:], end)
        step = np.diff(self.offsets)  # a run's first day starts a day and this after the day before
        self._ordered = bool(np.all(step >= -DAY_MICROS))  # no day starts before the day before it
        self._shared = self._firsts[1:][step == -DAY_MICROS]  # instants starting two days (a day skipped)

    def starts(self, days: np.ndarray) -> np.ndarray:
        """The instant (microseconds since the epoch) each day (since the epoch) starts."""
        days = days.astype(np.int64)
        if len(days) and (days.min() < self.days[0] or days.max() >= self.end):
            raise UnsupportedKey("a date outside the days whose start in the time zone is known")
        return days * DAY_MICROS + self.offsets[np.searchsorted(self.days, days, "right") - 1]

    def day_starting(self, instants: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per instant (microseconds since the epoch), the day that starts then and whether
        one does (where none does, the day is any)."""
        run = np.searchsorted(self._firsts, instants, "right") - 1
        if not self._ordered or (run < 0).any() or np.isin(instants, self._shared).any():
            raise UnsupportedKey("an instant that may start a day not known, or several")
        day, rest = np.divmod(instants - self.offsets[run], DAY_MICROS)
        if (day >= self.end).any():
            raise UnsupportedKey("an instant that may start a day not known")
        return day, (rest == 0) & (day < self._ends[run])

    def day_of(self, instants: np.ndarray) -> np.ndarray:
        """The day (since the epoch) each instant (microseconds since the epoch) falls on,
        as Spark casts a TIMESTAMP to DATE: the day that started last at or before it."""
        run = np.searchsorted(self._firsts, instants, "right") - 1
        if not self._ordered or (run < 0).any():
            raise UnsupportedKey("an instant on a day not known, or in a zone whose days go back")
        day = np.minimum((instants - self.offsets[run]) // DAY_MICROS, self._ends[run] - 1)
        if (day >= self.end).any():
            raise UnsupportedKey("an instant on a day not known")
        return day


def day_cast(values: pa.Array | pa.ChunkedArray, target: pa.DataType, midnights: Midnights | None) -> pa.Array:
    """A DATE cast to TIMESTAMP (the instant its day starts) or a TIMESTAMP to DATE (the
    day it falls on), as Spark casts them in the session's time zone (``midnights``; None:
    UTC, where a day starts at its midnight); TIMESTAMP_NTZ's days start at midnight in
    every zone. Raises where Spark's answer is not known here (a day out of
    ``midnights``' range, an instant out of TIMESTAMP's)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_date32(values.type):
        days = values.view(pa.int32()).fill_null(0).to_numpy().astype(np.int64)
        if midnights is not None and target.tz is not None:
            starts = midnights.starts(days)
        else:
            starts = pc.multiply_checked(pa.array(days), DAY_MICROS).to_numpy()
        return pa.array(starts, mask=~valid).view(target)
    instants = values.view(pa.int64()).fill_null(0).to_numpy()
    if midnights is not None and values.type.tz is not None:
        found = midnights.day_of(instants)
    else:
        found = instants // DAY_MICROS
    if len(found) and (found.min() < -(2 ** 31) or found.max() >= 2 ** 31):
        raise UnsupportedKey("a day out of DATE's range")
    return pa.array(found.astype(np.int32), mask=~valid).view(pa.date32())


def probes_as(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether keys of type ``source`` can probe keys of type ``target`` by
    :func:`as_probe` (numbers of other types, a DATE and a TIMESTAMP; anything else is
    Spark's to compare)."""
    if source == target or {source, target} == {pa.date32(), INSTANT}:
        return True
    if pa.types.is_floating(target):
        return pa.types.is_floating(source) or pa.types.is_integer(source)
    return _exact_number(target) and (_exact_number(source) or pa.types.is_floating(source) and
                                      pa.types.is_integer(target))


def as_probe(values: pa.Array | pa.ChunkedArray, target: pa.DataType,
             midnights: Callable[[], Midnights] | None = None) -> tuple[pa.Array, np.ndarray]:
    """Key values of one type as keys of type ``target`` (the state's, which they probe),
    and which of them can equal a ``target`` value at all under Spark's comparison, which
    casts both sides to their common type: an INT probing DOUBLE keys is cast as Spark
    casts it; a DECIMAL(12,4) probing DECIMAL(10,2) keys matches only if it has no third
    decimal and fits; a DOUBLE probing BIGINT keys only if it is a whole number; a DATE
    probing TIMESTAMP keys is the instant it starts in the session's time zone
    (``midnights``, asked for only there), a TIMESTAMP probing DATE keys matches only the
    day that starts at it. NULLs stay NULL. Raises :class:`UnsupportedKey` where one probe
    value may equal several keys (a DOUBLE past 2^53 probing BIGINT keys, which Spark
    compares in DOUBLE), or where the day is not known."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    source = values.type
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    if source == target:
        return values, np.ones(len(values), bool)
    if {source, target} == {pa.date32(), INSTANT}:  # Spark casts the DATE to TIMESTAMP
        assert midnights is not None
        if source == pa.date32():
            return day_cast(values, target, midnights()), np.ones(len(values), bool)
        days, starts = midnights().day_starting(values.view(pa.int64()).fill_null(0).to_numpy())
        ok = ~valid | starts
        return pa.array(np.where(ok, days, 0).astype(np.int32), mask=~valid).view(target), ok
    if pa.types.is_floating(target) and pa.types.is_floating(source) and target.bit_width < source.bit_width:
        narrow = values.cast(target, safe=False)
        same = pc.or_kleene(pc.equal(narrow.cast(source), values), pc.is_nan(values))
        return narrow, ~valid | pc.fill_null(same, False).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(target):  # the state's type is the common one: Spark's cast
        return values.cast(target, safe=False), np.ones(len(values), bool)
    if pa.types.is_floating(source):  # whole numbers within the target's range
        x = values.fill_null(0.0).to_numpy(zero_copy_only=False).astype(np.float64)
        info = np.iinfo(target.to_pandas_dtype())
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(x) & (np.floor(x) == x) & (x >= info.min) & (x <= float(info.max))
        if (whole & (np.abs(x) >= 2.0 ** (np.finfo(source.to_pandas_dtype()).nmant + 1))).any():
            raise UnsupportedKey(f"{source} keys past the integers it holds exactly probe {target} keys")
        ints = np.where(whole, x, 0).astype(np.int64)
        return pa.array(ints, pa.int64(), mask=~valid).cast(target, safe=False), ~valid | whole
    # integers and decimals: exactly, in 76 digits at the larger scale
    scale = max(_scale(source), _scale(target))
    wide = values.cast(pa.decimal256(76, scale))
    kept = wide.cast(pa.decimal256(76, _scale(target)), safe=False)
    same = pc.equal(kept.cast(pa.decimal256(76, scale)), wide)
    if pa.types.is_decimal(target):
        bound = pa.scalar(Decimal(10) ** (target.precision - target.scale), kept.type)
        fits = pc.less(pc.abs(kept), bound)
    else:
        info = np.iinfo(target.to_pandas_dtype())
        fits = pc.and_(pc.greater_equal(kept, pa.scalar(Decimal(int(info.min)), kept.type)),
                       pc.less_equal(kept, pa.scalar(Decimal(int(info.max)), kept.type)))
    ok = pc.fill_null(pc.and_(same, fits), False).to_numpy(zero_copy_only=False)
    zero = pa.scalar(Decimal(0), kept.type)  # a value that cannot match: any, in range
    return pc.if_else(pa.array(ok | ~valid), kept, zero).cast(target), ~valid | ok


def _scale(t: pa.DataType) -> int:
    return t.scale if pa.types.is_decimal(t) else 0


def probe(runs: Sequence[pa.Table], probe: pa.Table, probe_keys: Sequence[str], run_keys: Sequence[str],
          null_safe: Sequence[bool], hashes: np.ndarray | None = None,
          subsets: Sequence[np.ndarray | None] | None = None) -> tuple[np.ndarray, pa.Table | None]:
    """Rows of ``runs`` whose keys equal a ``probe`` row's: (the probe row of each match,
    the matching run rows without ``_h``). ``hashes`` are the probe rows' key hashes;
    ``subsets``: per run, the probe rows looked up in it (None: every row)."""
    if hashes is None:
        hashes = key_hash(probe, probe_keys)
    rows: list[np.ndarray] = []
    found: list[pa.Table] = []
    probed = probe.select(list(dict.fromkeys(probe_keys)))  # the key compare gathers keys only
    for n, run in enumerate(runs):
        subset = None if subsets is None else subsets[n]
        if run.num_rows == 0:
            continue
        p, r = candidates(run.column(HASH).to_numpy(), hashes if subset is None else hashes[subset])
        if not len(r):
            continue
        if subset is not None:
            p = subset[p]
        keep = keys_equal(gather(probed, p), probe_keys, run.select(list(dict.fromkeys(run_keys))).take(
            pa.array(r)), run_keys, null_safe) if probe_keys else np.ones(len(p), bool)  # no keys: all match
        rows.append(p[keep])
        found.append(run.drop_columns([HASH]).take(pa.array(r[keep])))  # the matches' rows, gathered once
    if not found:
        return np.zeros(0, np.int64), None
    return np.concatenate(rows), pa.concat_tables(found, promote_options="permissive")


def join(delta: pa.Table, delta_keys: Sequence[str], runs: Sequence[pa.Table], run_keys: Sequence[str],
         null_safe: Sequence[bool], delta_left: bool) -> pa.Table | None:
    """Z-set join of a delta with the rows of ``runs`` (an integral, any number of runs)
    on equal keys: the columns of both sides (the delta's first when ``delta_left``),
    weights multiplied. Rows with a NULL key only match where the pair is ``null_safe``."""
    rows, matched = probe(runs, delta, delta_keys, run_keys, null_safe)
    if matched is None:
        return None
    mine = gather(delta, rows)
    w = pc.multiply_checked(mine.column(WEIGHT), matched.column(WEIGHT))
    a, b = (mine, matched) if delta_left else (matched, mine)
    cols = {c: a.column(c) for c in data_columns(a)}
    cols.update({c: b.column(c) for c in data_columns(b)})
    cols[WEIGHT] = w
    return pa.table(cols)


# --- linear aggregates --------------------------------------------------------------


def partials(delta: pa.Table, keys: Sequence[str], aggs: Sequence[AggCall], schema: pa.Schema) -> pa.Table:
    """Per-group sums of a delta from which every linear aggregate is finalized:
    ``_cnt`` = Σw, and per aggregate Σx·w and Σw over non-NULL x (and a float's counts of
    NaN and infinities), as Spark's ``partials`` computes them, typed as ``schema``; a
    group's DECIMAL sum past 38 digits in several rows that fit (:func:`fitted`)."""
    summands, derived = _summands(delta, aggs)
    table = pa.table({k: delta.column(k) for k in keys} | summands)
    out = _derive(aggregate(table, keys, [(c, "sum") for c in summands]), derived).select(schema.names)
    try:
        return out.cast(schema)
    except pa.ArrowInvalid:  # a DECIMAL sum past 38 digits: in rows that fit
        return fitted(out, keys).cast(schema)


def _summands(delta: pa.Table, aggs: Sequence[AggCall]
              ) -> tuple[dict[str, pa.ChunkedArray], dict[str, str | None]]:
    """Per row, what each partial-sum column of linear ``aggs`` sums: ``_cnt`` = w, and per
    aggregate x·w and w where x is not NULL; for a float's SUM or AVG, x·w of its finite
    values and w where it is NaN, +Infinity, -Infinity. Only distinct columns are given to
    sum; the others are ``derived`` (:func:`_derive`): the sums of a column with the same
    summands (w where x has no NULL; SUM(x) beside AVG(x)), or zero (no NaN or infinity in
    the delta). A group-by is per column, so this is most of a wide aggregate's cost."""
    w = delta.column(WEIGHT)
    zero = pa.scalar(0, pa.int64())
    cols: dict[str, pa.ChunkedArray] = {COUNT: w}
    derived: dict[str, str | None] = {}
    made: dict[tuple, str] = {}

    def put(name: str, key: tuple, make: Callable[[], pa.ChunkedArray]) -> None:
        if key in made:
            derived[name] = made[key]
        else:
            made[key] = name
            cols[name] = make()

    for a in aggs:
        if a.arg is None:
            continue
        names = partial_columns(a)
        x = delta.column(a.arg)
        exact = a.func == "avg" and pa.types.is_integer(x.type)
        if a.func != "count":
            put(names[0], ("times", a.arg, exact), lambda: _times(x, w, a.func))
        if x.null_count == 0:
            derived[names[-1]] = COUNT
        else:
            put(names[-1], ("valid", a.arg), lambda: pc.if_else(pc.is_valid(x), w, zero))
        if a.func != "count" and pa.types.is_floating(x.type):
            tests = (pc.is_nan(x), pc.equal(x, pa.scalar(np.inf, x.type)), pc.equal(x, pa.scalar(-np.inf, x.type)))
            for t, n in zip(tests, nonfinite_columns(a)):
                if not pc.any(t).as_py():
                    derived[n] = None
                else:
                    put(n, (n[len(a.name):], a.arg), lambda: pc.if_else(pc.fill_null(t, False), w, zero))
    return cols, derived


def _derive(out: pa.Table, derived: Mapping[str, str | None]) -> pa.Table:
    """``out``, summed per group, with the ``derived`` columns of :func:`_summands`: a copy
    of the column named, or zero (NULL where the count is: a keyless sum of no rows)."""
    for name, like in derived.items():
        out = out.append_column(name, out.column(like) if like is not None
                                else pc.multiply(out.column(COUNT), pa.scalar(0, out.schema.field(COUNT).type)))
    return out


def _times(x: pa.ChunkedArray, w: pa.ChunkedArray, func: str) -> pa.ChunkedArray:
    """x·w as Spark's ``summand`` sums x for ``func``: integers exactly in decimal(38, 0)
    (for an AVG their DOUBLEs, integers too), floats' finite values in float64, decimals
    exactly."""
    t = x.type
    if pa.types.is_decimal(t):  # in 256 bits: the product's precision may pass 38 before its cast
        return pc.multiply_checked(x.cast(pa.decimal256(t.precision, t.scale)), w.cast(pa.decimal256(20, 0)))
    if pa.types.is_floating(t):
        finite = pc.fill_null(pc.is_finite(x), True)
        return pc.if_else(finite, pc.multiply(x.cast(pa.float64()), w.cast(pa.float64(), safe=False)), 0.0)
    exact = (x.cast(pa.float64(), safe=False) if func == "avg" else x).cast(pa.decimal256(20, 0))
    return pc.multiply_checked(exact, w.cast(pa.decimal256(20, 0))).cast(_EXACT)


def finish(groups: pa.Table, keys: Sequence[str], aggs: Sequence[AggCall], kinds: pa.Schema, *,
           ansi: bool) -> pa.Table | None:
    """Aggregate rows (weight 1) from per-group partial sums, as Spark's ``_finalize``
    computes them; ``kinds`` has the aggregates' argument columns (their types). An
    integer SUM stays in decimal(38, 0), cast to BIGINT by the caller's schema: with
    ``ansi`` on, out of range it raises, and Spark decides (an overflow error); off, it
    wraps around 2^64 as :func:`.zsets.integer_sum`. Groups whose count is 0 are gone
    (unless there are no keys: the one global row always exists). None when an aggregate
    needs Spark to decide (an AVG of a DECIMAL out of range with ``ansi`` on: an error)."""
    count = pc.fill_null(groups.column(COUNT), 0)
    out: dict[str, pa.ChunkedArray] = {k: groups.column(k) for k in keys}
    for a in aggs:
        if a.func == "count":
            out[a.name] = count if a.arg is None else pc.fill_null(groups.column(partial_columns(a)[0]), 0)
            continue
        s, n = (groups.column(c) for c in partial_columns(a))
        live = pc.fill_null(pc.not_equal(n, 0), False)
        if a.func == "sum":
            value = s if ansi or not pa.types.is_integer(kinds.field(a.arg).type) else _wrapped(s)
        elif pa.types.is_decimal(kinds.field(a.arg).type):
            value = decimal_average(s, n, kinds.field(a.arg).type, ansi=ansi)
            if value is None:
                return None
        else:
            value = pc.divide(s.cast(pa.float64()), pc.if_else(live, n, 1).cast(pa.float64()))
        if nonfinite_columns(a)[0] in groups.column_names:
            value = _float_total(value, [groups.column(c) for c in nonfinite_columns(a)])
        out[a.name] = pc.if_else(live, value, pa.scalar(None, value.type))
    out[WEIGHT] = ones(groups.num_rows)
    table = pa.table(out)
    return table.filter(pc.not_equal(count, 0)) if keys else table


#: exact decimal arithmetic: wide enough for any DECIMAL(38) and its roundings
_EXACT_DECIMALS = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)
#: Java's BigDecimal.divide as Spark's Decimal divides: 39 significant digits, HALF_UP
_SPARK_DIVIDE = decimal.Context(prec=39, rounding=decimal.ROUND_HALF_UP)


def quotient_type(p: int, s: int) -> tuple[int, int]:
    """(precision, scale) of Spark SQL's DECIMAL(p, s) / DECIMAL(20, 0) (``DecimalPrecision``:
    the scale max(6, s + 21), and when that passes 38 digits, 38 digits with the scale cut
    to fit the integer digits but to no fewer than 6)."""
    scale = max(6, s + 21)
    if p - s + scale <= 38:
        return p - s + scale, scale
    return 38, max(38 - (p - s), min(scale, 6))


def average_types(precision: int, scale: int) -> tuple[int, int, int]:
    """Spark's ``Average`` of DECIMAL(precision, scale): the precision of its sum (at the
    argument's scale), and its result's precision and scale, each bounded at 38 digits."""
    return min(38, precision + 10), min(38, precision + 4), min(38, scale + 4)


def _fits(v: Decimal, precision: int, scale: int) -> bool:
    return v.copy_abs() < Decimal(10) ** (precision - scale)


def _rounded(v: Decimal, scale: int) -> Decimal:
    return v.quantize(Decimal(1).scaleb(-scale), context=_EXACT_DECIMALS)


def decimal_average(total: pa.ChunkedArray, n: pa.ChunkedArray, kind: pa.Decimal128Type, *,
                    ansi: bool) -> pa.Array | None:
    """AVG of DECIMAL(p, s) values from their exact sum and count, as Spark's ``Average``
    finishes it (:func:`.zsets.average`): the sum as DECIMAL(p + 10, s), divided by the
    count (39 significant digits, then the quotient's scale, each HALF_UP), then cast to
    DECIMAL(p + 4, s + 4), each bounded at 38 digits; a sum that would be divided at fewer
    decimals than the result's is divided as DECIMAL(38, s + 4) when it fits. A value out
    of a type's range is NULL; with ``ansi`` on Spark raises there, so None is returned
    (and Spark computes it). NULL where the count is 0. Per group, in Python's exact
    decimals: a group's one division, not a row's."""
    sc = kind.scale
    p, precision, scale = average_types(kind.precision, sc)
    if not pa.types.is_decimal(total.type) or total.type.scale != sc:
        return None
    out: list[Decimal | None] = []
    for t, count in zip(total.to_pylist(), n.to_pylist()):
        value = None
        if t is not None and count:
            if _fits(t, p, sc):
                qp, q = quotient_type(p, sc)
                if q < scale and _fits(t, 38, scale):
                    qp, q = quotient_type(38, scale)
                quotient = _rounded(_SPARK_DIVIDE.divide(t, Decimal(count)), q)
                result = _rounded(quotient, scale)
                if _fits(quotient, qp, q) and _fits(result, precision, scale):
                    value = result
            if value is None and ansi:
                return None
        out.append(value)
    return pa.array(out, pa.decimal128(precision, scale))


def _wrapped(total: pa.ChunkedArray) -> pa.ChunkedArray:
    """An exact integer sum (decimal(38, 0)) as Java's long addition leaves it: its low
    64 bits, which a decimal128 holds as the first word of its two's complement."""
    exact = total.combine_chunks()
    assert exact.type == _EXACT
    low = decimal_words(exact)[:, 0]
    return pa.chunked_array([pa.array(low, pa.int64(), mask=exact.is_null().to_numpy(zero_copy_only=False))])


def _float_total(finite: pa.ChunkedArray, counts: Sequence[pa.ChunkedArray]) -> pa.ChunkedArray:
    """As :func:`.zsets.float_total`: NaN if a NaN is there or both infinities are, else the
    infinity that is, else the sum of the finite values."""
    nan, pinf, ninf = (pc.fill_null(pc.greater(c, 0), False) for c in counts)
    kind = finite.type
    out = pc.if_else(ninf, pa.scalar(-np.inf, kind), finite)
    out = pc.if_else(pinf, pa.scalar(np.inf, kind), out)
    return pc.if_else(pc.or_(nan, pc.and_(pinf, ninf)), pa.scalar(np.nan, kind), out)


# --- per-group recompute ------------------------------------------------------------

_HASH_AGG = {"min": "min", "max": "max", "count": "count_distinct"}


def regroups(aggs: Sequence[AggCall]) -> bool:
    """Whether :func:`regroup` computes ``aggs`` (then a None of it is of the rows'
    values: Spark decides an overflow)."""
    return all(a.linear or a.func in MOMENTS or a.func in _HASH_AGG or a.func in _ONCE for a in aggs)


#: aggregates of DISTINCT values that :func:`regroup` sums as linear ones over each
#: group's first row of each value (:func:`_once`)
_ONCE = ("sum", "avg")


def _once(live: pa.Table, keys: Sequence[str], arg: str) -> pa.ChunkedArray:
    """``arg``'s values where the row is the first of its group with that value, NULL in
    the others: the distinct values SUM(DISTINCT) and AVG(DISTINCT) take, as Spark makes
    them distinct (every NaN one value, -0.0 as 0.0, and normalized so)."""
    x = normal_float(live.column(arg))
    pairs = pa.table({**{k: live.column(k) for k in keys}, _ONCE_VALUE: x,
                      _ONCE_ROW: pa.array(np.arange(live.num_rows, dtype=np.int64))})
    first = aggregate(pairs, [*keys, _ONCE_VALUE], [(_ONCE_ROW, "min")]).column(_ONCE_ROW).to_numpy()
    mask = np.zeros(live.num_rows, dtype=bool)
    mask[first] = True
    return pc.if_else(pa.array(mask), x, pa.nulls(live.num_rows, x.type))


_ONCE_VALUE, _ONCE_ROW = "__value", "__row"


def regroup(rows: pa.Table, keys: Sequence[str], aggs: Sequence[AggCall], schema: pa.Schema, *,
            ansi: bool, legacy_stats: bool = False) -> pa.Table | None:
    """The aggregate row (weight 1) of every group in ``rows``, a consolidated Z-set in
    which a row of weight w counts w times, typed as ``schema``. Linear aggregates are
    finished from their partial sums as :func:`finish` does; MIN, MAX and
    COUNT(DISTINCT) are Arrow's hash aggregates; MAX of floats is NaN where the group has
    one, as Spark orders NaN above every number (Arrow skips NaN unless all are: its MIN
    is Spark's); variances and standard deviations by :func:`_moments` over each group's
    values; SUM/AVG(DISTINCT) as linear ones over each group's distinct values
    (:func:`_once`). None when Spark's own semantics decide: with ANSI on, an AVG of a
    DECIMAL out of range, a sum out of its type's. ``legacy_stats``: Spark's
    ``spark.sql.legacy.statisticalAggregate`` (a sample's moment of one value NaN)."""
    live = rows.filter(pc.greater(rows.column(WEIGHT), 0))
    linear = [a for a in aggs if a.linear]
    summands, derived = _summands(live, linear)
    cols: dict[str, pa.ChunkedArray] = {k: live.column(k) for k in keys} | summands
    # SUM/AVG(DISTINCT x): linear over a column of each group's distinct values, each once
    distinct = [a for a in aggs if a.distinct and a.func in _ONCE]
    if distinct:
        once = [AggCall(a.name, a.func, f"__once_{a.name}") for a in distinct]
        firsts = {c.arg: _once(live, keys, a.arg) for c, a in zip(once, distinct) if c.arg and a.arg}
        ones = pa.chunked_array([pa.array(np.ones(live.num_rows, np.int64))])
        more, also = _summands(pa.table({**firsts, WEIGHT: ones}), once)
        more.pop(COUNT)
        for c in once:  # the count of distinct values, not of the group's rows (nor their weights)
            valid = partial_columns(c)[-1]
            if also.get(valid) == COUNT:
                also.pop(valid)
                more[valid] = ones
        cols |= more
        summands |= more
        derived |= also
        linear += once
        for name, column in firsts.items():
            live = live.append_column(name, column)
    specs: list[tuple] = [(c, "sum") for c in summands]
    for a in aggs:
        if a.linear or a.distinct and a.func in _ONCE:
            continue
        assert a.arg is not None
        x = live.column(a.arg)
        if a.func in MOMENTS:  # each group's values as a list (its weights' list beside, in the same order)
            cols[a.name] = as_double(x)
            if keys:
                specs.append((a.name, "list"))
            continue
        if a.func not in _HASH_AGG:
            return None
        cols[a.name] = x
        specs.append((a.name, _HASH_AGG[a.func], pc.CountOptions("only_valid")) if a.func == "count"
                     else (a.name, _HASH_AGG[a.func]))
        if a.func == "max" and pa.types.is_floating(x.type):
            cols[_nan(a.name)] = pc.fill_null(pc.is_nan(x), False)
            specs.append((_nan(a.name), "any"))
    if any(a.func in MOMENTS for a in aggs):
        cols[_WEIGHTS] = live.column(WEIGHT)
        if keys:
            specs.append((_WEIGHTS, "list"))
    out = _derive(aggregate(normal_keys(pa.table(cols), [a.name for a in aggs if a.func == "count" and not a.linear]),
                            keys, specs), derived)
    done = finish(out, keys, linear, live.schema, ansi=ansi)
    if done is None:
        return None
    def listed(column: str) -> pa.ChunkedArray:  # a group's values as a list (without keys, the one group's)
        if keys:
            return out.column(column)
        return pa.chunked_array([pa.ListArray.from_arrays(pa.array([0, len(cols[column])], pa.int32()),
                                                          cols[column].combine_chunks())])

    values = {a.name: (done.column(a.name) if a.linear or a.distinct and a.func in _ONCE
                       else _moments(listed(a.name), listed(_WEIGHTS), a.func, legacy_stats)
                       if a.func in MOMENTS else out.column(a.name)) for a in aggs}
    for name in values:
        if _nan(name) in out.column_names:
            column = values[name]
            values[name] = pc.if_else(out.column(_nan(name)), pa.scalar(math.nan, column.type), column)
    table = pa.table({k: done.column(k) for k in keys} | values | {WEIGHT: done.column(WEIGHT)})
    try:
        return table.cast(schema)
    except pa.ArrowInvalid:  # an exact sum out of its type's range: with ANSI on, Spark's error
        if ansi:
            return None
        raise


def as_double(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Values as DOUBLE as Spark casts them: a DECIMAL to the double nearest its value
    (Java's ``BigDecimal.doubleValue``; Arrow's cast multiplies by an inexact power of
    ten and is an ulp off for about one value in eight): its unscaled integer, exact in
    a double below 2^53, divided by the exact power of ten (one rounding, IEEE's), and
    a wider one by Python's own correctly rounded conversion. Integers round to nearest."""
    kind = values.type
    if not isinstance(kind, pa.Decimal128Type):
        return pc.cast(values, pa.float64(), safe=False)
    arr = values.combine_chunks()
    words = decimal_words(arr)
    low, high = words[:, 0], words[:, 1]
    small = (high == (low >> 63)) & (np.abs(low) < (1 << 53))
    out = low.astype(np.float64) / 10.0 ** kind.scale if kind.scale <= 22 else np.zeros(len(arr))
    wide = np.flatnonzero(~small | (kind.scale > 22))
    if len(wide):
        out[wide] = [float(v) if v is not None else 0.0 for v in arr.take(pa.array(wide)).to_pylist()]
    return pa.chunked_array([pa.array(out, pa.float64(), mask=arr.is_null().to_numpy(zero_copy_only=False))])


#: the column of each group's weights beside its values' lists (:func:`_moments`)
_WEIGHTS = "__weights"


def _moments(values: pa.ChunkedArray, weights: pa.ChunkedArray, func: str, legacy: bool = False) -> pa.Array:
    """Per group (a list of DOUBLE values, NULLs skipped, and their weights) one of
    Spark's central-moment aggregates: the variance of the sample (``var_samp``) or the
    population (``var_pop``), or its square root. The central moment is the corrected
    two-pass sum about the group's mean (Chan, Golub and LeVeque; Spark updates it a row
    at a time: equal up to rounding, and both exactly 0 for a group of one finite value
    repeated); NaN or an infinity among the values gives NaN, as in Spark. NULL over no
    values, and a sample's over one (Spark's default; NaN with ``legacy``, as with
    ``spark.sql.legacy.statisticalAggregate``)."""
    lists, weight_lists = values.combine_chunks(), weights.combine_chunks()
    groups = len(lists)
    ids = pc.list_parent_indices(lists).to_numpy()
    flat = pc.list_flatten(lists)
    valid = flat.is_valid().to_numpy(zero_copy_only=False)
    x = np.where(valid, flat.fill_null(0.0).to_numpy(zero_copy_only=False), 0.0)
    w = np.where(valid, pc.list_flatten(weight_lists).to_numpy(zero_copy_only=False), 0).astype(np.float64)
    n = np.bincount(ids, weights=w, minlength=groups)
    with np.errstate(all="ignore"):
        mean = np.bincount(ids, weights=np.where(valid, w * x, 0.0), minlength=groups) / n
        d = x - mean[ids]
        # the corrected two-pass sum: less the square of the deviations' own sum, the error
        # of a mean rounded to a double (1e15, 1e15, 1e15 + 2: 8/3, not 2.67)
        off = np.bincount(ids, weights=np.where(valid, w * d, 0.0), minlength=groups)
        squares = np.bincount(ids, weights=np.where(valid, w * d * d, 0.0), minlength=groups)
        # deviations whose squares overflow: the moment is infinite, as Spark's (not inf - inf)
        m2 = np.where(np.isinf(squares), squares, squares - off * off / n)
        offsets = lists.offsets.to_numpy()
        starts = offsets[:-1] - offsets[0]  # into the flattened values (a sliced list array's start at 0)
        # (every list holds a row but the one group of no rows, without keys)
        low = np.minimum.reduceat(np.where(valid, x, np.inf), starts) if len(x) else np.full(groups, np.inf)
        high = np.maximum.reduceat(np.where(valid, x, -np.inf), starts) if len(x) else np.full(groups, -np.inf)
        m2 = np.where((low == high) & np.isfinite(low), 0.0, m2)
    return moment(func, m2, n, legacy)


def moment(func: str, m2: np.ndarray, n: np.ndarray, legacy: bool = False) -> pa.Array:
    """One of Spark's central-moment aggregates (:data:`.MOMENTS`) from each group's (or
    frame's) central moment ``m2`` over ``n`` values: the variance of the sample or the
    population, or its square root. NULL over no values and a sample's over one (NaN with
    ``legacy``: ``spark.sql.legacy.statisticalAggregate``)."""
    sample = func.endswith("_samp")
    with np.errstate(all="ignore"):
        var = m2 / (n - 1 if sample else n)
        out = np.sqrt(var) if func.startswith("stddev") else var
    if legacy and sample:
        out = np.where(n == 1, np.nan, out)
    return pa.array(out, pa.float64(), mask=n <= (1 if sample and not legacy else 0))


def _nan(name: str) -> str:
    """The column telling whether a float MAX's group holds a NaN."""
    return f"__nan_{name}"


def expand(table: pa.Table) -> pa.Table:
    """A consolidated Z-set as the bag it stands for: a row per unit of positive weight
    (without the weight column)."""
    w = table.column(WEIGHT).to_numpy()
    live = np.flatnonzero(w > 0)
    return table.select(data_columns(table)).take(pa.array(np.repeat(live, w[live])))
