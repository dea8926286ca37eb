"""A project's models and how they become one pipeline.

A model is one SELECT over relations of the Spark catalog. :func:`define` builds the pipeline
of a set of models aside — sources declared, views compiled in dependency order, models whose
input changed columns reset — so that a redeploy that fails leaves the running project as it
was: the caller swaps the :class:`Definition` in only once it is whole.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Any, Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from ..connectors.kafka import KafkaSource
from ..connectors.sinks import KafkaSink
from ..errors import CompileError, ConnectorError, StateError, StreamError
from ..runtime.pipeline import Pipeline
from ..sql.relations import engine_name, parse_one, referenced, rename

STREAMING_VIEW = "streaming_view"
CHANGELOG_TABLE = "changelog_table"
KINDS = (STREAMING_VIEW, CHANGELOG_TABLE)


@dataclass(frozen=True)
class Model:
    relation: str  # schema.identifier where the result is published
    sql: str  # reads other relations by their catalog names
    kind: str = STREAMING_VIEW
    sink: KafkaSink | None = None  # its changes mirrored to a Kafka topic
    reads: tuple[str, ...] = field(default=(), compare=False)
    tree: exp.Expr = field(init=False, repr=False, compare=False)  # ``sql`` parsed once

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise StreamError(f"model {self.relation!r}: kind {self.kind!r} is not one of {KINDS}")
        object.__setattr__(self, "relation", self.relation.lower())
        object.__setattr__(self, "tree", parse_one(self.sql, view=self.relation))
        object.__setattr__(self, "reads", tuple(referenced(self.tree)))

    @property
    def name(self) -> str:
        return engine_name(self.relation)

    def to_json(self) -> dict[str, Any]:
        return {"relation": self.relation, "sql": self.sql, "kind": self.kind,
                "sink": self.sink and self.sink.to_json()}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> Model:
        return Model(doc["relation"], doc["sql"], doc["kind"], KafkaSink.from_config(doc.get("sink")))


@dataclass
class Definition:
    """A pipeline built for a set of models, not yet in use."""

    pipe: Pipeline
    models: dict[str, Model]  # those that compiled
    streams: dict[str, KafkaSource]  # every declared Kafka source
    dropped: dict[str, str]  # models that no longer compile: relation → why
    reread_streams: set[str]  # Kafka sources to read again from their start
    reread_tables: set[str]  # table sources to read whole


def define(spark: SparkSession, location: str, notes: dict[str, Any], models: dict[str, Model],
           streams: dict[str, KafkaSource], table: Callable[[str, str | None], DataFrame],
           deploying: str | None = None, reread: AbstractSet[str] = frozenset()) -> Definition:
    """The pipeline of ``models`` at ``location``. A model other than ``deploying`` that no
    longer compiles (a model it reads changed) is dropped and named in ``dropped``; an error
    in ``deploying`` is raised. A Kafka source in ``reread`` whose columns changed starts over
    from its topic's start. ``table(relation, reader)`` opens a table source."""
    pipe = Pipeline(spark, location)
    pipe.notes = notes
    order = topological(models)
    definition = Definition(pipe, {}, streams, {}, set(), set())
    try:
        replaced, missing = set(), {}
        for rel in dict.fromkeys(r for m in order for r in m.reads if r in streams and r not in models):
            try:
                if pipe.add_source(engine_name(rel), streams[rel].columns, replace=rel in reread,
                                   expire=streams[rel].expire):
                    replaced.add(engine_name(rel))
                    definition.reread_streams.add(rel)
                if streams[rel].envelope == "upsert":  # the rows a record replaces, by key
                    pipe.index(engine_name(rel), streams[rel].key)
            except StateError as e:
                raise StreamError(f"the columns of Kafka source {rel!r} changed, and its retained input has the "
                                  f"old ones: run with --full-refresh to read topic {streams[rel].topic!r} "
                                  f"again from its start ({e})") from e
        for rel in dict.fromkeys(r for m in order for r in m.reads if r not in models and r not in streams):
            try:
                schema = table(rel, next(m.relation for m in order if rel in m.reads)).schema
            except ConnectorError as e:
                missing[rel] = e
                continue
            if pipe.add_source(engine_name(rel), schema, replace=True):  # the table changed columns
                replaced.add(engine_name(rel))
                definition.reread_tables.add(rel)
        for m in order:
            if any(models[r].kind == CHANGELOG_TABLE for r in m.reads if r in models):
                raise CompileError("reads a changelog_table model; read the model it logs instead", view=m.relation)
            try:
                for r in m.reads:
                    if r in missing:
                        raise missing[r]
                pipe.add_view(m.name, rename(m.sql, {r: engine_name(r) for r in m.reads}, tree=m.tree))
            except StreamError as e:
                named = e.naming(m.relation) if isinstance(e, CompileError) and e.view == m.name else e
                if m.relation == deploying:
                    raise named from None
                definition.dropped[m.relation] = str(named)
                continue
            definition.models[m.relation] = m
            if replaced & set(pipe.upstream(m.name)):
                pipe.reset(m.name)
    except BaseException:
        pipe.close()
        raise
    return definition


def topological(models: dict[str, Model]) -> list[Model]:
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
