"""Each kernel of the arranged path against Spark SQL over a local relation of the same
random batch of adversarial values (NaN, -0.0, infinities, type limits, wide decimals,
NULL in every column): the kernel's answer is Spark's, or the kernel declines
(``ArrowInvalid``, :class:`kernels.UnsupportedKey`) and the tick goes to Spark."""
from __future__ import annotations

import os
from decimal import Decimal
from contextlib import contextmanager
from functools import partial
from typing import Iterator
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, DecimalType, StructType

from dbt_incremental_stream.circuit.operators import WEIGHT, AggCall
from dbt_incremental_stream.differential import compare_exact
from dbt_incremental_stream.runtime.arrow import kernels
from dbt_incremental_stream.runtime.spark import zsets
from dbt_incremental_stream.runtime.storage.arrangement import BUILT_DDL, Arrangement, Run, RunStore, build
from tests.adversarial import TIMESTAMPS, values
from tests.twin import ANSI, spark_conf

SETTINGS = settings(max_examples=int(os.environ.get("TWIN_EXAMPLES", "8")), deadline=None,
                    derandomize=os.environ.get("TWIN_EXAMPLES") is None, database=None,
                    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))

#: key and value types the kernels meet: every numeric width, floats, wide decimals, strings, time
TYPES = ["DOUBLE", "FLOAT", "INT", "BIGINT", "TINYINT", "DECIMAL(38,18)", "DECIMAL(10,2)", "DECIMAL(38,0)",
         "STRING", "DATE", "TIMESTAMP"]
NUMBERS = ["DOUBLE", "INT", "BIGINT", "DECIMAL(38,18)", "DECIMAL(10,2)", "DECIMAL(10,0)"]


#: a session time zone whose offset from UTC changes (and a process local time that is UTC)
NEW_YORK = "America/New_York"


@pytest.fixture
def new_york(spark) -> Iterator[None]:
    """The session's time zone is New York's for the test, restored after."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", NEW_YORK)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def _schema(ddl: str) -> StructType:
    return StructType.fromDDL(ddl)  # type: ignore[return-value]


@st.composite
def batches(draw: st.DrawFn, ddl: str, weights: bool = True) -> pa.Table:
    """A weighted batch of ``ddl``'s columns (weights -2..3, no zeros) as Arrow."""
    schema = zsets.with_weight(_schema(ddl))
    rows = draw(st.lists(st.tuples(*(values(f.dataType) for f in schema.fields[:-1]),
                                   st.sampled_from([1, 1, 2, 3, -1, -2]) if weights else st.just(1)),
                         min_size=0, max_size=12))
    table = zsets.arrow_rows(schema, [tuple(r) for r in rows])
    assert table is not None
    return table


def _spark(spark, table: pa.Table, sql: str) -> pa.Table:
    spark.createDataFrame(table).createOrReplaceTempView("batch")
    return spark.sql(sql).toArrow()


def _expect(spark, table: pa.Table, sql: str, got: pa.Table) -> None:
    want = _spark(spark, table, sql)
    problem = compare_exact(got.cast(want.schema) if got.schema.names == want.schema.names else got, want)
    assert problem is None, f"{sql}: {problem}\nbatch: {table.to_pylist()}"


def _bag(table: pa.Table) -> str:
    """The batch as the bag it stands for (positive weights), in SQL over ``batch``."""
    cols = ", ".join(f"`{c}`" for c in kernels.data_columns(table))
    return f"(SELECT {cols} FROM batch LATERAL VIEW explode(sequence(1, `{WEIGHT}`)) AS __n WHERE `{WEIGHT}` > 0)"


@pytest.mark.parametrize("kind", TYPES)
@given(data=st.data())
@SETTINGS
def test_consolidate_keeps_every_distinct_row_apart(spark, kind, data):
    """A Z-set's rows are told apart by their exact values (-0.0 is not 0.0), as a bag's
    rows are: the consolidated batch, expanded, is the bag Spark sees."""
    table = data.draw(batches(f"k {kind}, s STRING"))
    table = table.filter(pa.compute.greater(table.column(WEIGHT), 0))
    got = kernels.expand(kernels.consolidate(table))
    _expect(spark, table, f"SELECT * FROM {_bag(table)}", got)


