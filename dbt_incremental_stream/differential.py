"""Differential checking: a pipeline against the same SQL run in batch by DuckDB.

After every tick each view's snapshot must equal, as a bag (NULLs included), what DuckDB
returns for the view's SQL (transpiled by sqlglot) over all input so far. Used by the
test suite on random workloads, and usable on any pipeline to check a model.
"""
from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Collection, Iterable, Mapping, Sequence

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from .circuit.operators import WEIGHT, quote
from .catalog import quote_relation
from .project import CHANGELOG_COLUMNS, CHANGELOG_TABLE, Project
from .runtime.pipeline import Pipeline, coerce_row
from .runtime.zsets import arrow_schema, expand, pack
from .sql.relations import DIALECT, engine_name, rename
from .sql.rewrites.clock import with_clock
from .sql.rewrites.total_order import total_order
from .sql.temporal import CLOCK

Row = tuple[Any, ...]
Change = tuple[Sequence[Any], int]


class Mismatch(AssertionError):
    """A view differs from the batch result; the message lists the differing rows."""


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
    pipeline: Pipeline = field(init=False)
    oracle: Oracle = field(init=False)

    def __post_init__(self) -> None:
        self.pipeline = Pipeline(self.spark, self.state_location, max_batches=self.max_batches)
        self.oracle = Oracle()
        for name, schema in self.sources.items():
            self.pipeline.add_source(name, schema, expire=name in self.expire)
            self.oracle.add_source(name, self.pipeline._schemas[name])
        for name, sql in self.views.items():
            self.add_view(name, sql)

    def add_view(self, name: str, sql: str) -> None:
        self.views = {**self.views, name: sql}
        self.pipeline.add_view(name, sql)
        if CLOCK in self.pipeline._schemas and CLOCK not in self.oracle.inputs:
            self.oracle.add_source(CLOCK, self.pipeline._schemas[CLOCK])
        self.oracle.add_view(name, sql)

    def rows(self, source: str) -> list[Row]:
        """The source's current contents as a list (with repeats)."""
        return list(self.oracle.inputs[source].elements())

    def step(self, changes: Mapping[str, Sequence[Change]], check: bool = True, now: datetime | None = None) -> None:
        """One tick of ``changes`` on both sides; ``now`` is the time views read."""
        coerced = {s: [(self._coerce(s, r), w) for r, w in c] for s, c in changes.items()}
        self.pipeline.step({s: c for s, c in coerced.items() if c}, now=now)
        if CLOCK in self.oracle.inputs:
            self.oracle.replace(CLOCK, [(self.pipeline.now,)])
        for source, c in coerced.items():
            self.oracle.apply(source, c)
        if check:
            self.check()

    def _coerce(self, source: str, row: Sequence[Any]) -> Row:
        return coerce_row(self.pipeline._schemas[source], row)

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
        oracle.add_view(m.name, rename(m.tree, {r: engine_name(r) for r in m.reads}))
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

