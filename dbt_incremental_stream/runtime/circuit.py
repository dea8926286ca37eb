"""A pipeline's sources and views as one DBSP circuit, and what is known of its nodes.

The circuit is what a pipeline runs; :class:`.Pipeline` runs it a tick at a time. Here:
each relation's definition (a source's columns, a view's batch plan and its incremental
form), the nodes that hold state and who reads them, a delta conformed to its source's
columns, and the Spark types of every node's rows. Those types come from Spark's analysis
of the circuit over empty inputs (no job) and are recorded in each commit's ``_meta``
(:meth:`Circuit.types_to_record`), so that a new instance over the same state need not
analyse again while its sources keep their types.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import AbstractSet, Any, Callable, Iterable, Mapping, Sequence, cast

import pyarrow as pa
from sqlglot import exp
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (DataType, DecimalType, DoubleType, FloatType, StructField, StructType,
                               _parse_datatype_json_string)

from ..circuit.incremental import Incrementalizer
from ..circuit.operators import (WEIGHT, Delay, Filter, Input, Integral, Join, Map, Operator, Plus, Recompute,
                                 quote, walk)
from ..errors import CompileError, StreamError, UnsupportedSqlError
from ..sql.compile import compile
from ..sql.planner import RECURSION_LEVELS
from ..sql.join_keys import key_columns
from .arrow import kernels
from .spark import zsets
from .spark.session import empty_frame, share_functions
from .plan import NotArranged, unquote
from .spark.evaluate import Tick, empty_tick
from .ticks import State

Rows = Iterable[tuple[Sequence[Any], int]]


class _TypesTick(Tick):
    """A tick over empty inputs whose every value is an empty leaf of its types. Spark
    analyses a DataFrame's whole plan each time one is derived from it, so typing each
    node over the plan of everything upstream costs time quadratic in the circuit's depth
    (22 TPC-H views: minutes); over leaves, each node's analysis is of one operator, and
    a node whose types are ``known`` is not analysed at all. Nor is a node whose types
    are its input's as Spark analyses it (a filter, an integral, a delay, a sum of
    inputs of one type), and a leaf is made only for a node analysed over it."""

    def __init__(self, spark: SparkSession, inputs: Mapping[str, DataFrame | None],
                 before: Callable[[str], DataFrame | None], known: Callable[[str], StructType | None]):
        super().__init__(inputs, before, lambda _: True, set())
        self._spark = spark
        self._known = known
        self._schemas: dict[str, StructType | None] = {}

    def value(self, op: Operator) -> DataFrame | None:
        if op.id not in self._memo:
            schema = self.schema(op)
            self._memo[op.id] = None if schema is None else empty_frame(self._spark, schema)
        return self._memo[op.id]

    def schema(self, op: Operator) -> StructType | None:
        """The types of a node's rows (None: statically empty)."""
        if op.id not in self._schemas:
            schema = self._known(op.id)
            if schema is None:
                schema = self._as_input(op)
            if schema is None and (df := self._eval(op)) is not None:
                schema = df.schema
            self._schemas[op.id] = schema
        return self._schemas[op.id]

    def _as_input(self, op: Operator) -> StructType | None:
        """The types of a node that Spark would give its input's, unchanged (a Union's
        columns are nullable where any input's is; inputs of different types are left to
        Spark's coercion)."""
        if isinstance(op, (Filter, Integral)):
            return self.schema(op.input)
        if isinstance(op, Delay) and isinstance(op.input, Integral):
            return self.schema(op.input.input)
        if isinstance(op, Plus):
            present = [s for s in map(self.schema, op.inputs) if s is not None]
            if not present or any([f.dataType for f in s] != [f.dataType for f in present[0]] for s in present):
                return None
            return StructType([StructField(f.name, f.dataType, any(s[i].nullable for s in present), f.metadata)
                               for i, f in enumerate(present[0].fields)])
        return None


@dataclass(frozen=True)
class View:
    name: str
    sql: str
    logical: Operator  # the batch query as a circuit over relations
    state: Integral  # I(Δview): the maintained contents
    schema: StructType  # what the same SQL returns in batch


def coerce_row(schema: StructType, row: Sequence[Any]) -> tuple[Any, ...]:
    """Python values as the columns' types want them (floats for DECIMAL, ints for DOUBLE)."""
    return tuple(_coerce(f.dataType, v) for f, v in zip(schema.fields, row))