@pytest.mark.parametrize("kind", TYPES)
@given(data=st.data())
@SETTINGS
def test_group_count_and_count_distinct(spark, kind, data):
    """GROUP BY a key, COUNT(*) and COUNT(DISTINCT v): keys and distinct values as Spark
    normalizes them (NaN = NaN, -0.0 = 0.0), the key coming out normalized."""
    table = data.draw(batches(f"k {kind}, v {kind}", weights=False))
    aggs = [AggCall("n", "count", None), AggCall("d", "count", "v", distinct=True)]
    schema = pa.schema([table.schema.field("k"), pa.field("n", pa.int64()), pa.field("d", pa.int64()),
                        pa.field(WEIGHT, pa.int64())])
    got = kernels.regroup(table, ["k"], aggs, schema, ansi=True)
    assert got is not None
    _expect(spark, table, "SELECT k, COUNT(*) AS n, COUNT(DISTINCT v) AS d FROM batch GROUP BY k",
            got.select(["k", "n", "d"]))


@pytest.mark.parametrize("kind", ["DOUBLE", "FLOAT"])
@given(data=st.data())
@SETTINGS
def test_min_and_max_of_floats(spark, kind, data):
    """MIN and MAX of floats per group as Spark orders them: NaN above every number (MAX
    is NaN where the group holds one, MIN only where all it holds is NaN), infinities in
    order, NULLs skipped. Where -0.0 and 0.0 tie, which comes out is the order the rows
    come in, in Spark as in Arrow: compared with zeros unsigned (+ 0.0)."""
    table = data.draw(batches(f"k INT, v {kind}", weights=False))
    aggs = [AggCall("lo", "min", "v"), AggCall("hi", "max", "v")]
    v = table.schema.field("v").type
    schema = pa.schema([table.schema.field("k"), pa.field("lo", v), pa.field("hi", v), pa.field(WEIGHT, pa.int64())])
    got = kernels.regroup(table, ["k"], aggs, schema, ansi=True)
    assert got is not None
    unsigned = {c: pa.compute.add(got.column(c), pa.scalar(0.0, v)) for c in ("lo", "hi")}
    _expect(spark, table, f"SELECT k, CAST(MIN(v) + 0.0 AS {kind}) AS lo, CAST(MAX(v) + 0.0 AS {kind}) AS hi "
                          f"FROM batch GROUP BY k", pa.table({"k": got.column("k"), **unsigned}))


@ANSI
@pytest.mark.parametrize("kind", NUMBERS)
@given(data=st.data())
@SETTINGS
def test_linear_aggregates_from_partial_sums(spark, kind, ansi, data):
    """COUNT, SUM and AVG per group from partial sums of a weighted batch, finished by
    the kernel (or by Spark's own arithmetic where the kernel declines: an overflow with
    ANSI on), equal Spark's aggregates over the bag: NaN and infinities
    as Spark sums them, integers exactly (with ANSI off, a BIGINT sum wrapped around
    2^64, which no order changes), DECIMAL(38, 18) to its last digit. Where Spark's batch
    fails (an overflow: SQLSTATE 22003), so do the partial sums' finish."""
    table = data.draw(batches(f"k DOUBLE, v {kind}"))
    table = table.filter(pa.compute.greater(table.column(WEIGHT), 0))
    aggs = [AggCall("n", "count", "v"), AggCall("s", "sum", "v"), AggCall("a", "avg", "v")]
    with spark_conf(spark, {"spark.sql.ansi.enabled": str(ansi).lower()}):
        df = spark.createDataFrame(table)
        partial_schema = zsets.arrow_schema(zsets.partials(df, ["k"], aggs).schema)
        want_sql = f"SELECT k, COUNT(v) AS n, SUM(v) AS s, AVG(v) AS a FROM {_bag(table)} GROUP BY k"
        try:
            want: pa.Table | None = _spark(spark, table, want_sql)
        except Exception as e:
            assert ansi and "SQLSTATE: 22003" in str(e)
            want = None
        view = zsets.arrow_schema(spark.sql(want_sql).schema)  # the view's types, as the engine conforms to them
        try:
            got = _finished(df, table, aggs, partial_schema, view, ansi)
        except Exception as e:
            assert want is None and "SQLSTATE: 22003" in str(e), e
            return
    if want is None:  # Spark's BIGINT sum overflowed on the way, in its order: the exact sum is in range
        assert pa.types.is_integer(table.schema.field("v").type), got
        return
    assert compare_exact(got, want) is None, compare_exact(got, want)


