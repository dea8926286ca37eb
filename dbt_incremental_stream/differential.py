"""Differential checking: a pipeline against the same SQL run in batch.

:class:`Differential`: after every tick each view's snapshot must equal, as a bag (NULLs
included), what DuckDB returns for the view's SQL (transpiled by sqlglot) over all input
so far, floats and decimals to ~6 digits. Used by the test suite on random workloads,
and usable on any pipeline to check a model.

:class:`Twin`: the exact check. Two pipelines, one per placement ("auto": small ticks on
Arrow kernels in the driver; "dataframe": every tick in Spark), against Spark itself
running the SQL in batch (:class:`SparkOracle`, with the engine session's ANSI mode and
time zone), compared by :func:`compare_exact` — types included, floats by one rule —
after every tick; a data error in batch must be a failed view in the engine.
"""
from __future__ import annotations

import re

import math
import random
import struct
import traceback
from concurrent.futures import Future
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Collection, Iterable, Mapping, Sequence

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType, TimestampType

from .circuit.operators import WEIGHT, quote
from .catalog import quote_relation
from .project import CHANGELOG_COLUMNS, CHANGELOG_TABLE, Project
from .errors import StreamError
from .process import threads
from .runtime.arrow import kernels
from .runtime.spark import zsets
from .runtime.circuit import coerce_row
from .runtime.pipeline import Pipeline
from .runtime.ticks import Clock, data_error
from .runtime.spark.session import share_functions
from .runtime.spark.zsets import arrow_frame, arrow_rows, arrow_schema, expand, pack
from .sql.relations import DIALECT, engine_name, rename
from .sql.rewrites.clock import with_clock
from .sql.rewrites.total_order import total_order
from .sql.temporal import CLOCK

Row = tuple[Any, ...]
Change = tuple[Sequence[Any], int]


class Mismatch(AssertionError):
    """A view differs from the batch result; the message lists the differing rows (a
    :class:`Twin`'s lists every finding of the tick, also as ``findings``)."""

    findings: Sequence[Finding] = ()


class Oracle:
    """Integrated inputs kept in Python and queried in batch by DuckDB."""

    def __init__(self) -> None:
        self.con = duckdb.connect()
        self.con.execute("SET TimeZone = 'UTC'")  # as the engine's Spark session
        self.inputs: dict[str, Counter[Row]] = {}
        self._schemas: dict[str, StructType] = {}
        self._dirty: set[str] = set()

    def add_source(self, name: str, schema: StructType) -> None:
        self._schemas[name] = schema
        self.inputs[name] = Counter()
        self._dirty.add(name)
        self._load()

    def add_view(self, name: str, sql: str) -> None:
        duck_sql = total_order(with_clock(sqlglot.parse_one(sql, read=DIALECT))).transform(_spark_only).sql("duckdb")
        self.con.execute(f'CREATE VIEW "{name}" AS {duck_sql}')

    def apply(self, source: str, changes: Iterable[Change]) -> None:
        rows = self.inputs[source]
        for row, weight in changes:
            rows[tuple(row)] += weight
            if rows[tuple(row)] == 0:
                del rows[tuple(row)]
        self._dirty.add(source)

    def replace(self, source: str, rows: Iterable[Row]) -> None:
        self.inputs[source] = Counter(tuple(r) for r in rows)
        self._dirty.add(source)

    def query(self, sql: str) -> list[Row]:
        self._load()
        return [tuple(r) for r in self.con.execute(sql).fetchall()]

    def _load(self) -> None:
        for name in sorted(self._dirty):
            schema = self._schemas[name]
            cols = ", ".join(f'"{f.name}" {_duck_type(f.dataType.simpleString())}' for f in schema.fields)
            self.con.execute(f'CREATE OR REPLACE TABLE "{name}" ({cols})')
            negative = [r for r, w in self.inputs[name].items() if w < 0]
            if negative:
                raise ValueError(f"source {name} has rows with negative multiplicity: {negative[:3]}")
            data = [r for r, w in self.inputs[name].items() for _ in range(w)]
            if data:
                self._insert(name, schema, data)
        self._dirty.clear()

    def _insert(self, name: str, schema: StructType, data: list[Row]) -> None:
        """Rows into DuckDB as one Arrow table (row by row takes minutes at 100k rows); row
        by row only when a value does not convert to the column's Arrow type."""
        arrow = arrow_schema(schema)
        try:
            table = pa.Table.from_arrays([pa.array([r[i] for r in data], type=f.type) for i, f in enumerate(arrow)],
                                         schema=arrow)
        except (pa.ArrowException, TypeError, ValueError):
            marks = ", ".join("?" for _ in schema.fields)
            self.con.executemany(f'INSERT INTO "{name}" VALUES ({marks})', data)
            return
        self.con.register("_rows", table)
        try:
            self.con.execute(f'INSERT INTO "{name}" SELECT * FROM _rows')
        finally:
            self.con.unregister("_rows")


def _spark_only(node: exp.Expr) -> exp.Expr:
    """Spark functions sqlglot leaves untranslated, as DuckDB says them."""
    if isinstance(node, exp.Anonymous) and str(node.name).lower() == "raise_error":
        return exp.func("error", *(e.transform(_spark_only) for e in node.expressions))
    if isinstance(node, exp.Anonymous) and str(node.name).lower() == "assert_true":  # NULL, or fails
        args = [e.transform(_spark_only) for e in node.expressions]
        message = args[1] if len(args) > 1 else exp.Literal.string("assertion failed")
        return exp.Case(ifs=[exp.If(this=args[0], true=exp.Null())], default=exp.func("error", message))
    if isinstance(node, exp.Anonymous) and str(node.name).lower() == "timestamp_seconds":
        return exp.cast(exp.UnixToTime(this=node.expressions[0].transform(_spark_only)), "timestamp")
    if isinstance(node, exp.UnixSeconds):  # Spark truncates; sqlglot's CAST(EPOCH(...) AS BIGINT) rounds
        return exp.cast(exp.Floor(this=exp.func("epoch", node.this)), "bigint")
    return node


