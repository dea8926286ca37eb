"""Streaming models deployed at one state location, the way a dbt project deploys them.

A model is one SELECT over relations of the Spark catalog, published as a relation of its
own. It reads other models of the project (their changes flow through the circuit) and any
other table or view — a dbt seed, a batch model, an external table — as a *table source*,
whose changes are found by comparing its contents with what was read at the last tick.
``advance()`` is one tick of all models together; after it, each ``streaming_view``'s
catalog view is redefined over the committed state and each ``changelog_table`` has the
tick's changes appended, so all models agree at every committed tick.

    project = Project(spark, "/data/stream_state")
    project.deploy(Model("shop.revenue", "SELECT c, SUM(v) AS v FROM shop.orders GROUP BY c"))
    project.advance()
    spark.table("shop.revenue").show()
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from .circuit.operators import WEIGHT, Input, Integral, quote
from .errors import CompileError, ConnectorError, StreamError
from .runtime import zsets
from .runtime.pipeline import Pipeline
from .sql.relations import engine_name, referenced, rename

STREAMING_VIEW = "streaming_view"
CHANGELOG_TABLE = "changelog_table"
KINDS = (STREAMING_VIEW, CHANGELOG_TABLE)
#: columns a changelog table has after the model's own
CHANGELOG_COLUMNS = {"_op": "string", "_weight": "bigint", "_committed_at": "timestamp", "_tick": "bigint"}


@dataclass(frozen=True)
class Model:
    relation: str  # schema.identifier where the result is published
    sql: str  # reads other relations by their catalog names
    kind: str = STREAMING_VIEW
    reads: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise StreamError(f"model {self.relation!r}: kind {self.kind!r} is not one of {KINDS}")
        object.__setattr__(self, "relation", self.relation.lower())
        object.__setattr__(self, "reads", tuple(referenced(self.sql, view=self.relation)))

    @property
    def name(self) -> str:
        return engine_name(self.relation)


def quote_relation(relation: str) -> str:
    return ".".join(quote(p) for p in relation.split("."))


class Project:
    """The deployed models at ``state_location`` and the pipeline that maintains them.

    One writer at a time: calls are serialized by a lock, and the state location must not be
    shared with another running project.
    """

    def __init__(self, spark: SparkSession, state_location: str):
        self.spark = spark
        self.location = state_location
        self._lock = threading.RLock()
        self.pipe = Pipeline(spark, state_location)
        notes = self.pipe.notes
        self.models: dict[str, Model] = {rel: Model(rel, m["sql"], m["kind"]) for rel, m in notes.get("models", {}).items()}
        self._read: dict[str, str | None] = dict(notes.get("tables", {}))  # table source → fingerprint last read
        self._new_logs: set[str] = set()  # changelog tables to start over at the next tick
        self.dropped: dict[str, str] = {}
        self._define(self.models)

    # --- definition --------------------------------------------------------------------

    def deploy(self, model: Model, *, full_refresh: bool = False) -> str:
        """Add or replace a model; its state is built at the next :meth:`advance`.

        Returns what happens to it: ``created``, ``rebuilt`` (its SQL changed: its state and
        its dependents' are rebuilt from retained input), ``reset`` (``full_refresh``: its own
        state is rebuilt) or ``unchanged``.
        """
        with self._lock:
            old = self.models.get(model.relation)
            action = "created" if old is None else "unchanged" if old == model else "rebuilt"
            if action != "unchanged":
                self._define({**self.models, model.relation: model}, deploying=model.relation)
            elif full_refresh:
                action = "reset"
                self.pipe.reset(model.name)
            if model.kind == CHANGELOG_TABLE and action != "unchanged":
                self._new_logs.add(model.relation)
            return action

    def prune(self, keep: set[str]) -> list[str]:
        """Remove models not in ``keep`` (no longer streaming models of the project); their
        state goes at the next tick, their relations stay as they are."""
        with self._lock:
            gone = [rel for rel in self.models if rel not in {k.lower() for k in keep}]
            if gone:
                self._define({rel: m for rel, m in self.models.items() if rel not in gone})
            return gone

    def _define(self, models: dict[str, Model], deploying: str | None = None) -> None:
        """Rebuild the pipeline for ``models``. A model other than ``deploying`` that no longer
        compiles (a model it reads changed) is dropped and named in :attr:`dropped`."""
        pipe = Pipeline(self.spark, self.location)
        pipe.notes = self.pipe.notes
        order = _topological(models)
        try:
            replaced, missing = set(), {}
            for rel in dict.fromkeys(r for m in order for r in m.reads if r not in models):
                try:
                    schema = self._table(rel, reader=_reader(order, rel)).schema
                except ConnectorError as e:
                    missing[rel] = e
                    continue
                if pipe.add_source(engine_name(rel), schema, replace=True):  # the table changed columns
                    replaced.add(engine_name(rel))
                    self._read.pop(rel, None)
            kept: dict[str, Model] = {}
            for m in order:
                if any(models[r].kind == CHANGELOG_TABLE for r in m.reads if r in models):
                    raise CompileError("reads a changelog_table model; read the model it logs instead", view=m.relation)
                try:
                    for r in m.reads:
                        if r in missing:
                            raise missing[r]
                    pipe.add_view(m.name, rename(m.sql, {r: engine_name(r) for r in m.reads}, view=m.relation))
                except StreamError as e:
                    if m.relation == deploying:
                        raise
                    self.dropped[m.relation] = str(e)
                    continue
                kept[m.relation] = m
                if replaced & set(pipe.upstream(m.name)):
                    pipe.reset(m.name)
        except BaseException:
            pipe.close()
            raise
        self.pipe.close()
        self.pipe, self.models = pipe, kept

    def _table(self, relation: str, reader: str | None = None) -> DataFrame:
        try:
            return self.spark.table(quote_relation(relation))
        except AnalysisException as e:
            raise ConnectorError(f"model {reader!r} reads {relation!r}, which is neither a streaming model of "
                                 f"this project nor a table or view Spark can read: {e.getMessage()}") from e

    # --- running -----------------------------------------------------------------------

    def advance(self, now: datetime | None = None) -> bool:
        """One tick: read every table source's changes, update all models, commit, publish.

        Returns False (and commits nothing) when there is nothing to do: no source changed,
        no model to build, no model reading the time.
        """
        with self._lock:
            deltas: dict[str, DataFrame] = {}
            read: dict[str, str | None] = {}
            for rel in self.table_sources:
                table = self._table(rel)
                fingerprint = _fingerprint(table)
                if fingerprint is None or fingerprint != self._read.get(rel):
                    name = engine_name(rel)
                    current = table.toDF(*self.pipe.schema(name).fieldNames())
                    deltas[name] = zsets.diff(current, self.pipe.snapshot(name, weights=True))
                    read[rel] = fingerprint
            if not deltas and not self.pipe.pending and not self.pipe.reads_time and self.pipe.tick > 0:
                self._publish()
                return False
            self.pipe.notes = {
                "models": {rel: {"sql": m.sql, "kind": m.kind} for rel, m in self.models.items()},
                "tables": {**{r: f for r, f in self._read.items() if r in self.table_sources}, **read},
            }
            self.pipe.step(deltas, now, before_commit=self._log)
            self._read = dict(self.pipe.notes["tables"])
            self._new_logs.clear()
            self._publish()
            return True

    @property
    def table_sources(self) -> list[str]:
        """Relations models read that are not models: diffed at every tick."""
        return list(dict.fromkeys(r for m in self.models.values() for r in m.reads if r not in self.models))

    def _publish(self) -> None:
        """Point every streaming view's catalog view at the committed state."""
        for m in self.models.values():
            if m.kind == STREAMING_VIEW:
                self.spark.sql(f"CREATE OR REPLACE VIEW {quote_relation(m.relation)} AS {self.pipe.relation_sql(m.name)}")

    def _log(self, tick: int, changes: dict[str, DataFrame]) -> None:
        """Append the tick's changes to each changelog table, idempotently: a tick redone
        after a crash replaces its partition instead of adding to it."""
        at = datetime.now(timezone.utc).replace(tzinfo=None)
        for m in self.models.values():
            if m.kind != CHANGELOG_TABLE:
                continue
            table = quote_relation(m.relation)
            if m.relation in self._new_logs:
                self.spark.sql(f"DROP TABLE IF EXISTS {table}")
            columns = [f"{quote(f.name)} {f.dataType.simpleString()}" for f in self.pipe.schema(m.name)]
            columns += [f"{quote(c)} {t}" for c, t in CHANGELOG_COLUMNS.items()]
            self.spark.sql(f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(columns)}) USING parquet "
                           f"PARTITIONED BY (_tick)")
            self.spark.sql(f"ALTER TABLE {table} DROP IF EXISTS PARTITION (_tick = {tick})")
            delta = changes[m.name]
            rows = delta.select(*(zsets.col(c) for c in zsets.data_columns(delta)),
                                F.when(zsets.col(WEIGHT) > 0, "insert").otherwise("delete").alias("_op"),
                                zsets.col(WEIGHT).alias("_weight"), F.lit(at).alias("_committed_at"),
                                F.lit(tick).cast("bigint").alias("_tick"))
            rows.write.insertInto(table)

    # --- reading -----------------------------------------------------------------------

    @property
    def tick(self) -> int:
        return self.pipe.tick

    def ordered(self) -> list[Model]:
        """The models, each after the models it reads."""
        return _topological(self.models)

    def explain(self, relation: str) -> str:
        return self.pipe.explain(engine_name(relation))

    def snapshot(self, relation: str) -> DataFrame:
        return self.pipe.snapshot(engine_name(relation))

    def close(self) -> None:
        self.pipe.close()


def _fingerprint(table: DataFrame) -> str | None:
    """What changes when a table's contents may have: its files and its plan. None for a
    relation read from no files (it is compared in full every tick)."""
    files = sorted(table.inputFiles())
    if not files:
        return None
    doc = json.dumps([files, table.schema.json(), table.semanticHash()])
    return hashlib.sha256(doc.encode()).hexdigest()


def _reader(models: list[Model], relation: str) -> str | None:
    return next((m.relation for m in models if relation in m.reads), None)


def _topological(models: dict[str, Model]) -> list[Model]:
    """Models after the models they read."""
    done: dict[str, Model] = {}
    visiting: set[str] = set()

    def visit(m: Model) -> None:
        if m.relation in done:
            return
        if m.relation in visiting:
            raise CompileError("models read each other in a cycle", view=m.relation)
        visiting.add(m.relation)
        for r in m.reads:
            if r in models:
                visit(models[r])
        visiting.discard(m.relation)
        done[m.relation] = m

    for m in models.values():
        visit(m)
    return list(done.values())
