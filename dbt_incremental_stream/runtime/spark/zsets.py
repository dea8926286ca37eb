"""Z-set and aggregate primitives on Spark DataFrames (weight column ``_w``), and the
crossings between Spark and Arrow (a DataFrame collected as Arrow, Python rows as Arrow,
Spark's types in Arrow).

These are the DataFrame evaluator's (:mod:`.evaluate`) counterparts of :mod:`.kernels`,
which do the same on Arrow tables for ticks on arrangements: a sum, a consolidation or a
partial aggregate has one of each. Spark SQL's semantics decide: each kernel is held to
Spark's answer on the same batch (``tests/unit/test_kernels_spark.py``), and every view to
Spark's batch answer on both placements (the twin harness, ``tests/twin.py``).
"""
from __future__ import annotations

import io
import json
import os
import pickle
import tempfile
import time
from decimal import Decimal
from functools import reduce
from typing import Any, Iterable, Iterator, Mapping, Sequence, cast

import numpy as np
import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.errors import IllegalArgumentException
from pyspark.serializers import NoOpSerializer
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (ByteType, DataType, DateType, DecimalType, DoubleType, FloatType, IntegerType, LongType,
                               ShortType, StructField, StructType, TimestampType)
from pyspark.sql.window import WindowSpec
from pyspark.util import _load_from_socket

from ...circuit.operators import COUNT, MOMENTS, WEIGHT, AggCall, nonfinite_columns, partial_columns, quote
from ..arrow import kernels
from ..arrow.expressions import UTC_ZONES


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


def pack(frames: Mapping[str, DataFrame], columns: Mapping[str, str], tag: str) -> DataFrame:
    """Frames of different schemas as one DataFrame, so one Spark job computes them all:
    column ``tag`` names each row's frame, whose row sits in the struct column
    ``columns[frame]`` (the other frames' struct columns are NULL)."""
    parts = [df.selectExpr(f"'{key}' AS {quote(tag)}", f"struct(*) AS {quote(columns[key])}")
             for key, df in frames.items()]
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)


def with_weight(schema: StructType) -> StructType:
    """``schema`` with the weight column."""
    return StructType(list(schema.fields) + [StructField(WEIGHT, LONG, False)])


def ansi(spark: SparkSession) -> bool:
    """The session's ``spark.sql.ansi.enabled`` (on unless set off): what an overflow gives."""
    return (spark.conf.get("spark.sql.ansi.enabled") or "true").lower() == "true"


def legacy_stats(spark: SparkSession) -> bool:
    """The session's ``spark.sql.legacy.statisticalAggregate`` (off unless set on): a
    sample's variance or deviation of one value is then NaN, not NULL."""
    return (spark.conf.get("spark.sql.legacy.statisticalAggregate") or "false").lower() == "true"


def utc_clock() -> bool:
    """Whether this process's local time is UTC (``TZ`` may change it while it runs):
    then a naive datetime, which Spark's Python conversions read as local time, is UTC."""
    return time.timezone == 0 and time.altzone == 0 and not time.daylight


def arrow_schema(schema: StructType) -> pa.Schema:
    """Spark's types in Arrow, as the engine holds them in every Arrow table (state, runs,
    deltas) and as ``toArrow`` gives them: an instant (TIMESTAMP) is a timestamp in UTC,
    whatever the session's time zone (an Arrow timestamp's zone is metadata: the instants
    are the same, but tables whose zones differ do not concatenate)."""
    return to_arrow_schema(schema, timezone="UTC")


def arrow_rows(schema: StructType, rows: Sequence[Sequence[Any]], internal: bool = False) -> pa.Table:
    """Rows of Python values as an Arrow table of ``schema``, each value converted as
    Spark's ``createDataFrame`` converts it (``DataType.toInternal``), or converted already
    (``internal``: what ``createDataFrame`` hands the JVM, as :func:`python_rows` unpickles
    it, a decimal as its text; a nested value as lists, dicts and tuples of them). Tuples
    whose every column Arrow reads as Spark does are read by Arrow in one pass (5-6x
    faster than a pass per column); the others column by column, converted per value
    where Arrow's reading differs from Spark's."""
    arrow = arrow_schema(schema)
    if internal or all(_read_as_spark(f.dataType) for f in schema.fields):
        given = [_internal_type(t) if internal else t for t in arrow.types]
        try:
            struct = pa.array(rows, pa.struct([pa.field(n, t) for n, t in zip(arrow.names, given)]))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass  # not tuples, or a value to fail on: column by column, as below, says which
        else:
            read = [_from_internal(c, t) for c, t in zip(struct.flatten(), arrow.types)]
            return pa.Table.from_arrays(read, schema=arrow)
    columns: list[pa.Array] = []
    for f, t, values in zip(schema.fields, arrow.types, zip(*rows) if rows else [()] * len(arrow)):
        if not internal and _read_as_spark(f.dataType):
            columns.append(pa.array(values, t))
            continue
        if not internal:
            values = tuple(None if v is None else f.dataType.toInternal(v) for v in values)
        columns.append(_from_internal(pa.array(values, _internal_type(t)), t))
    return pa.Table.from_arrays(columns, schema=arrow)