def _finished(df, table: pa.Table, aggs: list[AggCall], partial_schema: pa.Schema, view: pa.Schema,
              ansi: bool) -> pa.Table:
    """The aggregates as the engine gives them, cast to the view's types (as it conforms
    them): the kernels' partial sums, summed per group (a DECIMAL's past 38 digits is in
    several rows: ``kernels.fitted``), and finish; where the kernels decline
    (``ArrowInvalid``, or no finish: an AVG of a DECIMAL out of range with ANSI on),
    Spark's finish of Spark's partial sums."""
    try:
        sums = kernels.group_sums(kernels.partials(table, ["k"], aggs, partial_schema), ["k"])
        got = kernels.finish(sums, ["k"], aggs, table.schema, ansi=ansi)
        if got is not None:
            return got.select(view.names).cast(view)
    except pa.ArrowInvalid:
        pass
    types = zsets.arg_types(df.schema, aggs)
    got = zsets.collect_arrow(zsets.finish(zsets.partials(df, ["k"], aggs), ["k"], aggs, types))
    return got.select(view.names).cast(view)


#: DECIMAL(p, s) of AVG's argument: every way its sum, quotient and result types are bounded
AVERAGED = [(38, 0), (38, 38), (10, 2), (18, 6), (38, 18), (20, 10), (5, 5), (1, 0), (38, 10), (30, 4),
            (37, 1), (28, 20)]


@ANSI
def test_decimal_average_is_spark_s(spark, ansi):
    """AVG of a DECIMAL from its sum and count, in Python's exact decimals, is Spark's to
    the last digit (39 significant digits, then two HALF_UP roundings; NULL out of range):
    sums at every width up to 38 digits and halves that round, over counts from 1 to
    2^63 - 1. With ANSI on, where Spark's is out of range (an error), the kernel declines."""
    rng = np.random.default_rng(11)
    for p, s in AVERAGED:
        sums, counts = [], []
        for digits in (1, 3, 10, p, min(38, p + 10), 38):
            for n in (1, 2, 3, 6, 7, 99, 10**6 + 3, 2**40 + 1, 2**63 - 1, int(rng.integers(1, 10**12))):
                top = 10**digits - 1
                for unscaled in (top, -top, 5, -15, 25, int(rng.integers(-min(top, 2**62), min(top, 2**62) + 1))):
                    sums.append(Decimal(unscaled).scaleb(-s, context=kernels._EXACT_DECIMALS))
                    counts.append(n)
        table = pa.table({"t": pa.array(sums, pa.decimal128(38, s)), "n": pa.array(counts, pa.int64())})
        kind = pa.decimal128(p, s)
        with spark_conf(spark, {"spark.sql.ansi.enabled": "false"}):
            df = spark.createDataFrame(table)
            want = [r[0] for r in df.select(zsets.average(df.t, df.n, DecimalType(p, s))).collect()]
        got = kernels.decimal_average(table.column("t"), table.column("n"), kind, ansi=False)
        assert got is not None
        assert got.to_pylist() == want, [(t, n, g, w) for t, n, g, w in zip(sums, counts, got.to_pylist(), want)
                                         if g != w][:5]
        if ansi:
            fine = [w is not None for w in want]
            inside = kernels.decimal_average(table.column("t").filter(fine), table.column("n").filter(fine), kind,
                                             ansi=True)
            assert inside is not None and inside.to_pylist() == [w for w in want if w is not None]
            assert all(fine) or kernels.decimal_average(table.column("t"), table.column("n"), kind, ansi=True) is None