def _duck_type(spark_type: str) -> str:
    return sqlglot.exp.DataType.build(spark_type, dialect="spark").sql("duckdb")


@dataclass
class Differential:
    """Drives a :class:`Pipeline` and an :class:`Oracle` with the same changes and
    compares every view after every tick."""

    spark: SparkSession
    state_location: str
    sources: Mapping[str, str | StructType]
    views: Mapping[str, str]
    max_batches: int = 8
    expire: Collection[str] = ()  # sources declared ``expire`` (see Pipeline.add_source)
    placement: str = "auto"  # where the pipeline's ticks run (see Pipeline)
    #: how each tick's changes reach the pipeline: "rows" ((values, weight) pairs) or
    #: "dataframe" (``spark.createDataFrame`` of them with a weight column, as user code makes one)
    form: str = "rows"
    pipeline: Pipeline = field(init=False)
    oracle: Oracle = field(init=False)

    def __post_init__(self) -> None:
        self.pipeline = Pipeline(self.spark, self.state_location, max_batches=self.max_batches,
                                 placement=self.placement)
        self.oracle = Oracle()
        for name, schema in self.sources.items():
            self.pipeline.add_source(name, schema, expire=name in self.expire)
            self.oracle.add_source(name, self.pipeline.circuit.sources[name])
        for name, sql in self.views.items():
            self.add_view(name, sql)

    def add_view(self, name: str, sql: str) -> None:
        self.views = {**self.views, name: sql}
        self.pipeline.add_view(name, sql)
        if CLOCK in self.pipeline.circuit.sources and CLOCK not in self.oracle.inputs:
            self.oracle.add_source(CLOCK, self.pipeline.circuit.sources[CLOCK])
        self.oracle.add_view(name, sql)

    def rows(self, source: str) -> list[Row]:
        """The source's current contents as a list (with repeats)."""
        return list(self.oracle.inputs[source].elements())

    def step(self, changes: Mapping[str, Sequence[Change]], check: bool = True, now: datetime | None = None) -> None:
        """One tick of ``changes`` on both sides; ``now`` is the time views read."""
        coerced = {s: [(self._coerce(s, r), w) for r, w in c] for s, c in changes.items()}
        self.pipeline.step({s: self._handed_over(s, c) for s, c in coerced.items() if c}, now=now)
        if CLOCK in self.oracle.inputs:
            self.oracle.replace(CLOCK, [(self.pipeline.now,)])
        for source, c in coerced.items():
            self.oracle.apply(source, c)
        if check:
            self.check()

    def _handed_over(self, source: str, changes: Sequence[Change]) -> Sequence[Change] | DataFrame:
        if self.form == "rows":
            return changes
        schema = zsets.with_weight(self.pipeline.schema(source))
        return self.spark.createDataFrame([(*r, w) for r, w in changes], schema)

    def _coerce(self, source: str, row: Sequence[Any]) -> Row:
        return coerce_row(self.pipeline.circuit.sources[source], row)

    def check(self, names: Iterable[str] | None = None) -> None:
        names = list(names or self.views)
        snapshots = self._collect(names)
        for name in names:
            got = snapshots[name]
            want = self.oracle.query(f'SELECT * FROM "{name}"')
            problem = compare(got, want)
            if problem:
                raise Mismatch(f"view {name!r} after tick {self.pipeline.tick}: {problem}\n"
                               f"SQL: {self.views.get(name, '?')}")

    def _collect(self, names: list[str]) -> dict[str, list[Row]]:
        """Every view's snapshot in one Spark job (a struct column per view)."""
        columns = {n: f"__s{i}" for i, n in enumerate(names)}
        out: dict[str, list[Row]] = {n: [] for n in names}
        if names:
            packed = pack({n: self.pipeline.snapshot(n) for n in names}, columns, "__v")
            for row in packed.collect():
                out[row["__v"]].append(tuple(row[columns[row["__v"]]]))
        return out

    def close(self) -> None:
        self.pipeline.close()