def _read_as_spark(dtype: DataType) -> bool:
    """Whether Arrow reads a Python value of a column of ``dtype`` as Spark's
    ``toInternal`` converts it: types Spark does not convert; a DATE (a ``datetime``
    truncated to its day, as Spark does); a TIMESTAMP where local time is UTC (a naive
    datetime is local time to Spark). Not a TIMESTAMP_NTZ: Spark keeps an aware
    datetime's wall clock where Arrow takes its instant."""
    return (not dtype.needConversion() or isinstance(dtype, DateType)
            or (isinstance(dtype, TimestampType) and utc_clock()))


def _internal_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type of Spark's internal values of a column of Arrow type ``t``: days
    and microseconds for dates and times; a decimal's text, as :func:`python_rows` reads
    it (Arrow reads text 2x faster than ``Decimal`` objects, which are slow to unpickle)."""
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_internal_type(t.key_type)),
                       t.item_field.with_type(_internal_type(t.item_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_internal_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_internal_type(f.type)) for f in t])
    return (pa.int64() if pa.types.is_timestamp(t) else pa.int32() if pa.types.is_date(t)
            else pa.string() if pa.types.is_decimal(t) else t)


def _from_internal(column: pa.Array, t: pa.DataType) -> pa.Array:
    """A column of :func:`_internal_type` as Arrow type ``t``: days and microseconds
    viewed, decimals' text cast (exactly: a value with more digits than ``t`` holds, or
    not a number, is refused)."""
    if column.type == t:
        return column
    return column.cast(t) if pa.types.is_decimal(t) or pa.types.is_nested(t) else column.view(t)


class _TextDecimals(pickle.Unpickler):
    """Unpickles a ``Decimal`` as its text (what it pickles as): the rows' decimals are
    then read by Arrow (2x faster in all, for 12,345 TPC-H lineitem rows)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("decimal", "Decimal"):
            return str
        return super().find_class(module, name)


def _identity_map(command: bytes) -> bool:
    """Whether a PythonRDD's pickled command is PySpark's own identity map
    (``RDD._reserialize``): its rows are the parent's, as pickled."""
    from pyspark import cloudpickle
    from pyspark.core.rdd import RDD
    func = cloudpickle.loads(command)[0]
    inner = [c.cell_contents for c in func.__closure__ or ()]
    codes = [c for c in RDD._reserialize.__code__.co_consts if hasattr(c, "co_code")]
    return (func.__code__ in [c for c in RDD.map.__code__.co_consts if hasattr(c, "co_code")]
            and len(inner) == 1 and getattr(inner[0], "__code__", None) in codes)


def _expr_id(tree: list[dict[str, Any]]) -> tuple[int, int, str] | None:
    """A projected expression (its nodes in ``TreeNode.toJSON``'s pre-order) that only
    passes or renames a column: the exprId it reads, the one it gives and its name; None
    for any other."""
    kinds = [node["class"].rsplit(".", 1)[-1] for node in tree]
    if kinds == ["AttributeReference"]:
        return tree[0]["exprId"]["id"], tree[0]["exprId"]["id"], tree[0]["name"]
    if kinds == ["Alias", "AttributeReference"]:
        return tree[1]["exprId"]["id"], tree[0]["exprId"]["id"], tree[0]["name"]
    return None


class _OtherLineage(Exception):
    """An RDD of another class than the lineage of Python rows has there."""