@pytest.mark.parametrize("left,right", [("INT", "DOUBLE"), ("DOUBLE", "INT"), ("DECIMAL(10,2)", "DECIMAL(38,18)"),
                                        ("DECIMAL(38,18)", "DECIMAL(10,2)"), ("BIGINT", "DECIMAL(38,0)"),
                                        ("DECIMAL(10,0)", "INT"), ("DOUBLE", "FLOAT"), ("FLOAT", "DOUBLE"),
                                        ("DOUBLE", "DOUBLE"), ("TINYINT", "BIGINT"), ("BIGINT", "TINYINT"),
                                        ("DATE", "TIMESTAMP"), ("TIMESTAMP", "DATE")])
@given(data=st.data())
@SETTINGS
def test_join_probe_compares_keys_as_spark(spark, new_york, left, right, data):
    """A delta keyed by one type probing a run keyed by another: the pairs Spark's join
    on ``a.k = b.k`` finds (keys cast to their common type, NaN = NaN, -0.0 = 0.0, a DATE
    the instant its day starts in the session's time zone), no more, no fewer."""
    a = data.draw(batches(f"k {left}, i INT", weights=False))
    b = data.draw(batches(f"k {right}, j INT", weights=False))
    run = kernels.sort_run(b, ["k"])
    try:
        keys, ok = kernels.as_probe(a.column("k"), b.schema.field("k").type, partial(zsets.midnights, spark, NEW_YORK))
    except kernels.UnsupportedKey:
        return  # the tick goes to Spark
    probe = a.append_column("__p", keys).filter(pa.array(ok))
    joined = kernels.join(probe.select(["__p", "i", WEIGHT]), ["__p"], [run], ["k"], [False], True)
    rows = kernels.expand(kernels.consolidate(joined)) if joined is not None else None
    got = pa.table({"i": rows.column("i") if rows else pa.array([], pa.int32()),
                    "j": rows.column("j") if rows else pa.array([], pa.int32())})
    spark.createDataFrame(a).createOrReplaceTempView("a")
    spark.createDataFrame(b).createOrReplaceTempView("b")
    want = spark.sql("SELECT a.i, b.j FROM a JOIN b ON a.k = b.k").toArrow()
    assert compare_exact(got.cast(want.schema), want) is None, compare_exact(got.cast(want.schema), want)


def test_runs_built_in_spark_tasks_and_in_the_driver_are_probed_together(spark, new_york, tmp_path):
    """Spark hands a task's batches over with timestamps in the session's time zone, the
    driver holds them in UTC: runs of both (the same instants) are probed together, and
    find the pairs Spark's join finds."""
    schema = zsets.with_weight(_schema("k TIMESTAMP, i INT"))
    table = zsets.arrow_rows(schema, [(t, i, 1) for i, t in enumerate(TIMESTAMPS + [None])])
    assert table is not None
    store = RunStore(str(tmp_path))
    frame = spark.createDataFrame(table)
    arr = Arrangement("n", ("k",), False)
    built = frame.coalesce(1).mapInArrow(partial(build, str(tmp_path), arr, 1, zsets.arrow_schema(frame.schema)),
                                         BUILT_DDL).collect()
    arr = store.append(arr.with_runs({0: [Run(r["path"], r["rows"]) for r in built]}), 2, table)
    assert len(arr.runs[0]) == 2
    rows, found = store.probe(arr, table, ["k"], [False])
    assert found is not None
    got = pa.table({"i": table.column("i").take(pa.array(rows)), "j": found.column("i")})
    spark.createDataFrame(table).createOrReplaceTempView("a")
    want = spark.sql("SELECT a.i, b.i AS j FROM a JOIN (SELECT * FROM a UNION ALL SELECT * FROM a) AS b "
                     "ON a.k = b.k").toArrow()
    assert compare_exact(got.cast(want.schema), want) is None, compare_exact(got.cast(want.schema), want)