def _coerce(dtype: DataType, v: Any) -> Any:
    if v is None:
        return v
    if isinstance(dtype, DecimalType) and not isinstance(v, Decimal):
        return Decimal(str(v))
    if isinstance(dtype, (DoubleType, FloatType)):
        return float(v)
    return v


def parse_schema(name: str, schema: str | StructType) -> StructType:
    """A source's columns from a StructType or DDL, lower-cased and nullable."""
    if isinstance(schema, str):
        try:
            schema = cast(StructType, StructType.fromDDL(schema))
        except Exception as e:  # Spark's parser raises several types here
            raise StreamError(f"bad schema for source {name!r}: {e}") from e
    fields = [StructField(f.name.lower(), f.dataType, True) for f in schema.fields]
    if WEIGHT in {f.name for f in fields}:
        raise StreamError(f"source {name!r} may not have a column named {WEIGHT}")
    return StructType(fields)


class Circuit:
    """Sources and views, their operators and state nodes, and the types of every node."""

    def __init__(self, spark: SparkSession, meta: Mapping[str, Any]):
        """``meta``: the last commit's ``_meta``, whose recorded types this circuit reads."""
        self.spark = spark
        self._analysis = spark.newSession()  # temp views for batch semantics, apart from the user's
        self._functions: set[str] = set()  # the user's functions copied into it, lower case
        #: source → its columns
        self.sources: dict[str, StructType] = {}
        #: relation (source or view) → the operator that produces it
        self.catalog: dict[str, Operator] = {}
        self.views: dict[str, View] = {}
        #: (source, key) kept arranged for :meth:`.Contents.by_key`
        self.indexes: set[tuple[str, tuple[str, ...]]] = set()
        #: sources whose retained input drops rows out of every window
        self.expiring: set[str] = set()
        self._incremental = Incrementalizer()
        #: node schemas and expression types the last commit recorded, and the source types
        #: they were found with
        self._recorded: dict[str, dict[str, str]] = meta.get("types", {})
        self._recorded_sources: dict[str, Any] = meta.get("sources", {})
        #: the types found of nodes and expressions: a node's id names its SQL and its
        #: inputs' columns, and within a circuit a source's types never change, so they
        #: stay true as sources and views are added
        self._schemas_by_node: dict[str, StructType] = {}
        self._types_by_exprs: dict[str, str] = {}  # node id and expressions → their types' StructType JSON
        self._typed_rows: dict[str, DataFrame] = {}  # node id → no rows of its types, to analyse expressions over
        self.changed()

    def changed(self) -> None:
        """Forget what was derived from the circuit's sources and views as they were."""
        self._empty: Tick | None = None
        self._schema_tick: _TypesTick | None = None
        self._recorded_valid: bool | None = None
        self._to_record: tuple[tuple[int, int], dict[str, dict[str, str]]] | None = None  # by what it was made of

    # --- definition --------------------------------------------------------------------

    def add_source(self, name: str, st: StructType) -> None:
        self.check_new(name)
        self.sources[name] = st
        self.catalog[name] = Input(name, tuple(st.fieldNames()))
        empty_frame(self._analysis, st).createOrReplaceTempView(name)
        self.changed()

    def add_view(self, name: str, sql: str, tree: exp.Query) -> None:
        """Plan a view from its SQL and its parse (:func:`..sql.compile.parse`); the clock source it
        reads, if any, is already added."""
        self.check_new(name)
        schema = self._analyzed(name, sql, tree).schema  # Spark's own verdict and output types
        dupes = [c for c, n in Counter(f.name.lower() for f in schema).items() if n > 1]
        if dupes:
            raise CompileError(f"duplicate output column names {dupes}; alias them", view=name)
        levels = int(self.spark.conf.get("spark.sql.cteRecursionLevelLimit") or RECURSION_LEVELS)
        logical = key_columns(compile(tree, self.catalog, view=name, analyzed=self._analyzed_expr, recursion=levels),
                              self._key_casts)
        if len(logical.columns) != len(schema):
            raise CompileError(f"planned {len(logical.columns)} columns, Spark sees {len(schema)}", view=name)
        out = Map(logical, tuple((f.name, f"CAST({quote(c)} AS {f.dataType.simpleString()})")
                                 for f, c in zip(schema, logical.columns)))
        self.catalog[name] = out
        self.views[name] = View(name, sql, out, Integral(self._incremental(out)), schema)
        empty_frame(self._analysis, schema).createOrReplaceTempView(name)
        self.changed()

    def _analyzed(self, name: str, sql: str, tree: exp.Query) -> DataFrame:
        """The view's SQL analysed by Spark. The functions the user registered in the
        session (UDFs, SQL functions) are copied into the analysis session when the SQL
        calls one it does not know. A view that calls a UDF declared non-deterministic
        is refused: its batch answer is not a function of its input."""
        for attempt in (0, 1):
            try:
                frame = self._analysis.sql(sql)
                break
            except (AnalysisException, ParseException) as e:
                if attempt or (e.getCondition() or "") != "UNRESOLVED_ROUTINE" or not self._share_functions():
                    raise CompileError(f"Spark rejects the SQL: {e}", view=name) from e
        if self._functions and not frame._jdf.queryExecution().analyzed().deterministic():
            called = sorted({f.name.lower() for f in tree.find_all(exp.Anonymous)} & self._functions)
            if called:
                raise UnsupportedSqlError(f"non-deterministic function {called[0]}() (a UDF declared so)", view=name)
        return frame

    def _share_functions(self) -> bool:
        """Copies the user's functions into the analysis session; whether there are any."""
        self._functions = {f.lower() for f in share_functions(self.spark, self._analysis)}
        return bool(self._functions)

    def _analyzed_expr(self, op: Operator, sql: str) -> list[tuple[str, str]]:
        """The columns Spark makes of ``sql`` over ``op``'s rows, with their types (analysis only)."""
        frame = empty_frame(self.spark, self.schema_of(self._incremental(op))).selectExpr(sql)
        return [(f.name, f.dataType.simpleString()) for f in frame.schema]

    def _key_casts(self, join: Join) -> list[tuple[str | None, str | None]]:
        """Per key pair of ``join`` (columns of its sides), the types Spark casts the left
        and the right key to where the probe's kernels cannot compare them as Spark does
        (:func:`.kernels.probes_as`: numbers of other types, a DATE and a TIMESTAMP can be):
        a STRING and a number, say, as Spark's analysis of their equality says (it depends
        on ANSI mode: BIGINT for a STRING and an INT under ANSI, INT without). A side's
        types are its delta's."""
        sides = [self.schema_of(self._incremental(join.left)), self.schema_of(self._incremental(join.right))]
        arrow = [zsets.arrow_schema(side) for side in sides]
        both: DataFrame | None = None  # no rows of both sides' columns, made for the first pair asked of
        casts: list[tuple[str | None, str | None]] = []
        for pair in join.keys:
            left, right = (unquote(key) for key in pair)
            if kernels.probes_as(arrow[0].field(left).type, arrow[1].field(right).type) and \
                    kernels.probes_as(arrow[1].field(right).type, arrow[0].field(left).type):
                casts.append((None, None))
                continue
            if both is None:
                both = empty_frame(self.spark, StructType(sides[0].fields + sides[1].fields))
            equal = both.selectExpr(f"{pair[0]} = {pair[1]}")._jdf.queryExecution().analyzed().projectList().head()
            common = _parse_datatype_json_string(equal.child().left().dataType().json())
            to = common.simpleString()
            casts.append((None if sides[0][left].dataType == common else to,
                          None if sides[1][right].dataType == common else to))
        return casts

    def check_new(self, name: str) -> None:
        """A relation may be defined once."""
        if name in self.catalog:
            raise StreamError(f"{name!r} is already defined")

    # --- nodes -------------------------------------------------------------------------

    def source_state(self, name: str) -> Integral:
        """A source's retained input."""
        return Integral(self.catalog[name])

    def roots(self) -> Sequence[Operator]:
        return [self.source_state(n) for n in self.sources] + [v.state for v in self.views.values()]

    def states(self) -> list[State]:
        """Every node with persisted state, inputs before consumers."""
        same = self.same_state()
        return [op for op in walk(*self.roots()) if isinstance(op, (Integral, Recompute)) and op.id not in same]

    def same_state(self) -> dict[str, str]:
        """Integrals of a recompute's output: the recompute's own state is that integral."""
        return {op.id: op.input.id for op in walk(*self.roots())
                if isinstance(op, Integral) and isinstance(op.input, Recompute)}

    def shared(self) -> set[str]:
        """Nodes read by more than one consumer within a tick: persisted once computed."""
        uses: Counter[str] = Counter()
        for op in walk(*self.roots()):
            uses.update(i.id for i in op.inputs)
        return {node for node, n in uses.items() if n > 1}

    def upstream(self, name: str) -> list[str]:
        """Views and sources the view reads, directly or through other views."""
        ids = {op.id for op in walk(self.views[name.lower()].logical)}
        return [n for n, op in self.catalog.items() if n != name.lower() and op.id in ids]

    def own_states(self, names: set[str], keep: AbstractSet[str] | None = None) -> set[str]:
        """State nodes that only the views ``names`` need: not the sources' retained input,
        nor those of the views in ``keep`` (default: every other view)."""
        if not names:
            return set()
        same = self.same_state()

        def states(roots: Sequence[Operator]) -> set[str]:
            return {same.get(op.id, op.id) for op in walk(*roots) if isinstance(op, (Integral, Recompute))}

        keep = set(self.views) - names if keep is None else keep
        others = states([self.views[n].state for n in keep] + [self.source_state(s) for s in self.sources])
        return states([self.views[n].state for n in names]) - others

    def reading(self, node: str) -> list[str]:
        """The views whose circuit holds ``node``, in the order added."""
        return [v.name for v in self.views.values() if any(op.id == node for op in walk(v.state))]

    def with_readers(self, failed: Mapping[str, str]) -> dict[str, str]:
        """``failed`` and every view that reads one of them, directly or through others."""
        out = dict(failed)
        for v in self.views.values():  # in the order added: a view's inputs come first
            if v.name not in out:
                bad = [n for n in self.upstream(v.name) if n in out]
                if bad:
                    out[v.name] = f"reads {bad[0]}, which failed"
        return out

    def schema(self, name: str) -> StructType:
        """A view's or a source's columns."""
        name = name.lower()
        return self.views[name].schema if name in self.views else self.sources[name]

    def contents(self, name: str) -> tuple[str, StructType]:
        """The state node holding a view's contents or a source's retained input, and its columns."""
        name = name.lower()
        if name in self.views:
            view = self.views[name]
            return self.same_state().get(view.state.id, view.state.id), view.schema
        if name in self.sources:
            return self.source_state(name).id, self.sources[name]
        raise StreamError(f"no view or source named {name!r}")

    # --- a delta as its source's columns -------------------------------------------------

    def deltas(self, deltas: Mapping[str, DataFrame | pa.Table | Rows | None], fed: AbstractSet[str]
               ) -> tuple[dict[str, DataFrame | None], dict[str, pa.Table]]:
        """A tick's deltas by source in their sources' columns: those Spark computes (None:
        no change), those held in Arrow. Rows, Arrow and a DataFrame of Python rows are read
        in the driver; the sources in ``fed`` (the time, the one row) are not given."""
        inputs: dict[str, DataFrame | None] = {}
        arrow: dict[str, pa.Table] = {}
        for source, d in deltas.items():
            source = source.lower()
            if source not in self.sources or source in fed:
                raise StreamError(f"no source named {source!r}")
            if isinstance(d, DataFrame) and (local := zsets.python_rows(d)) is not None:
                d = local  # a DataFrame of Python rows: read as they are, as rows are
            if isinstance(d, (pa.Table, pa.RecordBatch)):
                arrow[source] = self.conform_arrow(source, d)
                continue
            if d is not None and not isinstance(d, DataFrame):
                arrow[source] = self.rows_arrow(source, list(d))
                continue
            inputs[source] = None if d is None else self.conform(source, d)
        return inputs, arrow

    def rows_arrow(self, source: str, rows: Rows) -> pa.Table:
        """``(row, weight)`` pairs as an Arrow table. Values
        are coerced (:func:`coerce_row`, ``int`` of a weight) only when Arrow refuses them
        as they are: where Arrow takes a value (an int for a DOUBLE, exactly), it takes it
        as coerced."""
        st = self.sources[source]
        data, weights = [r for r, _ in rows], [w for _, w in rows]
        try:
            table, w = zsets.arrow_rows(st, data), pa.array(weights, pa.int64())
            if w.null_count:
                raise TypeError("a NULL weight")
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            table = zsets.arrow_rows(st, [coerce_row(st, r) for r in data])
            w = pa.array([int(x) for x in weights], pa.int64())
        return pa.Table.from_arrays(table.columns + [w], schema=zsets.arrow_schema(zsets.with_weight(st)))

    def conform_arrow(self, source: str, table: pa.Table | pa.RecordBatch) -> pa.Table:
        """A source's delta as an Arrow table of its columns (by name, any case) and types."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        table = table.rename_columns([c.lower() for c in table.column_names])
        schema = zsets.arrow_schema(zsets.with_weight(self.sources[source]))
        missing = [n for n in schema.names if n not in table.column_names]
        if missing:
            raise StreamError(f"delta for source {source!r} lacks columns {missing}")
        return table.select(schema.names).cast(schema)

    def conform(self, source: str, df: DataFrame) -> DataFrame:
        """A source's delta as a DataFrame of its columns (by name, any case) and types."""
        st = self.sources[source]
        names = {c.lower(): c for c in df.columns}
        missing = [f.name for f in st.fields if f.name not in names] + ([WEIGHT] if WEIGHT not in names else [])
        if missing:
            raise StreamError(f"delta for source {source!r} lacks columns {missing}")
        return df.select(*(zsets.col(names[f.name]).cast(f.dataType).alias(f.name) for f in st.fields),
                         zsets.col(names[WEIGHT]).cast("bigint").alias(WEIGHT))

    # --- types of nodes ----------------------------------------------------------------

    def typed_empty(self) -> Tick:
        """A tick over empty inputs and state: typed empty values of every node (kept
        until the circuit changes, its values never do)."""
        if self._empty is None:
            self._empty = empty_tick({n: empty_frame(self.spark, zsets.with_weight(s))
                                      for n, s in self.sources.items()})
        return self._empty

    def _known_schema(self, node: str) -> StructType | None:
        """A node's types found before or recorded by the last commit, if they are."""
        found = self._schemas_by_node.get(node)
        recorded = self._recorded_types("schemas").get(node) if found is None else None
        if recorded is not None:
            found = self._schemas_by_node[node] = StructType.fromJson(json.loads(recorded))
        return found

    def schema_of(self, op: Operator) -> StructType:
        """The Spark types of a node's rows (from a plan over empty inputs, no job)."""
        found = self._known_schema(op.id)
        if found is None:
            if self._schema_tick is None:
                ops = {o.id: o for o in walk(*self.roots())}
                empty = self.typed_empty()

                def before(node: str) -> DataFrame | None:  # an integral has its input's types
                    o = ops.get(node)
                    return tick.value(o.input) if isinstance(o, Integral) else None

                tick = self._schema_tick = _TypesTick(self.spark, empty._inputs, before, self._known_schema)
            if isinstance(op, Delay):
                return self.schema_of(op.input.input)
            schema = self._schema_tick.schema(op)
            if schema is None:
                raise NotArranged(f"no type for {op.label()}")
            found = self._schemas_by_node[op.id] = schema
        return found

    def types_of(self, op: Operator, exprs: list[str]) -> list[pa.DataType]:
        """Spark's types (in Arrow) of expressions over a node's columns (analysis only, no job)."""
        key = f"{op.id} {json.dumps(exprs)}"
        found = self._types_by_exprs.get(key) or self._recorded_types("exprs").get(key)
        if found is None:
            if op.id not in self._typed_rows:
                self._typed_rows[op.id] = empty_frame(self.spark, self.schema_of(op))
            found = self._typed_rows[op.id].selectExpr(*exprs).schema.json()
        self._types_by_exprs[key] = found
        return list(zsets.arrow_schema(StructType.fromJson(json.loads(found))).types)

    def stored_schema(self, state: State) -> StructType:
        """The columns of a state node's rows."""
        return self.schema_of(state if isinstance(state, Recompute) else state.input)

    def _recorded_types(self, kind: str) -> dict[str, str]:
        """What the last commit recorded of ``kind`` ("schemas", "exprs"), while every
        source it knew has the schema it had then (an operator's id names its SQL and its
        inputs' columns, not their types)."""
        if self._recorded_valid is None:
            self._recorded_valid = all(json.loads(self.sources[n].json()) == st
                                       for n, st in self._recorded_sources.items() if n in self.sources)
        return self._recorded.get(kind, {}) if self._recorded_valid else {}

    def types_to_record(self) -> dict[str, dict[str, str]]:
        """The schemas and expression types known of the circuit's nodes, for the next instance
        (made again only when this instance has learnt more: most commits learn nothing)."""
        known = (len(self._schemas_by_node), len(self._types_by_exprs))
        if self._to_record is not None and self._to_record[0] == known:
            return self._to_record[1]
        live = {o.id for o in walk(*self.roots())}
        schemas = {**self._recorded_types("schemas"), **{n: s.json() for n, s in self._schemas_by_node.items()}}
        exprs = {**self._recorded_types("exprs"), **self._types_by_exprs}
        recorded = {"schemas": {n: s for n, s in schemas.items() if n in live},
                    "exprs": {k: t for k, t in exprs.items() if k.split(" ", 1)[0] in live}}
        self._to_record = (known, recorded)
        return recorded