class _Jvm:
    """What reading Python rows asks of one JVM, found once per gateway: a ClassTag (to
    step to an RDD's parent in one Py4J call, not three), the methods it calls, the
    private fields it reads, and the pickled identity map PySpark last used (compared in
    the JVM, not shipped and unpickled each read)."""

    _seen: dict[int, _Jvm] = {}

    def __init__(self, spark: SparkSession) -> None:
        self.gateway = spark.sparkContext._gateway
        jvm = spark._jvm
        assert jvm is not None
        self.tag = getattr(jvm.scala.reflect, "ClassTag$").__getattr__("MODULE$").Any()
        # methods, not classes: each attribute of a class asks the JVM what it is
        self.write_frames = jvm.org.apache.spark.api.python.PythonRDD.writeIteratorToStream
        self.file_out, self.buffered = jvm.java.io.FileOutputStream, jvm.java.io.BufferedOutputStream
        self.data_out = jvm.java.io.DataOutputStream
        self.identity: Any = None  # a command (a JVM Seq of bytes) known to be the identity map
        self.fields: dict[tuple[str, str], Any] = {}

    @classmethod
    def of(cls, spark: SparkSession) -> _Jvm:
        gateway = spark.sparkContext._gateway
        seen = cls._seen.get(id(gateway))
        if seen is None or seen.gateway is not gateway:
            seen = cls._seen[id(gateway)] = cls(spark)
        return seen

    def private(self, obj: Any, kind: str, name: str) -> Any:
        """A private field (a Scala constructor parameter) of a JVM object of class
        ``kind``: looked up on the first object of that class (another class with a field
        of that name is refused, not kept in its place), and then refused by the JVM for
        an object of another class."""
        field = self.fields.get((kind, name))
        if field is None:
            if obj.getClass().getSimpleName() != kind:
                raise _OtherLineage(kind)
            field = obj.getClass().getDeclaredField(name)
            field.setAccessible(True)
            self.fields[kind, name] = field
        return field.get(obj)

    def python_rdd(self, rdd: Any) -> Any:
        """The PythonRDD under the RDD of a DataFrame ``createDataFrame`` made of Python
        rows, stepping over the JVM's unpickling and the rows made Spark's (three
        MapPartitionsRDDs): reading each one's parent field checks its class too (a field
        of another class is refused). None for any other lineage."""
        for _ in range(3):
            rdd = self.private(rdd, "MapPartitionsRDD", "prev")
            if rdd is None:  # checkpointed: its lineage is gone
                return None
        return rdd

    def is_identity(self, command: Any) -> bool:
        """Whether ``command`` (a PythonFunction's, in the JVM) is PySpark's identity map."""
        if self.identity is not None and command.equals(self.identity):
            return True
        if not _identity_map(bytes(command.unsafeArray())):
            return False
        self.identity = command
        return True

    def batches(self, data: Any) -> Iterator[bytes]:
        """A JVM sequence of byte arrays in Python, in order: written by the JVM to a
        local file as ``PythonRDD`` frames them, then read back (the gateway's JVM is this
        machine's). Six Py4J calls; serving them over a socket, as ``toArrow`` does,
        starts a server and a thread (3 ms more a read of 1,000 rows: 8.7 → 5.4 ms), and
        returning each array from a call is slower still (Py4J sends bytes as text)."""
        fd, path = tempfile.mkstemp(prefix="dbt-stream-rows-")
        os.close(fd)
        try:
            out = self.data_out(self.buffered(self.file_out(path), 1 << 16))
            self.write_frames(data.iterator(), out)
            out.close()
            with open(path, "rb") as f:
                yield from NoOpSerializer().load_stream(f)
        finally:
            os.unlink(path)


def python_rows(df: DataFrame) -> pa.Table | None:
    """The rows of a DataFrame ``spark.createDataFrame`` made of Python rows (and columns
    picked or renamed from it), as ``toArrow`` gives them, read in the driver: no job.
    Such a DataFrame is an RDD of the rows pickled in the driver (PySpark's
    ``parallelize``); each read of it through Spark is a job whose tasks unpickle the rows
    in a Python worker and then in the JVM (0.1-0.2 s for 1,000 rows). Here its pickled
    batches are handed to Python from the JVM as they are and unpickled once. None for any
    other DataFrame. Py4J calls are most of the time for a few rows (about 15, 0.05 ms each,
    where no call starts a socket or writes the plan as JSON for a DataFrame as made): the
    plan of one that picks or renames columns is read as one JSON document, which also
    gives the columns' names and types.
    (Converting the rows in the JVM instead, by Spark's own chain computed in the driver,
    was measured slower: Pyrolite and Spark's Arrow writer took 0.2 s for 12,345 rows.)"""
    # Dataset.logicalPlan: analyzed, not optimized (the optimizer costs more than the rest
    # of this read, and a cast, even to a column's own type, declines)
    plan = df._jdf.logicalPlan()
    picks: list[list[tuple[int, int, str]]] = []  # per Project from the top: (exprId read, exprId given, name)
    if plan.nodeName() == "LogicalRDD":  # the DataFrame as made: its schema is the rows' (no plan to read)
        leaf, schema = plan, df.schema
    else:
        nodes = json.loads(plan.toJSON())
        for node in nodes[:-1]:
            kind = node["class"].rsplit(".", 1)[-1]
            if kind == "Project":
                passed = [_expr_id(tree) for tree in node["projectList"]]
                if None in passed:
                    return None
                picks.append(cast("list[tuple[int, int, str]]", passed))
            elif kind != "SubqueryAlias":
                return None
        if nodes[-1]["class"].rsplit(".", 1)[-1] != "LogicalRDD":
            return None
        leaf, output = plan.collectLeaves().apply(0), [tree[0] for tree in nodes[-1]["output"]]
        schema = StructType.fromJson({"type": "struct", "fields": [
            {"name": a["name"], "type": a["dataType"], "nullable": a["nullable"], "metadata": a["metadata"]}
            for a in output]})
    jvm = _Jvm.of(df.sparkSession)
    try:
        rdd = jvm.python_rdd(leaf.rdd())
        # a broadcast variable beside the identity map changes nothing: the rows are the parent's
        if rdd is None or not jvm.is_identity(jvm.private(rdd, "PythonRDD", "func").command()):
            return None
        # the rows pickled in the driver: every slice, in order
        data = jvm.private(rdd.firstParent(jvm.tag), "ParallelCollectionRDD", "data")
    except (_OtherLineage, IllegalArgumentException, Py4JJavaError):  # an RDD of another class
        return None
    rows: list[tuple[Any, ...]] = []
    for batch in jvm.batches(data):
        rows.extend(_TextDecimals(io.BytesIO(batch)).load())
    try:
        table = arrow_rows(schema, rows, internal=True)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None  # a value Spark converts its own way (the JVM casts what was not verified)
    if table is None:
        return None
    if picks:
        columns = {a["exprId"]["id"]: i for i, a in enumerate(output)}
        for ids in reversed(picks):
            table = table.select([columns[read] for read, _, _ in ids]).rename_columns([name for _, _, name in ids])
            columns = {given: n for n, (_, given, _) in enumerate(ids)}
    return table