@given(data=st.data())
@SETTINGS
def test_collect_arrow_is_to_arrow_without_a_job(spark, new_york, data):
    """Row-wise work on a local relation comes back as ``toArrow`` gives it, without a
    Spark job, for every date and timestamp Spark holds (a timestamp of year 1 is a date
    of year 0 in New York, 9999-12-31 23:59 UTC a timestamp of year 10000 a day later),
    and for the types Python's rows could not carry: nested, TIMESTAMP_NTZ, intervals,
    wide decimals."""
    table = data.draw(batches("ts TIMESTAMP, dt DATE"))
    df = spark.createDataFrame(table).selectExpr(
        "ts", "CAST(ts AS DATE) AS dt", "dt AS d", "ts + INTERVAL 1 DAY AS dt", "CAST(ts AS TIMESTAMP_NTZ) AS ntz",
        "array(ts, NULL) AS a", "named_struct('d', dt, 's', CAST(dt AS STRING)) AS s", "map('k', ts) AS m",
        "ts - TIMESTAMP'1970-01-01 00:00:00' AS i", "CAST(unix_date(dt) AS DECIMAL(38, 18)) / 7 AS q", "_w")
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", "collect_arrow")
    try:
        got = zsets.collect_arrow(df)
        assert not spark.sparkContext.statusTracker().getJobIdsForGroup("collect_arrow")
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    want = df.toArrow()
    assert got.schema == want.schema and got.equals(want), f"{got.to_pydict()} vs {want.to_pydict()}"


@given(data=st.data())
@SETTINGS
def test_python_rows_are_to_arrow_without_a_job(spark, new_york, data):
    """A DataFrame ``createDataFrame`` made of Python rows of every type the kernels meet
    (and of adversarial values: NaN, -0.0, limits, wide decimals, times in New York),
    with columns picked and renamed, is read as ``toArrow`` gives it, without a job, nested
    types too; one whose rows a Python function, a filter or another lineage makes is not."""
    ddl = ", ".join(f"c{i} {t}" for i, t in enumerate(TYPES))
    schema = _schema(ddl)
    rows = data.draw(st.lists(st.tuples(*(values(f.dataType) for f in schema.fields)), max_size=12))
    df = spark.createDataFrame(rows, schema)
    picked = df.select("c3", F.col("c0").alias("x"), "c10").select(F.col("x").alias("y"), "c10", "x")
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", "python_rows")
    try:
        got = [zsets.python_rows(d) for d in (df, picked)]
        assert not spark.sparkContext.statusTracker().getJobIdsForGroup("python_rows")
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    for table, d in zip(got, (df, picked)):
        want = d.toArrow()
        assert table is not None and table.schema == want.schema
        assert compare_exact(table, want) is None, compare_exact(table, want)
    given = spark.sparkContext.parallelize(rows or [tuple([None] * len(TYPES))])
    assert zsets.python_rows(spark.createDataFrame(given.map(lambda r: r), schema)) is None
    # other lineages: rows moved in the JVM, JSON read from Python strings, a checkpoint
    assert zsets.python_rows(spark.createDataFrame(given.coalesce(1), schema)) is None
    assert zsets.python_rows(spark.read.json(spark.sparkContext.parallelize(['{"a": 1}']))) is None
    assert zsets.python_rows(df.localCheckpoint()) is None
    assert zsets.python_rows(df.filter("c2 IS NULL")) is None
    assert zsets.python_rows(df.selectExpr("c2 + 1 AS c2")) is None
    nested = spark.createDataFrame([([1], {"k": 2.5}, (3, "x"))],
                                   "a ARRAY<INT>, m MAP<STRING, DOUBLE>, s STRUCT<i: INT, t: STRING>")
    assert compare_exact(zsets.python_rows(nested), nested.toArrow()) is None


