"""Window functions over a partition's ordered rows, as Arrow/numpy functions (no Spark).

A window's touched partitions are read whole (their stored rows and this tick's) and
computed here again: :func:`partitioned` sorts rows as Spark partitions and orders them
(NULLs where asked, NaN above every number, -0.0 with 0.0); :func:`ranks` computes each
:class:`Ordered` function over them (rankings, another row's value, NTILE, aggregates over
a frame: :func:`running`); :func:`totals` gives every row its whole partition's aggregates
as :func:`.kernels.regroup` gives a group's. Each is held to a Python model of Spark's
answer in ``tests/fast/test_kernels.py`` and to Spark itself by the twin harness.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...circuit.operators import MOMENTS, WEIGHT, AggCall
from .kernels import as_double, data_columns, decimal_average, decimal_words, moment, normal_float, regroup


#: the ranking window functions :func:`ranks` computes, and those that read a value of
#: another row of the partition (with the default frame)
RANKINGS = frozenset({"row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile"})
VALUES = frozenset({"lag", "lead", "first_value", "last_value", "nth_value"})
WHOLE = frozenset({"first_value", "last_value", "nth_value"})  # also over a frame of the whole partition
#: the aggregates :func:`ranks` computes over a frame of ordered rows: the partition up to
#: the current row's last peer (the default frame with ORDER BY), or a ROWS frame
RUNNING = frozenset({"sum", "count", "avg", "min", "max"}) | MOMENTS
#: float sums and moments over a bounded frame are one pass over the rows per row of the
#: frame (each frame summed anew, as Spark sums it): :func:`running` computes them for
#: frames of up to ``SLIDING_WIDTH`` rows, and wider ones while rows times width stays
#: within ``SLIDING_WORK`` (about a second of numpy); Spark computes the rest
SLIDING_WIDTH = 128
SLIDING_WORK = 1 << 28


@dataclass(frozen=True)
class Ordered:
    """A window function over ordered rows (:data:`RANKINGS`, :data:`VALUES`,
    :data:`RUNNING`) as column ``name``; a value function reads column ``arg``: LAG/LEAD
    ``offset`` rows back or ahead (``default`` outside the partition), NTH_VALUE the
    ``offset``-th row; ``whole``: FIRST_VALUE, LAST_VALUE or NTH_VALUE over the whole
    partition, not the default frame; ``ignore_nulls``: those three read the frame's
    rows whose ``arg`` is not NULL, LAG and LEAD count only such rows back or ahead.
    NTILE splits the partition into ``offset`` buckets. An aggregate reads ``arg`` (None:
    COUNT(*)) up to the current row's last peer, or where ``rows`` over a ROWS frame: from ``start`` rows
    after the current one (negative: before it; None: the partition's first row) to
    ``stop`` rows after it (None: the partition's last row); where ``by_value`` too, a
    RANGE frame of offsets: the rows whose value of the one ORDER BY column is from
    ``start`` to ``stop`` after the current row's in the order's direction (in the
    column's units: unscaled decimals, days, microseconds)."""

    name: str
    func: str
    arg: str | None = None
    offset: int = 1
    default: pa.Scalar | None = None
    whole: bool = False
    rows: bool = False
    start: int | float | None = None
    stop: int | float | None = 0
    ignore_nulls: bool = False
    by_value: bool = False


def ranks(bag: pa.Table, partition: Sequence[str], order: Sequence[tuple[str, bool, bool]],
          funcs: Sequence[Ordered], *, ansi: bool = True, legacy_stats: bool = False) -> pa.Table | None:
    """``bag`` with window functions ``OVER (PARTITION BY partition ORDER BY order)``, one
    column per :class:`Ordered`, as Spark computes them over the rows ordered by
    :func:`partitioned`; ``order`` is (column, descending, nulls first) per term. Rows are
    peers where every term is equal as Spark's ordering compares: NULL with NULL, NaN with
    NaN, -0.0 with 0.0. ROW_NUMBER, RANK and DENSE_RANK are INT; PERCENT_RANK is (rank - 1)
    / (rows - 1) (0 for one row) and CUME_DIST the rows up to the last peer over the rows,
    as DOUBLE. The value functions read their row's value of ``arg`` with the default
    frame (the partition up to the last peer), or the whole partition where
    :attr:`Ordered.whole`: FIRST_VALUE the partition's first row, LAST_VALUE the frame's
    last, NTH_VALUE the n-th row where it is not past the frame's last (else NULL); LAG and
    LEAD the row ``offset`` back or ahead in the partition, else ``default``. Running
    aggregates are :func:`running`'s; None where one of them leaves it to Spark."""
    sorted_, part_start, terms = partitioned(bag, partition, order)
    n = sorted_.num_rows
    idx = np.arange(n)
    first = np.maximum.accumulate(np.where(part_start, idx, 0))
    last = np.flatnonzero(np.append(part_start[1:], True))[np.cumsum(part_start) - 1] if n else idx
    out = sorted_.select(bag.column_names)
    if any(f.func in RANKINGS - {"row_number", "ntile"} or f.func in WHOLE and not f.whole
           and (f.ignore_nulls or f.func != "first_value") or f.func in RUNNING and not f.rows for f in funcs):
        peer_start = part_start | _starts(sorted_, terms)
        rank = np.maximum.accumulate(np.where(peer_start, idx, 0)) - first + 1
        size = last - first + 1
        peer_end = np.flatnonzero(np.append(peer_start[1:], True))[np.cumsum(peer_start) - 1] if n else idx
    for f in funcs:
        if f.func == "row_number":
            value = pa.array(idx - first + 1, pa.int32())
        elif f.func == "rank":
            value = pa.array(rank, pa.int32())
        elif f.func == "dense_rank":
            dense = np.cumsum(peer_start)
            value = pa.array(dense - dense[first] + 1, pa.int32())
        elif f.func == "percent_rank":
            with np.errstate(invalid="ignore", divide="ignore"):
                value = pa.array(np.where(size > 1, (rank - 1) / np.maximum(size - 1, 1), 0.0), pa.float64())
        elif f.func == "cume_dist":
            value = pa.array((peer_end - first + 1) / size, pa.float64())
        elif f.func == "ntile":
            value = pa.array(_ntile(idx - first, last - first + 1, f.offset), pa.int32())
        elif f.func in VALUES:
            assert f.arg is not None
            column = sorted_.column(f.arg)
            peers = f.func in WHOLE and not f.whole and (f.ignore_nulls or f.func != "first_value")
            end = peer_end if peers else last  # the frame's last row
            if f.ignore_nulls:
                at = _non_null_row(f.func, pc.is_valid(column).to_numpy(zero_copy_only=False), first, end, f.offset)
            else:
                at = {"lag": idx - f.offset, "lead": idx + f.offset, "first_value": first, "last_value": end,
                      "nth_value": first + f.offset - 1}[f.func]
            inside = (at >= first) & (at <= (end if f.func in WHOLE else last))
            value = column.take(pa.array(np.where(inside, at, 0) if n else at))
            if not inside.all():
                default = f.default if f.default is not None else pa.scalar(None, column.type)
                value = pc.if_else(pa.array(inside), value, default)
        elif f.func in RUNNING:
            if f.by_value:
                bounds = _value_frame(sorted_.column(order[0][0]), order[0][1], f.start, f.stop, first, last)
                if bounds is None:
                    return None
                begin, stop = bounds
            else:
                begin = None if not f.rows or f.start is None else np.clip(idx + int(f.start), first, last + 1)
                stop = (peer_end if not f.rows else last if f.stop is None
                        else np.minimum(idx + int(f.stop), last))
            found = running(f.func, None if f.arg is None else sorted_.column(f.arg), part_start, begin, stop,
                            ansi=ansi, legacy_stats=legacy_stats)
            if found is None:
                return None
            value = found
        else:
            raise ValueError(f"no window function {f.func!r}")
        out = out.append_column(f.name, value)
    return out


def _value_frame(column: pa.ChunkedArray, desc: bool, start: int | float | None, stop: int | float | None,
                 first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray | None, np.ndarray] | None:
    """Per row, the first and last rows of a RANGE frame of offsets over rows sorted by
    ``column`` within each partition (``first``, ``last``): the rows whose value is from
    ``start`` to ``stop`` past the row's own in the order's direction (None: the
    partition's first, its last row), as Spark's range bounds add the offset to the
    current row's value and compare rows with them by the order. A NULL or NaN plus an
    offset is itself, so such a row's bounded side ends at its own block (its peers), and
    a number's bounded side never reaches a NULL or a NaN (they sort apart from every
    number). The first is None for a frame from the partition's first row. None where
    Spark decides: a bound past the values' type."""
    kind = column.type
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(kind):
        v = pc.fill_null(column, 0.0).to_numpy().astype(np.float64)
        special = ~valid | np.isnan(v)
        v = np.where(special, 0.0, v)
    else:
        filled = pc.fill_null(column, pa.scalar(0, kind) if not pa.types.is_decimal(kind) else
                              pa.scalar(Decimal(0), kind)) if column.null_count else column
        raw = (_unscaled(filled) if pa.types.is_decimal(kind)
               else filled.cast(pa.int32()).to_numpy().astype(np.int64) if pa.types.is_date32(kind)
               else filled.cast(pa.int64()).to_numpy() if pa.types.is_integer(kind) or pa.types.is_timestamp(kind)
               else None)
        if raw is None or raw.dtype == object:
            return None
        if len(raw) and float(np.abs(raw.astype(np.float64)).max()) + max(abs(start or 0), abs(stop or 0)) >= 2.0 ** 62:
            return None
        special = ~valid
        v = raw
    n = len(v)
    idx = np.arange(n)
    # runs of one kind (numbers, NULLs, NaNs) within each partition: each contiguous in the order
    kind_of = np.where(~valid, 1, np.where(special, 2, 0))
    run_start = np.ones(n, bool)
    run_start[1:] = (kind_of[1:] != kind_of[:-1]) | (first[1:] == idx[1:])
    run_first = np.maximum.accumulate(np.where(run_start, idx, 0)) if n else idx
    run_last = (np.flatnonzero(np.append(run_start[1:], True))[np.cumsum(run_start) - 1]) if n else idx
    w = -v if desc else v  # increasing within a run of numbers, in the order's direction
    begin = None if start is None else np.where(
        special, run_first, _search(w, w + start, run_first, run_last + 1, right=False))
    end = last if stop is None else np.where(
        special, run_last, _search(w, w + stop, run_first, run_last + 1, right=True) - 1)
    return begin, end


def _search(sorted_: np.ndarray, target: np.ndarray, lo: np.ndarray, hi: np.ndarray, *, right: bool) -> np.ndarray:
    """Per row, a binary search of ``target`` in ``sorted_[lo:hi]`` (ascending there): the
    first index whose value is at least (``right``: past) the target."""
    lo, hi = lo.copy(), hi.copy()
    n = len(sorted_)
    while n and (lo < hi).any():
        mid = (lo + hi) // 2
        at = sorted_[np.minimum(mid, n - 1)]
        below = (at <= target) if right else (at < target)
        active = lo < hi
        lo = np.where(active & below, mid + 1, lo)
        hi = np.where(active & ~below, mid, hi)
    return lo


def _ntile(row: np.ndarray, size: np.ndarray, buckets: int) -> np.ndarray:
    """NTILE(buckets) of each row (its 0-based place ``row`` in a partition of ``size``
    rows), as Spark's: the partition cut into ``buckets`` runs in order, the first
    ``size % buckets`` of them one row longer."""
    per, longer = size // buckets, size % buckets
    head = longer * (per + 1)  # the rows in the longer buckets
    return np.where(row < head, row // np.maximum(per + 1, 1), longer + (row - head) // np.maximum(per, 1)) + 1


def _non_null_row(func: str, valid: np.ndarray, first: np.ndarray, end: np.ndarray, nth: int) -> np.ndarray:
    """The row FIRST_VALUE, LAST_VALUE or NTH_VALUE (the ``nth``) IGNORE NULLS reads in
    each row's frame (its partition's rows from ``first`` to ``end``): the first, last or
    ``nth`` row whose value is not NULL; LAG (LEAD) the ``nth`` such row before (after) the
    current one in its partition (``end``: the partition's last row); a row outside the
    frame where there is none."""
    n = len(valid)
    idx = np.arange(n)
    if func == "last_value":
        return np.maximum.accumulate(np.where(valid, idx, -1))[end] if n else idx
    rows = np.flatnonzero(valid)  # the rows with a value, in order: the n-th such row is rows[n]

    def nth_row(want: np.ndarray, found: np.ndarray, outside: int) -> np.ndarray:
        return np.where(found, rows[np.clip(want, 0, len(rows) - 1)], outside) if len(rows) else np.full(n, outside)

    if func == "lag":  # the values before the row, back to the partition's first
        want = np.searchsorted(rows, idx) - nth
        return nth_row(want, want >= np.searchsorted(rows, first), -1)
    if func == "lead":
        want = np.searchsorted(rows, idx, side="right") + nth - 1
    else:  # from the first value in the partition
        want = np.searchsorted(rows, first) + (0 if func == "first_value" else nth - 1)
    return nth_row(want, want < len(rows), n)


#: a partition longer than this has its running float sum summed alone; shorter ones
#: are summed side by side, a row of each at a time
_LONG_PARTITION = 512


def running(func: str, x: pa.ChunkedArray | None, part_start: np.ndarray, start: np.ndarray | None,
            end: np.ndarray, *, ansi: bool, legacy_stats: bool = False) -> pa.Array | None:
    """An aggregate over a frame of ordered rows, as Spark's window computes it: per row of
    rows sorted by partition (``part_start``: whether a row starts one), ``func`` of ``x``
    (None: COUNT(*)) over the partition's rows from row ``start`` (None: the partition's
    first, a running frame) to row ``end``, both within the row's partition (a frame
    whose end is before its start is empty).

    COUNT is BIGINT; SUM of integers BIGINT and of DECIMAL(p, s) DECIMAL(p + 10, s), exact;
    SUM of floats and AVG of integers and floats DOUBLE, added in the rows' order one at a
    time from 0.0 as Spark's buffer adds (NaN and the infinities as IEEE adds them, so a
    frame's last bits can differ from Spark's only in the order of peers, which Spark does
    not fix either; a bounded frame's from its first row, as Spark sums each frame anew);
    AVG of a DECIMAL as :func:`decimal_average` finishes it; MIN and MAX the first row of
    the frame holding the smallest (largest) value as Spark orders values (NaN above every
    number, -0.0 equal to 0.0), of the argument's type; the variances and deviations
    (:data:`.MOMENTS`) of the values as DOUBLE (:func:`.as_double`) by Welford's update a
    row at a time, as Spark's buffer updates it (:func:`_welford`: the same bits). NULLs
    are skipped; a frame without a value is NULL (COUNT 0), a sample's of one value too.
    None where Spark's semantics decide: a sum that leaves its type at any row (an error
    under ANSI, a wrap or a NULL without; for a bounded frame, a sum whose values'
    magnitudes could), a bounded frame wider than :data:`SLIDING_WIDTH` whose rows times
    width pass :data:`SLIDING_WORK` for float sums and moments, a type not handled here."""
    n = len(part_start)
    idx = np.arange(n)
    first = np.maximum.accumulate(np.where(part_start, idx, 0)) if n else idx
    lo = first if start is None else start
    end = np.maximum(end, lo - 1)  # an empty frame ends just before it starts
    if x is None:
        return pa.array(end - lo + 1, pa.int64())
    valid = pc.is_valid(x).to_numpy(zero_copy_only=False)
    seen = _framed_sums(valid.astype(np.int64), lo, end)
    if func == "count":
        return pa.array(seen, pa.int64())
    none = pa.array(seen == 0)
    kind = x.type
    width = None if start is None or not n else int((end - start).max()) + 1
    summed = pa.types.is_floating(kind) and func not in ("min", "max") or func in MOMENTS or (
        func == "avg" and pa.types.is_integer(kind))
    if summed and width is not None and width > SLIDING_WIDTH and n * width > SLIDING_WORK:
        return None
    if func in MOMENTS:
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)):
            return None
        values = pc.fill_null(as_double(x), 0.0).to_numpy(zero_copy_only=False)
        m2 = (_welford(values, valid, part_start)[end] if start is None
              else _sliding_welford(values, valid, start, end, width or 0))
        return moment(func, m2, seen, legacy_stats)
    if func in ("min", "max"):
        if pa.types.is_nested(kind) or pa.types.is_dictionary(kind):
            return None
        rows = (_extreme_rows(x, func == "max", part_start, end) if start is None
                else _sliding_extreme_rows(x, func == "max", start, end))
        return pc.if_else(none, pa.scalar(None, kind), x.take(pa.array(np.maximum(rows, 0))))
    if pa.types.is_floating(kind) or func == "avg" and pa.types.is_integer(kind):
        values = pc.fill_null(x.cast(pa.float64(), safe=False), 0.0).to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore", over="ignore"):  # IEEE's NaN and infinities, as Spark's
            total = (_sequential_sums(values, part_start)[end] if start is None
                     else _sliding_sums(values, start, end, width or 0)) + 0.0  # from 0.0 as Spark: never -0.0
            if func == "avg":
                total = total / np.maximum(seen, 1)
        return pc.if_else(none, pa.scalar(None, pa.float64()), pa.array(total, pa.float64()))
    if not (pa.types.is_integer(kind) or pa.types.is_decimal(kind)):
        return None
    unscaled = _unscaled(pc.fill_null(x, 0))
    if unscaled is None:
        return None
    sums = _exact_framed(unscaled, lo, end, every=ansi or pa.types.is_decimal(kind), running=start is None)
    if sums is None:
        return None
    if pa.types.is_integer(kind):
        bound = 1 << 63
        if ansi and not _within(sums.all, -bound, bound - 1):
            return None
        out = pa.array(_wrapped_ints(sums.at) if sums.at.dtype == object else sums.at, pa.int64())
        return pc.if_else(none, pa.scalar(None, pa.int64()), out)
    precision, scale = (min(38, kind.precision + 10), kind.scale) if func == "sum" else (38, kind.scale)
    if not _within(sums.all, -10 ** precision + 1, 10 ** precision - 1):
        return None
    totals = _decimals(sums.at, precision, scale)
    if func == "sum":
        return pc.if_else(none, pa.scalar(None, totals.type), totals)
    return decimal_average(pa.chunked_array([totals]), pa.chunked_array([pa.array(seen, pa.int64())]), kind,
                           ansi=ansi)


@dataclass(frozen=True)
class _Framed:
    """Exact sums over running frames: at each frame's end (``at``) and at every row of
    each partition (``all``: what a buffer adding one row at a time holds)."""

    at: np.ndarray
    all: np.ndarray


def _framed_sums(values: np.ndarray, first: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per row, the sum of int64 ``values`` from its partition's first row to row ``end``
    (counts: no sum of them leaves int64)."""
    total = np.concatenate([[0], np.cumsum(values)])
    return total[end + 1] - total[first]


def _exact_framed(values: np.ndarray, first: np.ndarray, end: np.ndarray, *, every: bool,
                  running: bool = True) -> _Framed | None:
    """:class:`_Framed` sums of integers (int64, or Python ints as objects) over frames
    from ``first`` to ``end``, exact: in int64 when no sum of absolute values can leave it,
    else as Python ints. ``every``: the sums at every row are wanted too (to check that
    none leaves the result's type): of a ``running`` frame, at each row of its partition;
    of another, None unless no sum of its values can leave int64 (then its frames' sums
    are every sum its buffer holds, as far as a range check goes)."""
    n = len(values)
    idx = np.arange(n)
    if values.dtype != object and (not n or float(np.abs(values.astype(np.float64)).sum()) < 2.0 ** 62):
        at = _framed_sums(values, first, end)
        return _Framed(at, _framed_sums(values, first, idx) if every and running else at)
    if not running:
        return None
    exact = values.astype(object)
    total = np.concatenate([np.array([0], dtype=object), np.cumsum(exact)])
    return _Framed(total[end + 1] - total[first], total[idx + 1] - total[first] if every else total[end + 1])


def _wrapped_ints(values: np.ndarray) -> np.ndarray:
    """Python ints as Java's long addition leaves their sum: the low 64 bits, signed."""
    return np.array([((int(v) + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63) for v in values], np.int64)


def _within(values: np.ndarray, low: int, high: int) -> bool:
    return not len(values) or bool(low <= values.min() and values.max() <= high)


def _unscaled(x: pa.ChunkedArray) -> np.ndarray | None:
    """Integers as int64, decimals as their unscaled integers (int64 where every one fits,
    else Python ints); None for a decimal wider than 128 bits."""
    if pa.types.is_integer(x.type):
        return x.cast(pa.int64()).to_numpy()
    if not isinstance(x.type, pa.Decimal128Type):
        return None
    words = decimal_words(x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x)
    low, high = words[:, 0], words[:, 1]
    if (high == (low >> 63)).all():  # sign-extended: the value is its low word
        return low.copy()
    return np.array([(int(h) << 64) | (int(lo) & 0xFFFFFFFFFFFFFFFF) for lo, h in zip(low, high)], dtype=object)


def _decimals(unscaled: np.ndarray, precision: int, scale: int) -> pa.Array:
    """DECIMAL(precision, scale) values from their unscaled integers."""
    kind = pa.decimal128(precision, scale)
    if unscaled.dtype != object:
        words = np.empty(2 * len(unscaled), np.int64)
        words[0::2], words[1::2] = unscaled, unscaled >> 63
        return pa.Array.from_buffers(kind, len(unscaled), [None, pa.py_buffer(words.tobytes())])
    return pa.array([Decimal(int(v)).scaleb(-scale) for v in unscaled], kind)


def _sequential_sums(values: np.ndarray, part_start: np.ndarray) -> np.ndarray:
    """Per row, the float sum of its partition's values up to it, added one at a time in
    order (as a buffer adds them; a cumulative sum over all rows less the sum before the
    partition would carry the other partitions' rounding). A long partition is summed
    alone, the short ones side by side: one addition per row of the longest of them."""
    out = np.empty_like(values)
    starts = np.flatnonzero(part_start)
    lengths = np.diff(np.append(starts, len(values)))
    long = lengths > _LONG_PARTITION
    for s, size in zip(starts[long], lengths[long]):
        np.cumsum(values[s:s + size], out=out[s:s + size])
    order = np.argsort(-lengths[~long], kind="stable")
    short, sizes = starts[~long][order], lengths[~long][order]
    acc = np.zeros(len(short))
    for j in range(int(sizes[0]) if len(sizes) else 0):
        k = int(np.searchsorted(-sizes, -j, side="left"))  # the partitions longer than j
        at = short[:k] + j
        acc[:k] += values[at]
        out[at] = acc[:k]
    return out


def _sliding_sums(values: np.ndarray, start: np.ndarray, end: np.ndarray, width: int) -> np.ndarray:
    """Per row, the float sum of ``values`` from row ``start`` to row ``end`` (at most
    ``width`` rows), added one at a time in order from 0.0, as Spark sums a bounded frame."""
    total = np.zeros(len(values))
    for j in range(width):
        at = start + j
        inside = at <= end
        total += np.where(inside, values[np.where(inside, at, 0)], 0.0)
    return total


def _welford_step(n: np.ndarray, avg: np.ndarray, m2: np.ndarray, v: np.ndarray, ok: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One value added to central-moment buffers where ``ok``, as Spark's
    ``CentralMomentAgg`` updates one: ``delta = v - avg``, ``avg += delta / (n + 1)``,
    ``m2 += delta * (delta - delta / (n + 1))``."""
    with np.errstate(invalid="ignore", over="ignore"):
        grown = n + 1.0
        delta = v - avg
        step = delta / grown
        return (np.where(ok, grown, n), np.where(ok, avg + step, avg),
                np.where(ok, m2 + delta * (delta - step), m2))


def _welford(values: np.ndarray, valid: np.ndarray, part_start: np.ndarray) -> np.ndarray:
    """Per row, the central moment of its partition's values up to it (those ``valid``),
    each added a row at a time (:func:`_welford_step`). A long partition is updated alone
    in Python floats (IEEE's, as Java's), the short ones side by side: one numpy step per
    row of the longest of them."""
    m2 = np.zeros(len(values))
    starts = np.flatnonzero(part_start)
    lengths = np.diff(np.append(starts, len(values)))
    long = lengths > _LONG_PARTITION
    for s, size in zip(starts[long], lengths[long]):
        n = avg = m = 0.0
        xs, oks = values[s:s + size].tolist(), valid[s:s + size].tolist()
        ms = [0.0] * size
        for j in range(size):
            if oks[j]:
                grown = n + 1.0
                delta = xs[j] - avg
                step = delta / grown
                n, avg, m = grown, avg + step, m + delta * (delta - step)
            ms[j] = m
        m2[s:s + size] = ms
    order = np.argsort(-lengths[~long], kind="stable")
    short, sizes = starts[~long][order], lengths[~long][order]
    n_, avg_, m_ = np.zeros(len(short)), np.zeros(len(short)), np.zeros(len(short))
    for j in range(int(sizes[0]) if len(sizes) else 0):
        k = int(np.searchsorted(-sizes, -j, side="left"))  # the partitions longer than j
        at = short[:k] + j
        n_[:k], avg_[:k], m_[:k] = _welford_step(n_[:k], avg_[:k], m_[:k], values[at], valid[at])
        m2[at] = m_[:k]
    return m2


def _sliding_welford(values: np.ndarray, valid: np.ndarray, start: np.ndarray, end: np.ndarray, width: int
                     ) -> np.ndarray:
    """Per row, the central moment of the values from row ``start`` to row ``end`` (at
    most ``width`` rows), updated from empty buffers in order, as Spark computes a
    bounded frame anew for each row."""
    n, avg, m2 = np.zeros(len(values)), np.zeros(len(values)), np.zeros(len(values))
    for j in range(width):
        at = start + j
        inside = at <= end
        safe = np.where(inside, at, 0)
        n, avg, m2 = _welford_step(n, avg, m2, values[safe], inside & valid[safe])
    return m2


def _sliding_extreme_rows(x: pa.ChunkedArray, largest: bool, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per row, the first row from ``start`` to ``end`` whose value of ``x`` is the largest
    (``largest``) or smallest as Spark orders values; any row where the frame has no value.
    A sparse table of range maxima (each level the best of two halves of the one below)
    answers every frame by two overlapping windows of a power of two, exact at any width."""
    n = len(start)
    if not n:
        return np.arange(0)
    rank, valid = _value_ranks(x)
    # one code per row: the better value first, then the earlier row; NULL below every value
    idx = np.arange(n, dtype=np.int64)
    code = np.where(valid, (rank if largest else int(rank.max()) + 1 - rank) + 1, 0) * (n + 1) + (n - idx)
    levels = [code]
    span = int(np.max(end - start, initial=0)) + 1
    while 1 << len(levels) <= span:
        below, half = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.maximum(below, np.append(below[half:], np.zeros(half, np.int64))))
    lo = np.minimum(start, n - 1)
    width = np.maximum(end - start + 1, 1)
    k = np.floor(np.log2(width)).astype(np.int64)
    k = np.where(np.left_shift(1, k + 1) <= width, k + 1, np.where(np.left_shift(1, k) > width, k - 1, k))
    best = np.zeros(n, np.int64)
    for j, level in enumerate(levels):  # each frame by the level of the largest power of two in it
        at = np.flatnonzero(k == j)
        best[at] = np.maximum(level[lo[at]], level[np.clip(end[at] - (1 << j) + 1, 0, n - 1)])
    return n - best % (n + 1)


def _value_ranks(x: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's dense rank as Spark orders values (NaN above every number, -0.0 with
    0.0), and whether it is a value (not NULL)."""
    rank = pc.rank(x, sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.int64)
    return rank, pc.is_valid(x).to_numpy(zero_copy_only=False)


def _extreme_rows(x: pa.ChunkedArray, largest: bool, part_start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per row, the first row of its frame (its partition up to row ``end``) whose value
    of ``x`` is the largest (``largest``) or smallest, as Spark orders values and as its
    MIN and MAX keep the first of equal ones; any row where the frame has no value."""
    n = len(part_start)
    idx = np.arange(n)
    if not n:
        return idx
    rank, valid = _value_ranks(x)
    top = int(rank.max()) + 2
    part = np.cumsum(part_start) - 1
    if largest:  # a later partition's codes are above an earlier one's, a NULL below every value
        held = np.maximum.accumulate(part * top + np.where(valid, rank, 0))
    else:
        held = np.minimum.accumulate((part[-1] - part) * top + np.where(valid, rank, top - 1))
    changed = np.ones(n, bool)
    changed[1:] = held[1:] != held[:-1]
    return np.maximum.accumulate(np.where(changed, idx, 0))[end]


def totals(rows: pa.Table, partition: Sequence[str], aggs: Sequence[AggCall], schema: pa.Schema, *,
           ansi: bool, legacy_stats: bool = False) -> pa.Table | None:
    """``rows`` (a consolidated Z-set) with aggregates over their whole partition,
    ``agg(x) OVER (PARTITION BY partition)``: each partition's values as :func:`regroup`
    gives a group's (Spark's types, overflow and NaN), appended to every row of it.
    ``schema`` types the aggregates' columns. None where :func:`regroup` leaves it to Spark."""
    live = rows.filter(pc.greater(rows.column(WEIGHT), 0))
    sorted_, part_start, _ = partitioned(live, partition, ())
    part = np.cumsum(part_start) - 1
    numbered = sorted_.select(live.column_names).append_column("__part", pa.array(part, pa.int64()))
    typed = pa.schema([pa.field("__part", pa.int64())] + [schema.field(a.name) for a in aggs]
                      + [pa.field(WEIGHT, pa.int64())])
    groups = regroup(numbered, ["__part"], aggs, typed, ansi=ansi, legacy_stats=legacy_stats)
    if groups is None:
        return None
    at = np.empty(groups.num_rows, np.int64)
    at[groups.column("__part").to_numpy()] = np.arange(groups.num_rows)
    values = groups.take(pa.array(at[part]))
    data = data_columns(live)
    return pa.table({c: sorted_.column(c) for c in data} | {a.name: values.column(a.name) for a in aggs}
                    | {WEIGHT: sorted_.column(WEIGHT)})


def partitioned(table: pa.Table, partition: Sequence[str], order: Sequence[tuple[str, bool, bool]]
                ) -> tuple[pa.Table, np.ndarray, list[tuple[str, str | None]]]:
    """``table`` sorted by ``partition`` as Spark partitions (a float key normalized: every
    NaN one partition, -0.0 and 0.0 one; NULLs one) and within each by ``order``
    ((column, descending, nulls first) per term), with helper columns; whether each row
    starts a partition; and per order term its column and the column telling NaN (floats).

    Each term sorts by its NULL placement first, then, for floats, by whether it is NaN
    (Spark orders NaN above every number; Arrow puts it last either way), then by value,
    so every term places its NULLs and NaNs as Spark does."""
    keys: list[tuple[str, str]] = []
    cols = {c: table.column(c) for c in table.column_names}
    parts: list[tuple[str, str | None]] = []  # per partition key: its values as partitioned, whether NaN
    for i, c in enumerate(partition):
        cols[f"__pn{i}"] = pc.is_valid(table.column(c))
        keys.append((f"__pn{i}", "ascending"))
        if pa.types.is_floating(table.schema.field(c).type):
            cols[f"__pv{i}"] = normal_float(table.column(c))
            cols[f"__pnan{i}"] = pc.fill_null(pc.is_nan(cols[f"__pv{i}"]), False)
            keys += [(f"__pnan{i}", "ascending"), (f"__pv{i}", "ascending")]
            parts.append((f"__pv{i}", f"__pnan{i}"))
        else:
            keys.append((c, "ascending"))
            parts.append((c, None))
    terms: list[tuple[str, str | None]] = []  # per order term: its values, whether NaN
    for i, (c, desc, nulls_first) in enumerate(order):
        direction = "descending" if desc else "ascending"
        cols[f"__on{i}"] = pc.is_valid(table.column(c)) if nulls_first else pc.is_null(table.column(c))
        keys.append((f"__on{i}", "ascending"))
        nan = None
        if pa.types.is_floating(table.schema.field(c).type):
            nan = f"__nan{i}"
            cols[nan] = pc.fill_null(pc.is_nan(table.column(c)), False)
            keys.append((nan, direction))
        keys.append((c, direction))
        terms.append((c, nan))
    whole = pa.table(cols)
    sorted_ = whole.take(pc.sort_indices(whole, sort_keys=keys)) if keys else whole
    return sorted_, _starts(sorted_, parts), terms


def _starts(sorted_: pa.Table, columns: Sequence[tuple[str, str | None]]) -> np.ndarray:
    """Per row of ``sorted_``, whether it differs from the row before on any of
    ``columns`` (each with its column telling NaN, for floats) as Spark compares in a
    partition or an ordering: NULL equals NULL, NaN equals NaN; the first row starts."""
    n = sorted_.num_rows
    start = np.zeros(n, bool)
    if n:
        start[0] = True
        for c, nan in columns:
            x = sorted_.column(c)
            prev, cur = x.slice(0, n - 1), x.slice(1)
            differ = pc.fill_null(pc.not_equal(prev, cur), False).to_numpy(zero_copy_only=False)
            if nan is not None:  # NaN is not NaN, but one partition (one peer)
                isnan = sorted_.column(nan).to_numpy(zero_copy_only=False)
                differ = (differ & ~(isnan[:-1] & isnan[1:])) | (isnan[:-1] != isnan[1:])
            differ |= pc.xor(pc.is_null(prev), pc.is_null(cur)).to_numpy(zero_copy_only=False)
            start[1:] |= differ
    return start