#: the most bytes Spark's Arrow writer puts in one batch when a local relation is collected
LOCAL_BATCH_BYTES = 64 << 20


def arrow_frame(spark: SparkSession, table: pa.Table, schema: StructType | None = None) -> DataFrame:
    """An Arrow table as a DataFrame of all its rows. PySpark's ``createDataFrame`` reads a
    table's batches only up to the first empty one (a concat of tables, one of them empty,
    lost the rows after it), and fails on a nested column of no batches: the table is
    handed over without empty batches, and with one when it has no rows."""
    batches = [b for b in table.to_batches() if b.num_rows]
    table = pa.Table.from_batches(batches, table.schema) if batches else table.schema.empty_table()
    return spark.createDataFrame(table) if schema is None else spark.createDataFrame(table, schema=schema)


def collect_arrow(df: DataFrame) -> pa.Table:
    """``df``'s rows in the driver, as ``toArrow`` gives them. A plan Spark runs as a scan
    of local data (a DataFrame of pandas or Arrow data, a delta handed to Spark for an
    expression, and row-wise work on them, which Spark's optimizer folds into the data)
    is converted by Spark's own Arrow writer in the driver, as Spark Connect collects one,
    and served to Python through a local socket, as ``toArrow`` serves its batches: no job
    (9-26 ms for 1,000-100,000 rows here, against 60-150 ms for ``toArrow``'s). Py4J's
    own channel is no way for the bytes: 25 KB took 46 ms through it. Any other plan takes
    ``toArrow``, and so does a local relation whose rows did not all arrive: the serving
    thread ends the stream early when it fails, where ``toArrow`` raises Spark's error."""
    plan = df._jdf.queryExecution().executedPlan()
    if plan.getClass().getSimpleName() != "LocalTableScanExec":
        return df.toArrow()
    rows = plan.rows()
    spark = df.sparkSession
    jvm = spark._jvm
    assert jvm is not None
    conf = spark._jconf
    large = conf.arrowUseLargeVarTypes()
    converters = getattr(jvm.org.apache.spark.sql.execution.arrow, "ArrowConverters$").__getattr__("MODULE$")
    # as collectAsArrowToPython writes: the session's zone, duplicate struct fields refused
    streams = converters.toBatchWithSchemaIterator(
        rows.iterator(), plan.schema(), conf.arrowMaxRecordsPerBatch(), LOCAL_BATCH_BYTES,
        conf.sessionLocalTimeZone(), True, large)
    served = jvm.org.apache.spark.api.python.PythonRDD.serveIterator(streams, "dbt-stream-collect")
    with _load_from_socket(served, NoOpSerializer()) as streamed:
        parts = [b for stream in streamed for b in pa.ipc.open_stream(stream).read_all().to_batches()]
    if sum(b.num_rows for b in parts) != rows.size():
        return df.toArrow()
    schema = to_arrow_schema(df.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC",
                             prefers_large_types=large)
    return pa.Table.from_batches(parts, schema=parts[0].schema).cast(schema) if parts else schema.empty_table()


#: the days (since the epoch) :func:`midnights` knows: years 0 to 10000
MIDNIGHT_DAYS = (-719_528, 2_933_263)
_MIDNIGHTS: dict[str, kernels.Midnights] = {}


def midnights(spark: SparkSession, zone: str) -> kernels.Midnights:
    """The instant each day of :data:`MIDNIGHT_DAYS` starts in time zone ``zone``, as
    Spark casts a DATE to TIMESTAMP there: one Spark job over every day (seconds) per zone
    and process. Arrow's time zones are not the JVM's: they keep no daylight saving time
    after 2037, and their history is another version's."""
    if zone in _MIDNIGHTS:
        return _MIDNIGHTS[zone]
    offsets = np.zeros(1, np.int64)
    if zone not in UTC_ZONES:
        session = spark.newSession()  # the zone's, and compiled code for millions of rows
        session.conf.set("spark.sql.session.timeZone", zone)
        session.conf.set("spark.sql.codegen.wholeStage", "true")
        offsets = session.range(*MIDNIGHT_DAYS).selectExpr(
            f"unix_micros(CAST(date_from_unix_date(CAST(id AS INT)) AS TIMESTAMP)) - id * {kernels.DAY_MICROS}"
        ).toArrow().column(0).to_numpy()
    runs = np.flatnonzero(np.concatenate([[True], offsets[1:] != offsets[:-1]]))
    found = _MIDNIGHTS[zone] = kernels.Midnights(runs + MIDNIGHT_DAYS[0], offsets[runs], MIDNIGHT_DAYS[1])
    return found


