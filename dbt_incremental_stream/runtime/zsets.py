"""Z-set and aggregate primitives on Spark DataFrames (weight column ``_w``)."""
from __future__ import annotations

from functools import reduce
from typing import Iterable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from ..circuit.operators import COUNT, WEIGHT, AggCall, partial_columns, quote


LONG = LongType()


def col(name: str) -> Column:
    return F.col(quote(name))


def data_columns(df: DataFrame) -> list[str]:
    return [c for c in df.columns if c != WEIGHT]


def union(frames: Iterable[DataFrame | None]) -> DataFrame | None:
    """Z-set sum by position; None stands for a statically empty Z-set."""
    present = [f for f in frames if f is not None]
    if not present:
        return None
    first = present[0]
    return reduce(lambda a, b: a.union(b.toDF(*a.columns)), present[1:], first)


def consolidate(df: DataFrame) -> DataFrame:
    """One row per distinct tuple with its summed weight; zero weights dropped."""
    return df.groupBy(*map(col, data_columns(df))).agg(F.sum(WEIGHT).alias(WEIGHT)).where(col(WEIGHT) != 0)


def sum_by(df: DataFrame, key: Sequence[str]) -> DataFrame:
    """Consolidate an additive table: sum every non-key column per key; empty groups dropped."""
    values = [c for c in df.columns if c not in key]
    out = df.groupBy(*map(col, key)).agg(*(F.coalesce(F.sum(col(c)), F.lit(0)).alias(c) if c == COUNT
                                          else F.sum(col(c)).alias(c) for c in values))
    return out.where(col(COUNT) != 0) if key else out


def restrict(df: DataFrame, keys: DataFrame, on: Sequence[str]) -> DataFrame:
    """Rows of ``df`` whose ``on`` columns match a row of ``keys`` (NULL matches NULL)."""
    if not on:
        return df
    probe = keys.select(*(col(k).alias(f"__k{i}") for i, k in enumerate(on))).distinct()
    cond = reduce(lambda a, b: a & b, (col(k).eqNullSafe(F.col(f"__k{i}")) for i, k in enumerate(on)))
    return df.join(probe, cond, "left_semi")


def join(left: DataFrame, right: DataFrame, on: str) -> DataFrame:
    """Z-set join: pairs of rows satisfying ``on``, weights multiplied."""
    cols = data_columns(left) + data_columns(right)
    a, b = left.withColumnRenamed(WEIGHT, "__wl"), right.withColumnRenamed(WEIGHT, "__wr")
    pairs = a.crossJoin(b) if on.strip().upper() == "TRUE" else a.join(b, F.expr(on), "inner")
    return pairs.select(*map(col, cols), (F.col("__wl") * F.col("__wr")).alias(WEIGHT))


def partials(df: DataFrame, keys: Sequence[str], aggs: Sequence[AggCall]) -> DataFrame:
    """Per-group sums from which every linear aggregate is finalized."""
    w = col(WEIGHT)
    exprs = [F.sum(w).alias(COUNT)]
    for a in aggs:
        names = partial_columns(a)
        if a.arg is None:
            continue
        x = col(a.arg)
        if a.func != "count":
            exprs.append(F.sum(x * w).alias(names[0]))
        exprs.append(F.sum(F.when(x.isNotNull(), w).otherwise(F.lit(0))).alias(names[-1]))
    return df.groupBy(*map(col, keys)).agg(*exprs)


def finalize(partial: DataFrame, keys: Sequence[str], aggs: Sequence[AggCall]) -> DataFrame:
    """Aggregate values from per-group partial sums."""
    out = [col(k) for k in keys]
    for a in aggs:
        if a.func == "count":
            value = col(COUNT) if a.arg is None else col(partial_columns(a)[0])
        else:
            s, n = (col(c) for c in partial_columns(a))
            value = F.when(n != 0, s if a.func == "sum" else F.try_divide(s, n))
        out.append(value.alias(a.name))
    return partial.select(*out)


def aggregate_rows(rows: DataFrame, keys: Sequence[str], aggs: Sequence[AggCall]) -> DataFrame:
    """Aggregates of a consolidated Z-set of raw rows (positive weights), by group,
    with the group's total weight as ``_cnt``."""
    live = rows.where(col(WEIGHT) > 0)
    w = col(WEIGHT)
    exprs = [F.sum(w).alias(COUNT)]
    for a in aggs:
        x = None if a.arg is None else col(a.arg)
        if x is None:
            value = F.sum(w)
        elif a.distinct:
            value = F.expr(f"{a.func}(DISTINCT {quote(a.arg)})")
        elif a.func == "count":
            value = F.sum(F.when(x.isNotNull(), w).otherwise(F.lit(0)))
        elif a.func == "sum":
            value = F.sum(x * w)
        elif a.func == "avg":
            value = F.try_divide(F.sum(x * w), F.sum(F.when(x.isNotNull(), w)))
        else:
            value = getattr(F, a.func)(x)
        exprs.append(value.alias(a.name))
    out = live.groupBy(*map(col, keys)).agg(*exprs)
    if not keys:
        # a global aggregate has its row even over no input: COUNT is 0, not NULL
        out = out.select(*(F.coalesce(col(c), F.lit(0)).alias(c) if c == COUNT or _is_count(c, aggs)
                           else col(c) for c in out.columns))
    return out


def _is_count(name: str, aggs: Sequence[AggCall]) -> bool:
    return any(a.name == name and a.func == "count" for a in aggs)


def signed(df: DataFrame, weight: int) -> DataFrame:
    return df.withColumn(WEIGHT, F.lit(weight).cast("bigint"))


def expand(df: DataFrame) -> DataFrame:
    """A consolidated Z-set as the bag it stands for: a row per unit of positive weight."""
    cols = data_columns(df)
    return df.where(col(WEIGHT) > 0).select(
        *map(col, cols), F.explode(F.array_repeat(F.lit(1), col(WEIGHT).cast("int"))).alias("__n")
    ).select(*map(col, cols))