def replay(spark: SparkSession, state_location: str, inputs: Mapping[str, DataFrame], name: str, sql: str, *,
           ticks: int = 4, seed: int = 0) -> int:
    """Run ``sql`` incrementally over its inputs' current rows, fed in ``ticks`` ticks with
    some rows deleted and put back a tick later (an update, seen as a delete and an
    insert), and compare it with DuckDB after every tick; the last tick leaves every input
    complete. Returns the number of ticks; raises :class:`Mismatch`."""
    rng = random.Random(seed)
    diff = Differential(spark, state_location, sources={n: df.schema for n, df in inputs.items()}, views={name: sql})
    try:
        pending = {n: [tuple(r) for r in df.collect()] for n, df in inputs.items()}
        for rows in pending.values():
            rng.shuffle(rows)
        present: dict[str, list[Row]] = {n: [] for n in inputs}
        held: dict[str, list[Row]] = {n: [] for n in inputs}
        for t in range(ticks):
            changes: dict[str, Sequence[Change]] = {}
            for n in inputs:
                new = pending[n][t::ticks] + held[n]
                present[n] += new
                held[n] = [] if t == ticks - 1 else rng.sample(present[n], k=len(present[n]) // 10)
                for r in held[n]:
                    present[n].remove(r)
                changes[n] = [(r, 1) for r in new] + [(r, -1) for r in held[n]]
            diff.step(changes)
    finally:
        diff.close()
    return ticks


def check_project(project: Project) -> dict[str, str | None]:
    """Every model of a project against its SQL run in batch by DuckDB over the current
    contents of the project's sources: per model, None or what differs (or how the batch query fails).

    A ``streaming_view`` is compared as published in the catalog; a ``changelog_table`` by
    summing its changes. Meaningful right after a tick, while no source changed since.
    """
    spark, pipe = project.spark, project.pipe
    oracle = Oracle()
    for rel in project.table_sources + project.stream_sources:  # a Kafka source as published
        name = engine_name(rel)
        oracle.add_source(name, pipe.schema(name))
        oracle.replace(name, [tuple(r) for r in spark.table(quote_relation(rel)).collect()])
    if pipe.reads_time:
        oracle.add_source(CLOCK, pipe.schema(CLOCK))
        oracle.replace(CLOCK, [(pipe.now,)])
    problems: dict[str, str | None] = {}
    for m in project.ordered():
        oracle.add_view(m.name, rename(m.sql, {r: engine_name(r) for r in m.reads}, tree=m.tree))
        table = spark.table(quote_relation(m.relation))
        if m.kind == CHANGELOG_TABLE:
            columns = [quote(c) for c in table.columns if c not in CHANGELOG_COLUMNS]
            integral = table.groupBy(*columns).agg(F.sum("_weight").alias(WEIGHT)).where(f"{WEIGHT} <> 0")
            table = expand(integral)
        try:
            want = oracle.query(f'SELECT * FROM "{m.name}"')
        except duckdb.Error as e:  # the batch query fails on this input too (raise_error, ...)
            problems[m.relation] = f"in batch: {e}"
            continue
        problems[m.relation] = compare([tuple(r) for r in table.collect()], want)
    return problems


# --- bag comparison with numeric tolerance -------------------------------------------


def _norm(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (Decimal, float, int)):
        return float(v)
    if isinstance(v, datetime):
        return v.replace(tzinfo=None).isoformat()
    if isinstance(v, date):
        return v.isoformat()
    return v


def _sort_key(row: Row) -> tuple:
    """Rows ordered by their values to ~4 significant digits, then exactly: rows equal
    within tolerance line up, and ties on the rounded values break the same way on both sides."""
    rough: list[tuple[int, str | float]] = []
    exact: list[tuple[int, str | float]] = []
    for v in row:
        if v is None:
            rough.append((0, ""))
            exact.append((0, ""))
        elif isinstance(v, float):
            rough.append((1, float(f"{v:.4g}") if math.isfinite(v) else v))
            exact.append((1, v))
        else:
            rough.append((2, str(v)))
            exact.append((2, str(v)))
    return tuple(rough), tuple(exact)


def _close(a: Any, b: Any) -> bool:
    # abs_tol: Spark rounds a DECIMAL division to 6 decimal places, DuckDB divides in DOUBLE
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6) or (math.isnan(a) and math.isnan(b))
    return a == b


def compare(got: Sequence[Row], want: Sequence[Row]) -> str | None:
    """None when the bags are equal (floats and decimals to ~6 significant digits), else
    a description of the rows that differ."""
    g = sorted((tuple(map(_norm, r)) for r in got), key=_sort_key)
    w = sorted((tuple(map(_norm, r)) for r in want), key=_sort_key)
    if len(g) == len(w) and all(len(a) == len(b) and all(map(_close, a, b)) for a, b in zip(g, w)):
        return None
    extra, missing = Counter(g) - Counter(w), Counter(w) - Counter(g)
    if not extra and not missing:  # the same rows, so only the order could differ: not expected
        raise AssertionError(f"rows equal as bags but not aligned after sorting: {g[:3]} / {w[:3]}")
    return (f"{len(g)} rows vs {len(w)} in batch; only incremental: {sorted(extra.elements(), key=_sort_key)[:10]}; "
            f"only batch: {sorted(missing.elements(), key=_sort_key)[:10]}")



# --- the twin harness: both placements against Spark itself, exactly -------------------

#: the settings of the engine's session that decide a query's answer, copied to the oracle's
ORACLE_CONF = ("spark.sql.ansi.enabled", "spark.sql.session.timeZone", "spark.sql.legacy.statisticalAggregate",
               "spark.sql.cteRecursionLevelLimit")
#: the placements a :class:`Twin` runs side by side
TWIN_PLACEMENTS = ("auto", "dataframe")
#: the path a tick after the first takes on arrangements, per placement
ARRANGED_PATH = {"auto": "arranged", "tasks": "tasks"}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICRO = timedelta(microseconds=1)


class _Micros(int):
    """A timestamp as Spark stores it (microseconds since the epoch, UTC): compared as the
    integer, shown as the instant."""

    def __repr__(self) -> str:
        try:
            return (_EPOCH + int(self) * _MICRO).isoformat().replace("+00:00", "Z")
        except OverflowError:
            return f"{int(self)}us"


class _Days(int):
    """A date as Spark stores it (days since 1970-01-01): compared as the integer, shown as the date."""

    def __repr__(self) -> str:
        try:
            return (date(1970, 1, 1) + timedelta(days=int(self))).isoformat()
        except OverflowError:
            return f"{int(self)}d"


