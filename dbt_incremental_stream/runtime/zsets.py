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
    probe = keys.select(*(col(k).alias(f"__k{i}") for i, k in enumerate(on)))
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


def group_diff(before: DataFrame | None, delta: DataFrame, keys: Sequence[str], aggs: Sequence[AggCall],
               linear: bool, first: bool) -> DataFrame:
    """D(agg(I(x))) on the groups ``delta`` touches: for each, the old row with weight -1
    and the new row with +1, both from one pass, and nothing when they are equal.

    ``linear``: ``before``/``delta`` hold per-group partial sums; else raw Z-set rows.
    Without keys there is one group that always exists; ``first`` says it has no old row.
    """
    touched = delta.where(F.lit(False)) if before is None else restrict(before, delta, keys)
    if linear:
        values = [c for c in delta.columns if c not in keys]
        tagged = touched.withColumn("__old", F.lit(True)).unionByName(delta.withColumn("__old", F.lit(False)))
        groups = tagged.groupBy(*map(col, keys)).agg(
            *(F.sum(F.when(F.col("__old"), col(c))).alias(f"__o{i}") for i, c in enumerate(values)),
            *(F.sum(col(c)).alias(f"__n{i}") for i, c in enumerate(values)))
        old = _finalize({c: F.col(f"__o{i}") for i, c in enumerate(values)}, aggs)
        new = _finalize({c: F.col(f"__n{i}") for i, c in enumerate(values)}, aggs)
    else:
        rows = data_columns(delta)
        tagged = touched.select(*map(col, rows), col(WEIGHT).alias("__wo"), col(WEIGHT).alias("__wn")).union(
            delta.select(*map(col, rows), F.lit(0).cast("bigint").alias("__wo"), col(WEIGHT).alias("__wn")))
        per_row = tagged.groupBy(*map(col, rows)).agg(F.sum("__wo").alias("__wo"), F.sum("__wn").alias("__wn"))
        aggregated = [_weighted(a, F.col("__wo")) for a in aggs] + [_weighted(a, F.col("__wn")) for a in aggs]
        groups = per_row.groupBy(*map(col, keys)).agg(
            F.sum(F.when(F.col("__wo") > 0, F.col("__wo"))).alias("__ocnt"),
            F.sum(F.when(F.col("__wn") > 0, F.col("__wn"))).alias("__ncnt"),
            *(v.alias(f"__a{i}") for i, v in enumerate(aggregated)))
        n = len(aggs)
        old = (F.coalesce(F.col("__ocnt"), F.lit(0)), [F.col(f"__a{i}") for i in range(n)])
        new = (F.coalesce(F.col("__ncnt"), F.lit(0)), [F.col(f"__a{n + i}") for i in range(n)])
    (old_cnt, old_vals), (new_cnt, new_vals) = old, new
    names = [a.name for a in aggs]
    old_row = F.struct(*(v.alias(c) for v, c in zip(old_vals, names)))
    new_row = F.struct(*(v.alias(c) for v, c in zip(new_vals, names)))
    has_old = F.lit(not first) if not keys else old_cnt != 0
    has_new = F.lit(True) if not keys else new_cnt != 0
    same = has_old & has_new & old_row.eqNullSafe(new_row)
    change = F.array(F.when(has_old & ~same, F.struct(F.lit(-1).cast("bigint").alias(WEIGHT), old_row.alias("r"))),
                     F.when(has_new & ~same, F.struct(F.lit(1).cast("bigint").alias(WEIGHT), new_row.alias("r"))))
    out = groups.select(*map(col, keys), F.explode(change).alias("__c")).where(F.col("__c").isNotNull())
    return out.select(*map(col, keys), *(F.col("__c.r").getField(c).alias(c) for c in names),
                      F.col(f"__c.{WEIGHT}").alias(WEIGHT))


def _finalize(sums: dict[str, Column], aggs: Sequence[AggCall]) -> tuple[Column, list[Column]]:
    """(group weight, aggregate values) from per-group partial sums."""
    count = F.coalesce(sums[COUNT], F.lit(0))
    values = []
    for a in aggs:
        if a.func == "count":
            values.append(count if a.arg is None else F.coalesce(sums[partial_columns(a)[0]], F.lit(0)))
        else:
            s, n = (sums[c] for c in partial_columns(a))
            values.append(F.when(n != 0, s if a.func == "sum" else F.try_divide(s, n)))
    return count, values


def _weighted(a: AggCall, w: Column) -> Column:
    """``a`` over the rows whose weight ``w`` is positive, each counted ``w`` times."""
    live = w > 0
    if a.arg is None:
        return F.coalesce(F.sum(F.when(live, w)), F.lit(0))
    x = col(a.arg)
    if a.distinct:
        distinct = {"count": F.count_distinct, "sum": F.sum_distinct, "avg": _avg_distinct,
                    "min": F.min, "max": F.max}
        return distinct[a.func](F.when(live, x))
    n = F.sum(F.when(live & x.isNotNull(), w))
    if a.func == "count":
        return F.coalesce(n, F.lit(0))
    if a.func == "sum":
        return F.sum(F.when(live, x * w))
    if a.func == "avg":
        return F.try_divide(F.sum(F.when(live, x * w)), n)
    return getattr(F, a.func)(F.when(live, x))


def _avg_distinct(x: Column) -> Column:
    return F.try_divide(F.sum_distinct(x), F.count_distinct(x))


def signed(df: DataFrame, weight: int) -> DataFrame:
    return df.withColumn(WEIGHT, F.lit(weight).cast("bigint"))


def expand(df: DataFrame) -> DataFrame:
    """A consolidated Z-set as the bag it stands for: a row per unit of positive weight."""
    cols = data_columns(df)
    return df.where(col(WEIGHT) > 0).select(
        *map(col, cols), F.explode(F.array_repeat(F.lit(1), col(WEIGHT).cast("int"))).alias("__n")
    ).select(*map(col, cols))