def test_python_rows_step_through_fields_of_their_own_class_only(spark, monkeypatch):
    """A field a read steps through is looked up on an RDD of the class it names: an RDD
    of another class with a field of that name is refused, and the field is not kept in
    its place (so the next DataFrame of Python rows is still read)."""
    monkeypatch.setattr(zsets._Jvm, "_seen", {})
    df = spark.createDataFrame([(1, "a"), (2, None)], "k INT, s STRING")
    jvm = zsets._Jvm.of(spark)
    python_rdd = jvm.python_rdd(df._jdf.logicalPlan().collectLeaves().apply(0).rdd())
    parallel = python_rdd.firstParent(jvm.tag)  # a ParallelCollectionRDD, with a field "data"
    with pytest.raises(zsets._OtherLineage):
        jvm.private(parallel, "SomeOtherRDD", "data")
    assert ("SomeOtherRDD", "data") not in jvm.fields
    got = zsets.python_rows(df)
    assert got is not None and got.equals(df.toArrow())


#: Python values where Arrow's reading could differ from Spark's ``toInternal``: a
#: datetime given for a DATE (Spark keeps its day), an aware one for a TIMESTAMP_NTZ
#: (Spark keeps its wall clock), naive and aware ones for a TIMESTAMP
_IN_NEW_YORK = [t.astimezone(ZoneInfo(NEW_YORK)) for t in TIMESTAMPS if 1 < t.year < 9999]
_GIVEN = {
    "DATE": st.one_of(values(DateType()), st.sampled_from(TIMESTAMPS + [t.replace(tzinfo=None) for t in _IN_NEW_YORK])),
    "TIMESTAMP_NTZ": st.one_of(st.none(), st.sampled_from(TIMESTAMPS + _IN_NEW_YORK)),
    "TIMESTAMP": st.sampled_from(TIMESTAMPS + [t.replace(tzinfo=None) for t in TIMESTAMPS]),
}


@given(data=st.data())
@SETTINGS
def test_python_values_are_read_as_create_dataframe_reads_them(spark, new_york, data):
    """Rows of Python values (as ``Pipeline.step`` takes them) become the Arrow table
    ``createDataFrame`` of the same rows gives, in one pass or column by column: every
    kernel type, and values Arrow could read otherwise than Spark."""
    types = TYPES + list(_GIVEN)
    schema = _schema(", ".join(f"c{i} {t}" for i, t in enumerate(types)))
    rows = data.draw(st.lists(st.tuples(*(_GIVEN[t] if t in _GIVEN and i >= len(TYPES) else values(f.dataType)
                                          for i, (t, f) in enumerate(zip(types, schema.fields)))), max_size=12))
    ntz = types.index("TIMESTAMP_NTZ")  # read per value: without it, in one pass
    one_pass = StructType([f for i, f in enumerate(schema.fields) if i != ntz])
    for schema, rows in ((schema, rows), (one_pass, [r[:ntz] + r[ntz + 1:] for r in rows])):
        got = zsets.arrow_rows(schema, rows)
        want = spark.createDataFrame(rows, schema).toArrow()
        assert got is not None and got.schema == want.schema
        assert compare_exact(got, want) is None, compare_exact(got, want)


def test_collect_arrow_cut_short_takes_to_arrow(spark, monkeypatch):
    """When the stream of a local relation's batches ends early (its serving thread
    failed), the rows are not taken for all of them: ``toArrow`` collects them again."""
    streamed = zsets._load_from_socket

    @contextmanager
    def first_batch_only(served, serializer):
        with streamed(served, serializer) as batches:
            yield list(batches)[:1]

    monkeypatch.setattr(zsets, "_load_from_socket", first_batch_only)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
    try:
        df = spark.createDataFrame(pa.table({"x": list(range(5))})).selectExpr("x * 2 AS y")
        got = zsets.collect_arrow(df)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert got.column("y").to_pylist() == [0, 2, 4, 6, 8]