def float_equal(a: float, b: float) -> bool:
    """The one rule for floating point (see :func:`compare_exact`)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    if a == 0 and b == 0:
        return math.copysign(1, a) == math.copysign(1, b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _value_equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return float_equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(map(_value_equal, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_value_equal(a[k], b[k]) for k in a)
    return _exact_key(a) == _exact_key(b)


def _exact_key(v: Any) -> Any:
    """A hashable key equal for values that are the same exactly: floats by their bits
    (every NaN one value, -0.0 apart from 0.0), decimals by value, the rest as they are."""
    if v is None:
        return (0,)
    if isinstance(v, float):
        return (1, "nan") if math.isnan(v) else (1, struct.pack("<d", v))
    if isinstance(v, bool):
        return (2, v)
    if isinstance(v, (_Micros, _Days)):
        return (3, type(v).__name__, int(v))
    if isinstance(v, datetime):  # inside a nested value
        return (3, "_Micros", _micros(v))
    if isinstance(v, (int, Decimal)):
        return (4, v)
    if isinstance(v, (list, tuple)):
        return (5, tuple(map(_exact_key, v)))
    if isinstance(v, dict):
        return (6, tuple(sorted((repr(k), _exact_key(x)) for k, x in v.items())))
    return (7, type(v).__name__, v)


def _shape_key(v: Any) -> Any:
    """:func:`_exact_key` with every float one value: rows with equal keys differ, if at
    all, in their floats."""
    if isinstance(v, float):
        return (1,)
    if isinstance(v, (list, tuple)):
        return (5, len(v), tuple(map(_shape_key, v)))
    if isinstance(v, dict):
        return (6, tuple(sorted((repr(k), _shape_key(x)) for k, x in v.items())))
    return _exact_key(v)


def _micros(v: datetime) -> int:
    if v.tzinfo is None:  # Arrow gives naive datetimes for timestamps without a zone: UTC
        v = v.replace(tzinfo=timezone.utc)
    return (v - _EPOCH) // _MICRO


def _table_rows(table: pa.Table) -> list[Row]:
    """Rows of Python values, timestamps as int64 microseconds and dates as int32 days
    (exact, and defined beyond Python's datetime range)."""
    columns: list[list[Any]] = []
    for column in table.columns:
        t = column.type
        if pa.types.is_timestamp(t):
            columns.append([None if v is None else _Micros(v) for v in column.cast(pa.int64()).to_pylist()])
        elif pa.types.is_date32(t):
            columns.append([None if v is None else _Days(v) for v in column.cast(pa.int32()).to_pylist()])
        else:
            columns.append(column.to_pylist())
    return list(zip(*columns)) if columns else [() for _ in range(table.num_rows)]


def scan_order_zeros(sql: str) -> frozenset[int]:
    """Positions of a view's output columns that are a MIN or MAX (aggregate or window).

    Spark orders -0.0 and 0.0 as equal and its MIN/MAX keep the value met first, so over
    a group holding both zeros its answer is whichever its scan met first: [0.0, -0.0]
    gives 0.0, [-0.0, 0.0] gives -0.0. A stream has no such order, so there either zero
    is Spark's answer. Only columns that are the MIN/MAX itself count (none of a ``*``
    list): a zero computed further from one is compared as any other value."""
    tree = sqlglot.parse_one(sql, read=DIALECT)
    if not isinstance(tree, exp.Select) or any(isinstance(e, exp.Star) for e in tree.expressions):
        return frozenset()
    picks = (exp.Min, exp.Max)
    return frozenset(i for i, e in enumerate(tree.expressions)
                     if isinstance(u := e.unalias(), picks) or isinstance(u, exp.Window) and isinstance(u.this, picks))


def _nullable_inside(t: pa.DataType) -> str:
    """A type's text with every element, value and field of its nested types nullable."""
    return re.sub(r" not null", "", str(t))


def compare_exact(got: pa.Table, want: pa.Table, either_zero: Collection[int] = ()) -> str | None:
    """None when ``got`` equals ``want`` as a bag of rows (multiplicities count), else what differs.

    Column names and Arrow types must be equal (a DECIMAL(38,18) where Spark says
    DECIMAL(38,6) is a difference, whatever the values), but for whether a nested type's
    elements and fields may be NULL: a view's columns are cast to its types as Spark's
    DDL writes them, and the DDL cannot say ``containsNull=false``. Values compare exactly — decimals
    by value, timestamps as their int64 microseconds, dates as their days, strings by
    their code points — except floating point, by one rule: two floats are equal when
    both are NaN, or both are the same infinity, or both are zeros of the same sign
    (-0.0 vs 0.0 is a difference), or both are finite, not both zero, and
    ``math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)``. The tolerance is there because
    Spark itself sums floats in partition order, so SUM or AVG of doubles may differ from
    another evaluation in the last bits; it hides nothing larger.

    In the float columns at the positions ``either_zero`` (:func:`scan_order_zeros`),
    -0.0 and 0.0 are one value.

    The description names up to 10 rows found only on each side.
    """
    if either_zero:
        got, want = _one_zero(got, either_zero), _one_zero(want, either_zero)
    problems = []
    g_names, w_names = got.schema.names, want.schema.names
    if g_names != w_names:
        problems.append(f"columns {g_names} vs {w_names} in batch")
    g_types = [_nullable_inside(t) for t in got.schema.types]
    w_types = [_nullable_inside(t) for t in want.schema.types]
    if g_types != w_types:
        differ = [f"{w_names[i] if i < len(w_names) else i}: {g} vs {w}"
                  for i, (g, w) in enumerate(zip(g_types, w_types)) if g != w]
        problems.append(f"types differ ({'; '.join(differ) or f'{g_types} vs {w_types}'})")
    g_rows, w_rows = _table_rows(got), _table_rows(want)
    only_got, only_want = _bag_difference(g_rows, w_rows)
    if only_got or only_want:
        problems.append(f"{len(g_rows)} rows vs {len(w_rows)} in batch; "
                        f"only engine ({len(only_got)}): {_show(only_got)}; "
                        f"only batch ({len(only_want)}): {_show(only_want)}")
    return "; ".join(problems) or None


def _one_zero(table: pa.Table, positions: Collection[int]) -> pa.Table:
    """The table with -0.0 as 0.0 in the float columns at ``positions`` (normalized as
    Spark's keys are: :func:`.kernels.normal_float`)."""
    for i in positions:
        if i < table.num_columns:
            table = table.set_column(i, table.schema.field(i), kernels.normal_float(table.column(i)))
    return table


def _show(rows: list[Row], limit: int = 10) -> str:
    return "[" + ", ".join(map(repr, rows[:limit])) + (", ..." if len(rows) > limit else "") + "]"


def _bag_difference(got: list[Row], want: list[Row]) -> tuple[list[Row], list[Row]]:
    """Rows of each side without a partner on the other: exact matches first, then the
    rest paired by :func:`float_equal` (a maximum matching, so the pairing found does not
    depend on the order rows came in)."""
    pending: dict[Any, list[Row]] = {}
    for row in want:
        pending.setdefault(_exact_key(row), []).append(row)
    rest_got = []
    for row in got:
        same = pending.get(_exact_key(row))
        if same:
            same.pop()
        else:
            rest_got.append(row)
    rest_want = [r for rows in pending.values() for r in rows]
    if not rest_got or not rest_want:
        return rest_got, rest_want
    # two rows can be equal by the rule only where all but their floats are the same exactly
    alike: dict[Any, list[int]] = {}
    for j, w in enumerate(rest_want):
        alike.setdefault(_shape_key(w), []).append(j)
    candidates = [alike.get(_shape_key(g), []) for g in rest_got]
    # a row alike only one other is checked against it alone; rows alike many others pair by
    # a matching, whose edges are checked each: too many of those are shown as they are
    if sum(len(c) for c in candidates if len(c) > 1) > 250_000:
        return rest_got, rest_want
    edges = [[j for j in js if all(map(_value_equal, g, rest_want[j]))] for g, js in zip(rest_got, candidates)]
    partner: dict[int, int] = {}  # want index → got index (augmenting paths: at most len(rest_got) deep)

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j not in seen:
                seen.add(j)
                if j not in partner or augment(partner[j], seen):
                    partner[j] = i
                    return True
        return False

    for i in range(len(rest_got)):
        augment(i, set())
    paired = set(partner.values())
    return ([r for i, r in enumerate(rest_got) if i not in paired],
            [r for j, r in enumerate(rest_want) if j not in partner])


def _batch_sql(sql: str) -> str:
    """A view's SQL as the oracle runs it: an ORDER BY feeding a LIMIT extended by every
    output column, NULLs first (:func:`total_order`, as the engine breaks ties), so a
    LIMIT picks the same rows; any other SQL verbatim."""
    tree = sqlglot.parse_one(sql, read=DIALECT)
    batch = total_order(with_clock(tree))
    return sql if batch == tree else batch.sql(dialect=DIALECT)


def _packed_arrow(frames: Mapping[str, DataFrame]) -> dict[str, pa.Table]:
    """Several DataFrames collected as Arrow in one Spark job (:func:`pack`)."""
    if not frames:
        return {}
    columns = {n: f"__s{i}" for i, n in enumerate(frames)}
    # as the JVM sends them: toArrow's cast to the declared schema refuses a struct whose
    # non-nullable field is NULL where the struct is (the other frames' rows)
    batches = pack(dict(frames), columns, "__v")._collect_as_arrow(  # type: ignore[operator]
        empty_list_if_zero_records=False)
    packed = pa.Table.from_batches(batches)
    tags = packed.column("__v")
    out = {}
    for name, column in columns.items():
        part = packed.filter(pc.equal(tags, name)).column(column)
        array = part.combine_chunks() if part.num_chunks else pa.array([], part.type)
        table = pa.Table.from_struct_array(array)
        declared = arrow_schema(frames[name].schema)  # toArrow's types: timestamps in UTC
        out[name] = table.cast(pa.schema([f.with_nullable(True) for f in declared]))
    return out


class SparkOracle:
    """Integrated inputs, queried in batch by Spark itself.

    Each source's input is kept integrated (weights summed per distinct row, rows told
    apart exactly: -0.0 is not 0.0, 'é' is not 'e\\u0301'). A query runs in a session of
    its own (``spark.newSession()``: its own temp views, the same SparkContext) with the
    answer-deciding settings of ``spark`` (:data:`ORACLE_CONF`) copied just before. The
    sources' temp views are made from Arrow tables, so no value passes through the
    process's local time; each view's SQL is a temp view too, in the order added, so
    views read earlier views as in the engine.
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.session = spark.newSession()
        self.schemas: dict[str, StructType] = {}
        self.views: dict[str, str] = {}  # view → the SQL run in batch
        self._inputs: dict[str, dict[Any, list[Any]]] = {}  # source → exact key → [row, weight]
        self._dirty: set[str] = set()
        self._registered: tuple[tuple[str, str | None], ...] | None = None  # the settings views were analysed with
        self._shared = False  # whether the user's functions are copied in for the views as they are

    def add_source(self, name: str, schema: StructType) -> None:
        self.schemas[name] = schema
        self._inputs[name] = {}
        self._dirty.add(name)

    def add_view(self, name: str, sql: str) -> None:
        self.views[name] = _batch_sql(sql)
        self._registered = None
        self._shared = False  # the functions it calls may be new

    def integrate(self, source: str, delta: pa.Table) -> None:
        """Add a delta (the source's columns, then ``_w``) to the source's input."""
        weights = delta.column(WEIGHT).to_pylist()
        data = delta.select([c for c in delta.column_names if c != WEIGHT])
        self.apply(source, zip(_python_rows(data), weights))

    def apply(self, source: str, changes: Iterable[Change]) -> None:
        rows = self._inputs[source]
        for row, weight in changes:
            row = tuple(row)
            entry = rows.setdefault(_exact_key(row), [row, 0])
            entry[1] += int(weight)
            if entry[1] == 0:
                del rows[_exact_key(row)]
        self._dirty.add(source)

    def rows(self, source: str) -> list[Row]:
        """The source's current contents as a list (with repeats)."""
        return [row for row, w in self._inputs[source].values() for _ in range(max(w, 0))]

    def table(self, source: str) -> pa.Table:
        """The source's current contents as Arrow (a row per unit of weight)."""
        negative = [r for r, w in self._inputs[source].values() if w < 0]
        if negative:
            raise ValueError(f"source {source} has rows with negative multiplicity: {negative[:3]}")
        return arrow_rows(self.schemas[source], self.rows(source))

    def _prepare(self) -> None:
        settings = tuple((k, self.spark.conf.get(k)) for k in ORACLE_CONF)
        for key, value in settings:
            if value is not None:
                self.session.conf.set(key, value)
        for name in sorted(self._dirty):
            arrow_frame(self.session, self.table(name), self.schemas[name]).createOrReplaceTempView(name)
        if self._dirty or self._registered != settings:  # analysed again: types follow the settings
            self._register_views()
        self._dirty.clear()
        self._registered = settings

    def _register_views(self) -> None:
        """Every view analysed under the session's settings now; the user's functions are
        copied in once per set of views (this runs each tick a source changes)."""
        if not self._shared:
            share_functions(self.spark, self.session)
            self._shared = True
        for name, sql in self.views.items():
            self.session.sql(sql).createOrReplaceTempView(name)

    def query(self, sql: str) -> pa.Table:
        """Any SQL over the sources and views, as Arrow."""
        self._prepare()
        return self.session.sql(sql).toArrow()

    def schema(self, name: str) -> StructType:
        self._prepare()
        return self.session.table(name).schema

    def results(self, names: Iterable[str] | None = None) -> dict[str, pa.Table | str]:
        """Every view's batch result, or the data error it raises ("CONDITION: message",
        :func:`data_error`); all in one Spark job unless one of them fails. Any other
        error is raised."""
        names = list(self.views if names is None else names)
        self._prepare()
        try:
            return dict(_packed_arrow({n: self.session.table(n) for n in names}))
        except Exception as e:
            if data_error(e) is None:
                raise
        return {name: self._answer(name) for name in names}

    def _answer(self, name: str) -> pa.Table | str:
        """The view's batch result, or the data error it raises; any other error is raised."""
        try:
            return self.session.table(name).toArrow()
        except Exception as e:
            why = data_error(e)
            if why is None:
                raise
            return why

    def wrapped(self, name: str) -> pa.Table | str:
        """The view's batch answer with ANSI off: where ANSI's integer overflow came from
        an intermediate sum in Spark's row order, the wrapped total (which no order
        changes) is the value the sum has when it is in range."""
        self._prepare()
        self.session.conf.set("spark.sql.ansi.enabled", "false")
        self._registered = None  # analysed again now, and again with the real settings after
        self._register_views()
        return self._answer(name)

    def answers(self, names: Iterable[str] | None = None) -> dict[str, pa.Table | str | BaseException]:
        """:meth:`results`, with any other error of a view's batch query as that view's
        value (Spark could not answer it in batch: nothing to compare with)."""
        names = list(self.views if names is None else names)
        try:
            return dict(self.results(names))
        except Exception:  # noqa: BLE001 - which view: each alone
            pass
        out: dict[str, pa.Table | str | BaseException] = {}
        for name in names:
            try:
                out.update(self.results([name]))
            except Exception as e:  # noqa: BLE001
                out[name] = e
        return out


def _python_rows(table: pa.Table) -> list[Row]:
    """Arrow rows as the Python values :func:`coerce_row` and :func:`arrow_rows` take back
    (timestamps as UTC-aware datetimes)."""
    columns = [column.to_pylist() for column in table.columns]
    return list(zip(*columns)) if columns else [() for _ in range(table.num_rows)]


@dataclass(frozen=True)
class Finding:
    """One way a placement differs from Spark in batch after a tick. ``view`` is None for
    a crash out of :meth:`Pipeline.step`; ``placement`` is "auto", "dataframe", "duckdb"
    (the "auto" pipeline against DuckDB), "both" (a view the pipelines rejected) or
    "batch" (Spark has no batch answer)."""

    tick: int
    view: str | None
    placement: str
    #: "mismatch", "crash", "failed" (engine failed, batch did not), "not failed" (the
    #: reverse), "rejected" (a pipeline refused the view), "no batch answer" (placement "batch")
    kind: str
    description: str

    def __str__(self) -> str:
        what = f"view {self.view!r}" if self.view else "step"
        return f"tick {self.tick} {self.placement} {what}: {self.kind}: {self.description}"


class Twin:
    """Two pipelines — placement "auto" (small ticks on Arrow kernels in the driver after
    the first) and "dataframe" (every tick in Spark) — and a :class:`SparkOracle`, driven
    by the same changes; after every tick every view of both must be exactly the batch
    answer (:func:`compare_exact`).

    ``step`` converts each source's changes once to an Arrow table (timestamps as UTC
    instants, no local time involved), feeds that same table to both pipelines, integrates
    it into the oracle and checks every view on both. A view whose batch query raises a
    data error must be in the pipeline's ``failed`` (the conditions are recorded in
    :attr:`errors`, not compared); a view in ``failed`` while batch succeeds, a differing
    view, and a ``step`` that raises (the pipeline is not stepped or checked again: its
    state is behind) are findings. All findings of a tick are raised together as one
    :class:`Mismatch` (its ``findings``), after which the twin can step on.

    ``duckdb=True`` also compares the "auto" pipeline with DuckDB (:class:`Oracle`,
    tolerant :func:`compare`): meaningful only on narrow values.
    """

    def __init__(self, spark: SparkSession, directory: str, sources: Mapping[str, str | StructType],
                 views: Mapping[str, str], *, duckdb: bool = False, max_batches: int = 8,
                 placements: Sequence[str] = TWIN_PLACEMENTS) -> None:
        self.spark = spark
        self.sources = dict(sources)
        self.views = dict(views)
        self.pipelines = {p: Pipeline(spark, f"{directory.rstrip('/')}/{p}", max_batches=max_batches, placement=p)
                          for p in placements}
        self.oracle = SparkOracle(spark)
        self.duck = Oracle() if duckdb else None
        #: the placement under test: the first that is not "dataframe"
        self.fast = next((p for p in placements if p != "dataframe"), placements[0])
        #: ticks run, view comparisons made, ticks the placement under test ran on
        #: arrangements ("auto": in the driver; "tasks": in Spark tasks)
        self.ticks = self.checks = self.arranged = 0
        #: per tick, the path the placement under test took (and why not arranged)
        self.paths: list[tuple[str, str | None]] = []
        self.findings: list[Finding] = []  # every tick's
        self.broken: dict[str, str] = {}  # placement → the crash that stopped it
        #: (tick, view) → (batch's data error, per placement what ``failed`` says)
        self.errors: dict[tuple[int, str], tuple[str, dict[str, str | None]]] = {}
        self.rejected: dict[str, str] = {}  # view → why a pipeline would not define it
        #: view → its output columns whose zero's sign is Spark's scan order (:func:`scan_order_zeros`)
        self._first_zero: dict[str, frozenset[int]] = {}
        #: every tick's input as fed (source → Arrow delta with ``_w``), to replay a finding
        self.history: list[dict[str, pa.Table]] = []
        first = next(iter(self.pipelines.values()))
        for name, schema in self.sources.items():
            for pipe in self.pipelines.values():
                pipe.add_source(name, schema)
            self.oracle.add_source(name.lower(), first.schema(name))
            if self.duck is not None:
                self.duck.add_source(name.lower(), first.schema(name))
        for name, sql in self.views.items():
            self.add_view(name, sql)

    @property
    def auto(self) -> Pipeline:
        return self.pipelines["auto"]

    @property
    def dataframe(self) -> Pipeline:
        return self.pipelines["dataframe"]

    def add_view(self, name: str, sql: str) -> None:
        """A view on both pipelines and the oracle; one a pipeline rejects (CompileError,
        StreamError) is a finding of the next tick, and is left out (with its readers)."""
        name = name.lower()
        self.views[name] = sql
        if any(v in self.rejected for v in self._reads(sql)):
            self.rejected[name] = "reads a rejected view"
            return
        for placement, pipe in self.pipelines.items():
            try:
                pipe.add_view(name, sql)
            except StreamError as e:
                self.rejected[name] = f"{placement}: {type(e).__name__}: {str(e).splitlines()[0]}"
                return
        fast = self.pipelines[self.fast]
        if fast.reads_time and CLOCK not in self.oracle.schemas:
            self.oracle.add_source(CLOCK, fast.circuit.sources[CLOCK])
            if self.duck is not None:
                self.duck.add_source(CLOCK, fast.circuit.sources[CLOCK])
        self.oracle.add_view(name, sql)
        self._first_zero[name] = scan_order_zeros(sql)
        if self.duck is not None:
            self.duck.add_view(name, sql)

    def _reads(self, sql: str) -> set[str]:
        return {t.name.lower() for t in sqlglot.parse_one(sql, read=DIALECT).find_all(exp.Table)}

    def schema(self, source: str) -> StructType:
        return self.oracle.schemas[source.lower()]

    def rows(self, source: str) -> list[Row]:
        """The source's current contents as a list (with repeats)."""
        return self.oracle.rows(source.lower())

    def delta(self, source: str, changes: Sequence[Change]) -> pa.Table:
        """``(row, weight)`` pairs as the Arrow delta every side is fed (:func:`arrow_delta`)."""
        return arrow_delta(self.schema(source), changes)

    def step(self, changes: Mapping[str, Sequence[Change]], *, check: bool = True,
             now: datetime | None = None) -> list[Finding]:
        """One tick of ``changes`` on every side, at time ``now`` for views that read it
        (default: the clock; naive is UTC, as :meth:`Pipeline.step` takes it); raises
        :class:`Mismatch` with all of the tick's findings (none: returns [])."""
        tables = {s.lower(): self.delta(s, c) for s, c in changes.items() if c}
        self.history.append(tables)
        clock = self._clock(now)
        self.ticks += 1
        found: list[Finding] = []
        if self.ticks == 1:
            found += [Finding(1, v, "both", "rejected", why) for v, why in self.rejected.items()]
        for source, table in tables.items():
            self.oracle.integrate(source, table)
            if self.duck is not None:
                self.duck.apply(source, zip(_python_rows(table.drop_columns([WEIGHT])),
                                            table.column(WEIGHT).to_pylist()))
        names = self._checked()
        # the batch answer is computed while the pipelines step (its own session, no
        # state of theirs), and one pipeline's views are read while the next one steps
        running = [(p, pipe) for p, pipe in self.pipelines.items() if p not in self.broken]
        with threads(1 + len(running), "differential") as pool:
            want = pool.submit(self.oracle.answers, names) if check else None

            def tick(placement: str, pipe: Pipeline) -> Finding | Future[dict[str, pa.Table] | Finding] | None:
                crash = self._advance(placement, pipe, tables, clock)
                if crash is not None or not check:
                    return crash
                return pool.submit(self._snapshots, placement, pipe, names)

            ran = [tick(p, pipe) for p, pipe in running]  # in turn: stepping both at once is no faster
            found += [r for r in ran if isinstance(r, Finding)]
            reading = {p: r.result() for (p, _), r in zip(running, ran) if isinstance(r, Future)}
            if want is not None:
                found += self._compare(names, want.result(), reading)
        self.findings += found
        if found:
            error = Mismatch(f"{len(found)} finding(s) after tick {self.ticks}:\n"
                             + "\n".join(f"- {f}" for f in found))
            error.findings = found  # type: ignore[attr-defined]
            raise error
        return found

    def _checked(self, names: Iterable[str] | None = None) -> list[str]:
        return [n.lower() for n in (names or self.views) if n.lower() not in self.rejected]

    def _clock(self, now: datetime | None) -> datetime | None:
        """The tick's time, the same for every side, moved in the oracles: None when no
        view reads the time."""
        if CLOCK not in self.oracle.schemas:
            return None
        clock, moved = Clock(self.pipelines[self.fast].now).advance(now)
        if moved:
            self.oracle.apply(CLOCK, moved)
            if self.duck is not None:
                self.duck.replace(CLOCK, [(clock,)])
        return clock

    def _advance(self, placement: str, pipe: Pipeline, tables: Mapping[str, pa.Table],
                 clock: datetime | None = None) -> Finding | None:
        """One pipeline's step: a crash out of it is a finding, and the pipeline stops (its
        state is a tick behind the input)."""
        try:
            pipe.step(tables, now=clock)
        except Exception as e:  # noqa: BLE001 - any error out of step is the finding
            why = f"{type(e).__name__}: {_first_line(e)}"
            self.broken[placement] = why
            return Finding(self.ticks, None, placement, "crash", f"crash out of step: {why}\n{_where(e)}")
        if placement == self.fast and pipe.last_tick is not None:
            self.paths.append((pipe.last_tick.path, pipe.last_tick.why))
            self.arranged += pipe.last_tick.path == ARRANGED_PATH.get(placement)
        return None

    def _snapshots(self, placement: str, pipe: Pipeline, names: list[str]) -> dict[str, pa.Table] | Finding:
        """The views not in ``failed``, as Arrow, in one Spark job."""
        try:
            return _packed_arrow({n: pipe.snapshot(n) for n in names if n not in pipe.failed})
        except Exception as e:  # noqa: BLE001 - reading the state back is the engine's too
            return Finding(self.ticks, None, placement, "crash", f"snapshot: {type(e).__name__}: {_first_line(e)}")

    def check(self, names: Iterable[str] | None = None) -> list[Finding]:
        """Every view (or ``names``) of every running placement against batch, now (the
        findings are returned, not raised)."""
        checked = self._checked(names)
        got = {p: self._snapshots(p, pipe, checked) for p, pipe in self.pipelines.items() if p not in self.broken}
        return self._compare(checked, self.oracle.answers(checked), got)

    def _compare(self, names: list[str], want: Mapping[str, pa.Table | str | BaseException],
                 snapshots: Mapping[str, dict[str, pa.Table] | Finding]) -> list[Finding]:
        tick = self.ticks
        found = [Finding(tick, n, "batch", "no batch answer", f"{type(e).__name__}: {_first_line(e)}")
                 for n in names if isinstance(e := want[n], BaseException)]
        answered = {n: a for n in names if not isinstance(a := want[n], BaseException)}
        names = list(answered)
        for placement, got in snapshots.items():
            if isinstance(got, Finding):
                found.append(got)
                continue
            failed = dict(self.pipelines[placement].failed)
            for name in names:
                self.checks += 1
                batch = answered[name]
                if isinstance(batch, str):
                    self.errors.setdefault((tick, name), (batch, {}))[1][placement] = failed.get(name)
                    if name not in failed and not self._order_overflow(name, batch, got[name]):
                        found.append(Finding(tick, name, placement, "not failed",
                                             f"batch fails with {batch}, the view is not in failed and has "
                                             f"{got[name].num_rows} rows"))
                    continue
                if name in failed:
                    found.append(Finding(tick, name, placement, "failed",
                                         f"in failed ({failed[name]}) but batch succeeds with {batch.num_rows} rows"))
                    continue
                problem = compare_exact(got[name], batch)
                if problem and compare_exact(got[name], batch, either_zero=self._first_zero[name]) is not None:
                    found.append(Finding(tick, name, placement, "mismatch", problem))
            if placement == "auto" and self.duck is not None:
                found += self._check_duckdb(names, answered, got, failed)
        return found

    def _order_overflow(self, name: str, error: str, got: pa.Table) -> bool:
        """Whether Spark's ANSI overflow is one of its row order only: an intermediate
        integer sum overflowed, while the view equals the wrapped total (README,
        "Semantics"), which is in range where the engine succeeded."""
        if not error.startswith("ARITHMETIC_OVERFLOW"):
            return False
        wrapped = self.oracle.wrapped(name)
        return not isinstance(wrapped, str) and compare_exact(got, wrapped) is None

    def _check_duckdb(self, names: list[str], want: Mapping[str, pa.Table | str], got: Mapping[str, pa.Table],
                      failed: Mapping[str, str]) -> list[Finding]:
        assert self.duck is not None
        found = []
        for name in names:
            if isinstance(want[name], str) or name in failed:
                continue
            try:
                rows = self.duck.query(f'SELECT * FROM "{name}"')
            except duckdb.Error as e:
                found.append(Finding(self.ticks, name, "duckdb", "mismatch", f"DuckDB fails: {_first_line(e)}"))
                continue
            self.checks += 1
            problem = compare(_python_rows(got[name]), rows)
            if problem:
                found.append(Finding(self.ticks, name, "duckdb", "mismatch", problem))
        return found

    def close(self) -> None:
        for pipe in self.pipelines.values():
            pipe.close()


def _where(e: BaseException) -> str:
    """Where an error rose: the engine's last frame on its way, then the innermost one."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "dbt_incremental_stream" in f.filename and not f.filename.endswith("differential.py")]
    shown = ([ours[-1]] if ours else []) + ([frames[-1]] if frames and (not ours or frames[-1] is not ours[-1]) else [])
    return "\n".join(f"  at {f.filename.rsplit('site-packages/', 1)[-1]}:{f.lineno} in {f.name}: {f.line}"
                     for f in shown)


def arrow_delta(schema: StructType, changes: Sequence[Change]) -> pa.Table:
    """``(row, weight)`` pairs as an Arrow delta of ``schema`` plus ``_w``: values coerced
    as the pipeline coerces them (:func:`coerce_row`), timestamps as UTC instants (a naive
    datetime is taken as UTC), so no local time is involved."""
    schema = zsets.with_weight(schema)
    rows = [_utc(schema, coerce_row(schema, tuple(row) + (int(w),))) for row, w in changes]
    return arrow_rows(schema, rows)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _utc(schema: StructType, row: Row) -> Row:
    """Timestamps as UTC-aware datetimes (a naive one is taken as UTC), so converting them
    involves no local time."""
    return tuple(v.astimezone(timezone.utc) if isinstance(v, datetime) and v.tzinfo is not None
                 else v.replace(tzinfo=timezone.utc)
                 if isinstance(v, datetime) and isinstance(f.dataType, TimestampType)
                 else v for f, v in zip(schema.fields, row))