def project(df: DataFrame, exprs: Sequence[tuple[str, str]]) -> DataFrame:
    """A Z-set mapped by Spark SQL expressions ``(name, expression)``; weights kept."""
    return df.selectExpr(*(f"{e} AS {quote(n)}" for n, e in exprs), quote(WEIGHT))


def consolidate(df: DataFrame) -> DataFrame:
    """One row per distinct tuple with its summed weight; zero weights dropped."""
    return bag_group(df, [F.sum(WEIGHT).alias(WEIGHT)]).where(col(WEIGHT) != 0)


def bag_group(df: DataFrame, aggs: Sequence[Column]) -> DataFrame:
    """``aggs`` per distinct row of ``df`` (its data columns), rows told apart as a bag
    tells them: Spark's GROUP BY takes -0.0 for 0.0, so a floating-point column is grouped
    with whether it is -0.0 beside it, and -0.0 comes out as -0.0."""
    groups, out = identity_columns(StructType([f for f in df.schema.fields if f.name != WEIGHT]))
    grouped = df.groupBy(*(F.expr(g) for g in groups)).agg(*aggs)
    return grouped.selectExpr(*out, *(quote(c) for c in grouped.columns[len(groups):]))


def identity_columns(schema: StructType) -> tuple[list[str], list[str]]:
    """(GROUP BY expressions, output expressions) in Spark SQL that keep a bag's rows
    apart by their exact values: a floating-point column ``c`` is grouped by ``c`` and
    ``c = 0 AND CAST(c AS STRING) LIKE '-%'`` (that it is -0.0), and put back as ``-c``
    where that holds (Spark's GROUP BY returns 0.0 for both zeros)."""
    groups, out = [], []
    for i, f in enumerate(schema.fields):
        c = quote(f.name)
        groups.append(f"{c} AS {c}")
        out.append(c)
        if isinstance(f.dataType, (DoubleType, FloatType)):
            flag = quote(f"__neg0_{i}")
            groups.append(f"CASE WHEN {c} = 0 THEN CAST({c} AS STRING) LIKE '-%' END AS {flag}")
            out[-1] = f"CASE WHEN {flag} THEN -{c} ELSE {c} END AS {c}"
    return groups, out


def sum_by(df: DataFrame, key: Sequence[str]) -> DataFrame:
    """Consolidate an additive table: sum every non-key column per key, dropping groups
    whose sums are all zero (a group's COUNT can net to 0 while its SUM does not)."""
    values = [c for c in df.columns if c not in key]
    out = df.groupBy(*map(col, key)).agg(*(F.sum(col(c)).alias(c) for c in values))
    return out.where(reduce(lambda a, b: a | b, (F.coalesce(col(c), F.lit(0)) != 0 for c in values)))


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
    """Per-group sums from which every linear aggregate is finalized (:func:`partial_sums`)."""
    types = arg_types(df.schema, aggs)
    if unit_weights_needed(aggs, types):
        df = unit_weights(df)
    return df.groupBy(*map(col, keys)).agg(*(v.alias(n) for n, v in partial_sums(aggs, types, col(WEIGHT)).items()))


def partial_sums(aggs: Sequence[AggCall], types: Mapping[str, DataType], w: Column) -> dict[str, Column]:
    """The sums (aggregate expressions, by partial column) from which linear ``aggs`` are
    finalized, of rows of weight ``w`` (±1 where :func:`unit_weights_needed`): Σw, and per
    aggregate Σx·w (:func:`summand`) and Σw over non-NULL x; for a floating-point SUM or
    AVG the weighted counts of its NaNs and infinities too (:func:`nonfinite_columns`)."""
    exprs = {COUNT: F.sum(w)}
    for a in aggs:
        names = partial_columns(a)
        if a.arg is None:
            continue
        x, kind = col(a.arg), types[a.arg]
        if a.func != "count":
            exprs[names[0]] = F.sum(summand(x, w, kind, a.func))
        exprs[names[-1]] = F.sum(F.when(x.isNotNull(), w).otherwise(F.lit(0)))
        if a.func != "count" and floating(kind):
            exprs |= {n: F.sum(F.when(test, w).otherwise(F.lit(0))) for test, n in zip(_nonfinite(x),
                                                                                        nonfinite_columns(a))}
    return exprs


def floating(kind: DataType) -> bool:
    """Whether values of ``kind`` are FLOAT or DOUBLE (NaN, -0.0 and infinities among them)."""
    return isinstance(kind, (FloatType, DoubleType))


def _integral(kind: DataType) -> bool:
    return isinstance(kind, (ByteType, ShortType, IntegerType, LongType))