@pytest.mark.parametrize("zone", [NEW_YORK, "America/Sao_Paulo", "Pacific/Apia"])
def test_midnights_are_spark_s_cast_of_a_date_to_timestamp(spark, zone):
    """Where a day starts, and which day starts at an instant, as Spark's cast of a DATE to
    TIMESTAMP says in the session's time zone, past 2037 too (Arrow's time zones keep no
    daylight saving time there): on the days around every change of the zone's offset, in
    years 1 to 9999, and on instants a microsecond and an hour either side of their start.
    Where a zone skipped a day (Apia, 2011-12-30), one instant starts two: declined."""
    midnights = zsets.midnights(spark, zone)
    rng = np.random.default_rng(0)
    days = np.unique(np.concatenate([midnights.days[1:] + shift for shift in (-1, 0, 1)]
                                    + [rng.integers(*zsets.MIDNIGHT_DAYS, 2000), zsets.MIDNIGHT_DAYS[:1]]))
    session = spark.newSession()
    session.conf.set("spark.sql.session.timeZone", zone)
    frame = session.createDataFrame(pa.table({"d": pa.array(days.astype(np.int32)).view(pa.date32())}))
    want = frame.selectExpr("unix_micros(CAST(d AS TIMESTAMP)) AS m").toArrow().column("m").to_numpy()
    assert np.array_equal(midnights.starts(days), want)
    instants = np.concatenate([want + shift for shift in (0, 1, -1, 3_600_000_000, -3_600_000_000)])
    instants = instants[instants >= want[0]]  # none before the first day known starts
    frame = session.createDataFrame(pa.table({"t": pa.array(instants).view(kernels.INSTANT)}))
    found = frame.selectExpr("unix_date(CAST(t AS DATE)) AS d", "CAST(CAST(t AS DATE) AS TIMESTAMP) = t AS starts",
                             "CAST(date_sub(CAST(t AS DATE), 1) AS TIMESTAMP) = t AS twice").toArrow()
    twice = found.column("twice").to_numpy(zero_copy_only=False)
    assert twice.any() == (zone == "Pacific/Apia")
    if twice.any():
        with pytest.raises(kernels.UnsupportedKey):
            midnights.day_starting(instants[twice])
    day, starts = midnights.day_starting(instants[~twice])
    assert np.array_equal(starts, found.column("starts").to_numpy(zero_copy_only=False)[~twice])
    assert np.array_equal(day[starts], found.column("d").to_numpy()[~twice][starts])
    # the day every instant falls on (Spark's CAST to DATE), a skipped day's start included
    on = kernels.day_cast(pa.array(instants).view(kernels.INSTANT), pa.date32(), midnights)
    assert np.array_equal(on.view(pa.int32()).to_numpy(), found.column("d").to_numpy())


def test_an_arrow_table_with_an_empty_batch_in_the_middle_reaches_spark_whole(spark):
    """PySpark's ``createDataFrame`` read a table's batches only up to the first empty
    one: a union of deltas, one of them empty, lost the rows after it."""
    part = pa.table({"k": pa.array([1, 2], pa.int32()), "s": pa.array(["x", None]), WEIGHT: pa.array([1, -1])})
    table = pa.concat_tables([part, part.slice(0, 0), part.slice(1)])
    assert [b.num_rows for b in table.to_batches()] == [2, 0, 1]
    assert sorted(map(tuple, zsets.arrow_frame(spark, table).collect()), key=repr) == sorted(
        [(1, "x", 1), (2, None, -1), (2, None, -1)], key=repr)
    nested = pa.table({"a": pa.chunked_array([], pa.list_(pa.int32()))})
    assert zsets.arrow_frame(spark, nested).count() == 0