def _nonfinite(x: Column) -> tuple[Column, Column, Column]:
    """Whether ``x`` is NaN, +Infinity, -Infinity (in :func:`nonfinite_columns` order)."""
    return F.isnan(x), x == F.lit(float("inf")), x == F.lit(float("-inf"))


def summand(x: Column, w: Column, kind: DataType, func: str) -> Column:
    """x·w for a sum of ``x`` of type ``kind``, exactly as Spark sums x: an integer in
    DECIMAL(38, 0) (a SUM is cast back by :func:`integer_sum`), a float's finite values
    in DOUBLE (its NaNs and infinities are counted apart), a DECIMAL(p, s) in its own
    scale. Where Spark's x·w would round a decimal's scale away (DECIMAL(38, 18) times a
    BIGINT is DECIMAL(38, 6)) the rows have unit weights (:func:`unit_weights`) and the
    summand is ±x.

    An AVG (``func``) of integers is the exact sum of their DOUBLEs (each an integer
    below 2^64) rounded once to DOUBLE, over the count: Spark sums their DOUBLEs in its
    row order, which is the same while no addition rounds (2^63 - 1 and -2^63 average to
    0.0, not -0.5), and depends on the order beyond."""
    if isinstance(kind, DecimalType):
        return x * w if _product_exact(kind) else F.when(w > 0, x).otherwise(-x)
    if floating(kind):
        nan, pinf, ninf = _nonfinite(x)
        return F.when(~(nan | pinf | ninf), x.cast("double") * w).otherwise(F.lit(0.0))
    if _integral(kind):
        return (_double_value(x) if func == "avg" else x.cast("decimal(20,0)")) * w
    return x * w


def _double_value(x: Column) -> Column:
    """The exact value of an integer ``x``'s DOUBLE, as DECIMAL(20, 0). Spark's cast of a
    DOUBLE to DECIMAL goes through its shortest decimal string (2^63 becomes
    9223372036854776000), so the DOUBLE is split into 32-bit halves, each exact."""
    d, word = x.cast("double"), F.lit(float(1 << 32))
    high = F.floor(d / word)  # exact: a power of two divides, floor keeps an integer
    low = (d - high.cast("double") * word).cast("bigint")
    return (high.cast("decimal(20,0)") * F.lit(Decimal(1 << 32)) + low.cast("decimal(20,0)")).cast("decimal(20,0)")


def _product_exact(kind: DecimalType) -> bool:
    """Whether Spark's DECIMAL(p, s) times a BIGINT (DECIMAL(20, 0)) keeps the scale s:
    the product is DECIMAL(p + 21, s) when that fits 38 digits, else its scale is cut
    to max(38 - integer digits, min(s, 6))."""
    p, s = kind.precision, kind.scale
    return p + 21 <= 38 or max(38 - (p - s + 21), min(s, 6)) >= s


def unit_weights_needed(aggs: Sequence[AggCall], types: Mapping[str, DataType]) -> bool:
    """Whether a SUM or AVG of ``aggs`` is of a decimal whose x·w Spark would round, or
    one of them is a variance, a standard deviation or an aggregate Spark computes (Spark's
    own, over each row once)."""
    return any(a.func in MOMENTS or a.sql is not None or a.arg is not None and a.func in ("sum", "avg")
               and isinstance(kind := types[a.arg], DecimalType) and not _product_exact(kind) for a in aggs)


def unit_weights(df: DataFrame) -> DataFrame:
    """The same Z-set with every row of weight w as |w| rows of weight ±1."""
    w = col(WEIGHT)
    repeated = F.array_repeat(F.signum(w).cast("bigint"), F.abs(w).cast("int"))
    return df.select(*map(col, data_columns(df)), F.explode(repeated).alias(WEIGHT))


def integer_sum(total: Column) -> Column:
    """A SUM of integers from its exact DECIMAL(38, 0) sum, as Spark's BIGINT sum ends:
    out of BIGINT's range it is an overflow error with ANSI on (the cast raises), and
    with ANSI off the sum wrapped around 2^64, as Java's long addition wraps (the cast
    gives NULL, the wrapped value replaces it)."""
    half, whole = F.lit(Decimal(1 << 63)), F.lit(Decimal(1 << 64))
    wrapped = F.pmod(total + half, whole) - half
    return F.coalesce(total.cast("bigint"), wrapped.cast("bigint"))


def float_total(finite: Column, counts: Sequence[Column]) -> Column:
    """A float SUM from its finite sum and its counts of NaN, +Inf and -Inf: NaN if a NaN
    is there or both infinities are, else the infinity that is, else the finite sum."""
    nan, pinf, ninf = (F.coalesce(c, F.lit(0)) > 0 for c in counts)
    return (F.when(nan | (pinf & ninf), F.lit(float("nan"))).when(pinf, F.lit(float("inf")))
            .when(ninf, F.lit(float("-inf"))).otherwise(finite))


def arg_types(schema: StructType, aggs: Sequence[AggCall]) -> dict[str, DataType]:
    """The type of each aggregate's argument column in ``schema`` (a node's rows)."""
    return {a.arg: schema[a.arg].dataType for a in aggs if a.arg is not None}


def average(total: Column, n: Column, kind: DataType) -> Column:
    """AVG from the sum and count of its values of type ``kind``, as Spark's ``Average``
    finishes it: a DECIMAL(p, s)'s sum as DECIMAL(p + 10, s) divided by the count as
    DECIMAL(20, 0), rounded at the scale of DECIMAL(p + 4, s + 4) (each bounded at 38
    digits); any other type in DOUBLE. NULL when the count is 0."""
    if isinstance(kind, DecimalType):
        sc = kind.scale
        p, precision, scale = kernels.average_types(kind.precision, sc)
        result = f"decimal({precision},{scale})"
        summed, count = total.cast(f"decimal({p},{sc})"), F.when(n != 0, n).cast("decimal(20,0)")
        ratio = (summed / count).cast(result)
        if kernels.quotient_type(p, sc)[1] >= scale:
            return ratio
        # SQL's division would round at fewer decimals than Spark's Average, which divides
        # at the result's scale: a sum that fits DECIMAL(38, scale) is divided there (a
        # comparison with 10^(38 - scale) would do, but Spark's raises on such decimals)
        wide = summed.try_cast(f"decimal(38,{scale})")
        return F.when(wide.isNotNull(), (wide / count).cast(result)).otherwise(ratio)
    return total.cast("double") / F.when(n != 0, n).cast("double")


def _sum_or_average(func: str, total: Column, n: Column, kind: DataType) -> Column:
    """A SUM or AVG (``func``) of ``n`` values of type ``kind`` from the sum of their
    :func:`summand`: an AVG as :func:`average`, an integer SUM as :func:`integer_sum`, a
    DECIMAL(p, s) SUM in Spark's type for it, DECIMAL(p + 10, s) (what is computed from
    it, a ratio of two sums, is then rounded as Spark rounds it; out of that range, the
    cast fails or gives NULL as Spark's sum does)."""
    if func == "avg":
        return average(total, n, kind)
    if isinstance(kind, DecimalType):
        return total.cast(DecimalType(min(38, kind.precision + 10), kind.scale))
    return integer_sum(total) if _integral(kind) else total


def group_diff(before: DataFrame | None, delta: DataFrame, prior: DataFrame | None, keys: Sequence[str],
               aggs: Sequence[AggCall], linear: bool, types: Mapping[str, DataType]) -> DataFrame:
    """D(agg(I(x))) on the groups ``delta`` touches: the new row of each such group, minus
    the row emitted for it before.

    ``before`` is z⁻¹I(x): per-group partial sums when ``linear``, else raw Z-set rows;
    ``prior`` is z⁻¹ of this operator's own output. Retracting exactly what was emitted
    (rather than recomputing the old value) keeps floating-point sums, whose value
    depends on summation order, from leaving stale rows behind. Without keys there is one
    group, which always has a row.
    """
    touched = delta.where(F.lit(False)) if before is None else restrict(before, delta, keys)
    if linear:
        values = [c for c in delta.columns if c not in keys]
        groups = touched.unionByName(delta).groupBy(*map(col, keys)).agg(*(F.sum(col(c)).alias(c) for c in values))
        return _replace(prior, delta, keys, finish(groups, keys, aggs, types))
    else:
        per_row = consolidate(touched.union(delta.select(*map(col, data_columns(delta)), col(WEIGHT))))
        if unit_weights_needed(aggs, types):
            per_row = unit_weights(per_row)
        if any(a.sql is not None for a in aggs):  # Spark's aggregate reads every row it is given
            per_row = per_row.where(col(WEIGHT) > 0)
        groups = per_row.groupBy(*map(col, keys)).agg(
            F.sum(F.when(col(WEIGHT) > 0, col(WEIGHT))).alias(COUNT),
            *(weighted(a, col(WEIGHT), types).alias(f"__a{i}") for i, a in enumerate(aggs)))
        count, results = F.coalesce(col(COUNT), F.lit(0)), [F.col(f"__a{i}") for i in range(len(aggs))]
    return _replace(prior, delta, keys, _rows(groups, keys, aggs, count, results))


def finish(groups: DataFrame, keys: Sequence[str], aggs: Sequence[AggCall], types: Mapping[str, DataType]
           ) -> DataFrame:
    """Aggregate rows (weight 1) from per-group partial sums of linear aggregates;
    ``types``: their arguments' types (:func:`arg_types`)."""
    count, results = finalize({c: col(c) for c in groups.columns if c not in keys}, aggs, types)
    return _rows(groups, keys, aggs, count, results)


def _rows(groups: DataFrame, keys: Sequence[str], aggs: Sequence[AggCall], count: Column,
          results: list[Column]) -> DataFrame:
    """One row per group whose count is not 0 (with no keys: the one global row)."""
    new = groups.where(count != 0) if keys else groups
    return new.select(*map(col, keys), *(v.alias(a.name) for v, a in zip(results, aggs)),
                      F.lit(1).cast("bigint").alias(WEIGHT))


def window_diff(before: DataFrame | None, delta: DataFrame, prior: DataFrame | None, partition: Sequence[str],
                funcs: Sequence[tuple[str, str]], keep: str | None) -> DataFrame:
    """The change of window functions over the partitions ``delta`` touches: their rows
    (z⁻¹I + Δ) as a bag, the functions computed by Spark, minus what was emitted before."""
    rows = delta if before is None else restrict(before, delta, partition).union(delta)
    out = expand(consolidate(rows)).selectExpr("*", *(f"{e} AS {quote(n)}" for n, e in funcs))
    if keep:
        out = out.where(keep)
    new = bag_group(out, [F.count(F.lit(1)).alias(WEIGHT)])
    return _replace(prior, delta, partition, new)


def _replace(prior: DataFrame | None, delta: DataFrame, keys: Sequence[str], new: DataFrame) -> DataFrame:
    """``new`` rows of the groups ``delta`` touches, minus the rows ``prior`` (all rows
    emitted so far) holds for them."""
    if prior is None:
        return new
    old = restrict(prior, delta, keys)
    return consolidate(old.withColumn(WEIGHT, -col(WEIGHT)).unionByName(new))


def scale(df: DataFrame, factor: str) -> DataFrame:
    """Weights multiplied by an integer expression over the row; zero (or NULL) drops it."""
    return df.withColumn(WEIGHT, col(WEIGHT) * F.expr(factor).cast("bigint")).where(col(WEIGHT) != 0)


def finalize(sums: dict[str, Column], aggs: Sequence[AggCall], types: Mapping[str, DataType]
              ) -> tuple[Column, list[Column]]:
    """(group weight, aggregate values) from per-group partial sums."""
    count = F.coalesce(sums[COUNT], F.lit(0))
    values = []
    for a in aggs:
        if a.func == "count":
            values.append(count if a.arg is None else F.coalesce(sums[partial_columns(a)[0]], F.lit(0)))
        else:
            assert a.arg is not None
            s, n = (sums[c] for c in partial_columns(a))
            kind = types[a.arg]
            value = _sum_or_average(a.func, s, n, kind)
            if nonfinite_columns(a)[0] in sums:
                value = float_total(value, [sums[c] for c in nonfinite_columns(a)])
            values.append(F.when(n != 0, value))
    return count, values


def weighted(a: AggCall, w: Column, types: Mapping[str, DataType], over: WindowSpec | None = None,
             once: Column | None = None) -> Column:
    """``a`` over the rows whose weight ``w`` is positive, each counted ``w`` times.
    ``over``: as window functions over that window, which cannot take DISTINCT: ``once``
    is then ``a``'s argument on one row of each of its values, NULL on the others."""
    def agg(c: Column) -> Column:
        return c if over is None else c.over(over)

    live = w > 0
    if a.sql is not None:  # over rows of weight 1 (:func:`unit_weights_needed`), none retracted
        return agg(F.expr(a.sql))
    if a.arg is None:
        return F.coalesce(agg(F.sum(F.when(live, w))), F.lit(0))
    x = col(a.arg)
    if a.distinct:
        v = F.when(live, x)
        if once is None:
            count, total = F.count_distinct(v), F.sum_distinct(v)
        else:
            count, total = F.count(F.when(live, once)), F.sum(F.when(live, once))
        if a.func == "avg":  # Spark's AVG(DISTINCT x): AVG over the distinct values
            return average(agg(total), agg(count), types[a.arg])
        return agg({"count": count, "sum": total, "min": F.min(v), "max": F.max(v)}[a.func])
    n = agg(F.sum(F.when(live & x.isNotNull(), w)))
    if a.func == "count":
        return F.coalesce(n, F.lit(0))
    kind = types[a.arg]
    if a.func in ("sum", "avg"):  # over the rows as they are: a float's NaNs and infinities included
        each = x.cast("double") * w if floating(kind) else summand(x, w, kind, a.func)
        total = agg(F.sum(F.when(live, each)))
        return _sum_or_average(a.func, total, n, kind)
    return agg(getattr(F, a.func)(F.when(live, x)))


def expand(df: DataFrame) -> DataFrame:
    """A consolidated Z-set as the bag it stands for: a row per unit of positive weight."""
    return unit_weights(df.where(col(WEIGHT) > 0)).select(*map(col, data_columns(df)))


def inserted(rows: DataFrame) -> DataFrame:
    """A bag of rows as the Z-set that inserts them: each of weight 1."""
    return rows.withColumn(WEIGHT, F.lit(1).cast(LONG))


def diff(current: DataFrame, before: DataFrame | None) -> DataFrame:
    """The Z-set that turns ``before`` (a Z-set) into ``current`` (a bag of rows): how a
    table with no change feed is read as a source."""
    now = inserted(current)
    return consolidate(now if before is None else cast(DataFrame, union([now, scale(before, "-1")])))
