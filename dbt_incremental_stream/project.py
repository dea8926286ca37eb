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
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import AbstractSet, Any, Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from .catalog import Catalog, quote_relation
from .circuit.operators import WEIGHT, quote
from .connectors.datasource import driver_table, kafka_frame, stops
from .connectors.kafka import KafkaSettings, KafkaSource, KafkaTopics, Ranges, shares
from .connectors.sinks import KafkaSink, TopicWriter
from .errors import CompileError, ConnectorError, ModelFailed, StateError, StreamError
from .runtime import kernels, zsets
from .runtime.pipeline import Changes, Pipeline
from .runtime.state import local_directory
from .sql.relations import engine_name, referenced, rename

STREAMING_VIEW = "streaming_view"
CHANGELOG_TABLE = "changelog_table"
KINDS = (STREAMING_VIEW, CHANGELOG_TABLE)
#: a source's read of at most this many offsets is decoded in the driver, not by a Spark job
DRIVER_READ = 100_000
#: columns a changelog table has after the model's own
CHANGELOG_COLUMNS = ("_op", "_weight", "_committed_at", "_tick")


@dataclass(frozen=True)
class Model:
    relation: str  # schema.identifier where the result is published
    sql: str  # reads other relations by their catalog names
    kind: str = STREAMING_VIEW
    sink: KafkaSink | None = None  # its changes mirrored to a Kafka topic
    reads: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise StreamError(f"model {self.relation!r}: kind {self.kind!r} is not one of {KINDS}")
        object.__setattr__(self, "relation", self.relation.lower())
        object.__setattr__(self, "reads", tuple(referenced(self.sql, view=self.relation)))

    @property
    def name(self) -> str:
        return engine_name(self.relation)

    def to_json(self) -> dict[str, Any]:
        return {"relation": self.relation, "sql": self.sql, "kind": self.kind,
                "sink": self.sink and self.sink.to_json()}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> Model:
        return Model(doc["relation"], doc["sql"], doc["kind"], KafkaSink.from_config(doc.get("sink")))


class Project:
    """The deployed models at ``state_location`` and the pipeline that maintains them.

    One writer at a time: calls are serialized by a lock, and the state location must not be
    shared with another running project.
    """

    def __init__(self, spark: SparkSession, state_location: str, *, kafka: KafkaSettings | None = None,
                 max_records: int | None = None):
        self.spark = spark
        self.location = state_location
        self.kafka, self.max_records = kafka, max_records
        self._lock = threading.RLock()
        self.pipe = Pipeline(spark, state_location)
        notes = self.pipe.notes
        self.models: dict[str, Model] = {rel: Model(rel, m["sql"], m["kind"], KafkaSink.from_config(m.get("sink")))
                                         for rel, m in notes.get("models", {}).items()}
        self.streams: dict[str, KafkaSource] = {d["relation"]: KafkaSource.from_json(d) for d in notes.get("kafka", [])}
        self._read: dict[str, str | None] = dict(notes.get("tables", {}))  # table source → fingerprint last read
        self._offsets: dict[str, dict[int, int]] = {rel: {int(p): o for p, o in parts.items()}
                                                    for rel, parts in notes.get("offsets", {}).items()}
        self._caught_up: set[str] = set()  # Kafka sources read to their end by this instance
        self._topics: KafkaTopics | None = None
        self._writers: dict[str, TopicWriter] = {}
        self._new_logs: set[str] = set()  # changelog tables to start over at the next tick
        self._published = -1  # the tick the catalog views show, as far as this instance knows
        self.catalog = Catalog(spark)
        self._replay = self._intent()  # offset ranges a crashed tick had read: read them again
        self.last: TickReport | None = None
        #: told each tick's report as soon as its manifest commits, before the catalog views
        #: are published: a tick nobody was told about is never committed
        self.on_commit: Callable[[TickReport], None] | None = None
        #: told a tick's report once it knows what the tick reads (offsets, lag, whether it is
        #: redone), before any model is computed: the lag of a tick in flight is known
        self.on_read: Callable[[TickReport], None] | None = None
        self.dropped: dict[str, str] = {}
        self._define(self.models)

    # --- definition --------------------------------------------------------------------

    def deploy(self, model: Model, *, streams: Sequence[KafkaSource] = (), full_refresh: bool = False) -> str:
        """Add or replace a model; its state is built at the next :meth:`advance`.

        ``streams`` declares the Kafka sources it reads (a relation read by a model that is
        neither a model nor a stream is a table source). Returns what happens to the model:
        ``created``, ``rebuilt`` (its SQL changed: its state and its dependents' are rebuilt
        from retained input), ``reset`` (``full_refresh``: its own state is rebuilt) or
        ``unchanged``.
        """
        with self._lock:
            old = self.models.get(model.relation)
            action = "created" if old is None else "unchanged" if old == model else "rebuilt"
            changed = [s for s in streams if self.streams.get(s.relation) != s]
            if changed or action != "unchanged":
                before = dict(self.streams)
                self.streams.update({s.relation: s for s in changed})
                try:
                    self._define({**self.models, model.relation: model}, deploying=model.relation,
                                 reread={s.relation for s in changed} if full_refresh else set())
                except BaseException:
                    self.streams = before
                    raise
                for s in changed:
                    if s.relation in before and before[s.relation].topic != s.topic:
                        self._offsets.pop(s.relation, None)  # another topic: read it from its start
            if full_refresh and action == "unchanged":
                action = "reset"
                self.pipe.reset(model.name)
            if model.kind == CHANGELOG_TABLE and action != "unchanged":
                self._new_logs.add(model.relation)
            return action

    def run_model(self, model: Model, streams: Sequence[KafkaSource] = (), *, full_refresh: bool = False,
                  keep: AbstractSet[str] | None = None) -> dict[str, Any]:
        """What ``dbt run`` does for one streaming model: drop models not in ``keep`` (once per
        invocation), deploy this one, tick until every source is caught up (to the end this
        instance saw first: one ``dbt run`` sees one frontier). Returns what
        happened (``action``, ``tick``, a one-line ``message``, the ``ticks``' reports) and
        models ``dropped`` because they no longer compile."""
        with self._lock:
            if keep is not None:
                self.prune(set(keep) | {model.relation})
            action = self.deploy(model, streams=[s for s in streams if s.relation in model.reads],
                                 full_refresh=full_refresh)
            ticked = more = self.advance()
            dead, reports = 0, []
            while True:  # max_records: as many ticks as it takes to catch up
                if more and self.last:
                    dead += sum(self.last.dead.values())
                    reports.append(asdict(self.last))
                if not self.behind:
                    break
                more = self.advance()
            dropped, self.dropped = dict(self.dropped), {}
            failed = self.failed.get(model.relation)
            if failed is not None:
                raise ModelFailed(f"failed on its input at tick {self.tick}: {failed}. It keeps its contents of "
                                  f"the last tick it computed, the other models went on; once the offending rows "
                                  f"are deleted or updated, or the model is changed, a run rebuilds it from "
                                  f"retained input")
            message = f"{action.upper()} at tick {self.tick}" + ("" if ticked else " (up to date)")
            if dead:
                message += f", {dead} records to dead letters"
            return {"action": action, "tick": self.tick, "message": message, "dropped": dropped, "ticks": reports}

    @property
    def failed(self) -> dict[str, str]:
        """Models whose SQL failed on their input, and the models reading them: relation →
        the error. They keep their contents of the last tick they computed (see
        :attr:`Pipeline.failed`)."""
        relations = {engine_name(rel): rel for rel in self.models}
        return {relations.get(n, n): re.sub(r"^reads (\S+),", lambda m: f"reads {relations.get(m[1], m[1])},", e)
                for n, e in self.pipe.failed.items()}

    def prune(self, keep: set[str]) -> list[str]:
        """Remove models not in ``keep`` (no longer streaming models of the project); their
        state goes at the next tick, their relations stay as they are."""
        with self._lock:
            gone = [rel for rel in self.models if rel not in {k.lower() for k in keep}]
            if gone:
                self._define({rel: m for rel, m in self.models.items() if rel not in gone})
            return gone

    def _define(self, models: dict[str, Model], deploying: str | None = None,
                reread: AbstractSet[str] = frozenset()) -> None:
        """Rebuild the pipeline for ``models``. A model other than ``deploying`` that no longer
        compiles (a model it reads changed) is dropped and named in :attr:`dropped`. A Kafka
        source in ``reread`` whose columns changed starts over from its topic's start. The
        new pipeline is built aside: if anything fails, the project is as it was."""
        self.catalog.forget()  # a redefinition may have had dbt drop or replace catalog views
        pipe = Pipeline(self.spark, self.location)
        pipe.notes = self.pipe.notes
        order = _topological(models)
        reread_streams: set[str] = set()  # Kafka sources to read from their start
        reread_tables: set[str] = set()  # table sources to read whole
        dropped: dict[str, str] = {}
        try:
            replaced, missing = set(), {}
            for rel in dict.fromkeys(r for m in order for r in m.reads if r in self.streams and r not in models):
                try:
                    if pipe.add_source(engine_name(rel), self.streams[rel].columns, replace=rel in reread,
                                       expire=self.streams[rel].expire):
                        replaced.add(engine_name(rel))
                        reread_streams.add(rel)
                    if self.streams[rel].envelope == "upsert":  # the rows a record replaces, by key
                        pipe.index(engine_name(rel), self.streams[rel].key)
                except StateError as e:
                    raise StreamError(f"the columns of Kafka source {rel!r} changed, and its retained input has the "
                                      f"old ones: run with --full-refresh to read topic {self.streams[rel].topic!r} "
                                      f"again from its start ({e})") from e
            for rel in dict.fromkeys(r for m in order for r in m.reads if r not in models and r not in self.streams):
                try:
                    schema = self._table(rel, reader=_reader(order, rel)).schema
                except ConnectorError as e:
                    missing[rel] = e
                    continue
                if pipe.add_source(engine_name(rel), schema, replace=True):  # the table changed columns
                    replaced.add(engine_name(rel))
                    reread_tables.add(rel)
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
                    dropped[m.relation] = str(e)
                    continue
                kept[m.relation] = m
                if replaced & set(pipe.upstream(m.name)):
                    pipe.reset(m.name)
        except BaseException:
            pipe.close()
            raise
        self.pipe.close()
        self.pipe, self.models = pipe, kept
        for rel in reread_streams:
            self._offsets.pop(rel, None)
            self._caught_up.discard(rel)
        for rel in reread_tables:
            self._read.pop(rel, None)
        self.dropped.update(dropped)

    def _table(self, relation: str, reader: str | None = None) -> DataFrame:
        try:
            return self.spark.table(quote_relation(relation))
        except AnalysisException as e:
            raise ConnectorError(f"model {reader!r} reads {relation!r}, which is neither a streaming model of "
                                 f"this project nor a table or view Spark can read: {e.getMessage()}") from e

    # --- running -----------------------------------------------------------------------

    def advance(self, now: datetime | None = None) -> bool:
        """One tick: read every source's changes, update all models, commit, publish.

        Kafka sources are read to their end once per Project instance (one ``dbt run``), at
        most ``max_records`` records per source and tick. Returns False (and commits nothing)
        when there is nothing to do: no source changed, no model to build, no model reading
        the time. :attr:`last` tells what the tick read and wrote.
        """
        with self._lock:
            started = time.monotonic()
            report = TickReport(self.pipe.tick + 1)
            deltas, read = self._read_tables()
            frames: list[DataFrame] = []
            try:
                ranges, behind, dead = self._read_streams(deltas, frames, report)
                tick, replaying, self._replay = self.pipe.tick + 1, self._replay is not None, None
                report.redone = replaying
                idle = not deltas and not dead and not self.pipe.pending and not self.pipe.reads_time
                if idle and self.pipe.tick > 0:
                    self._caught_up.update(set(self.stream_sources) - behind)
                    if replaying:  # the crashed tick had read nothing new
                        self.pipe.store.drop_intent(tick)
                    if self._published != self.tick:
                        self._publish()
                    return False
                offsets = {**self._offsets, **{rel: {**self._offsets.get(rel, {}), **{p: e for p, (_, e) in r.items()}}
                                               for rel, r in ranges.items()}}
                self.pipe.notes = {
                    "models": {rel: {"sql": m.sql, "kind": m.kind, "sink": m.sink and m.sink.to_json()}
                               for rel, m in self.models.items()},
                    "kafka": [self.streams[rel].to_json() for rel in self.stream_sources],
                    "offsets": {rel: {str(p): o for p, o in offsets[rel].items()} for rel in self.stream_sources
                                if rel in offsets},
                    "tables": {**{r: f for r, f in self._read.items() if r in self.table_sources}, **read},
                }
                if ranges and not replaying:  # a replayed tick keeps its intent
                    self._intend(tick, ranges)
                report.split["read"] = time.monotonic() - started
                if self.on_read is not None:
                    self.on_read(report)
                self.pipe.step(deltas, now,
                               before_commit=lambda tick, changes: self._outputs(tick, changes, dead, report))
                assert self.pipe.last_tick is not None  # set by every step that returns
                report.split.update(self.pipe.last_tick.seconds)
                report.failed = self.failed
                report.seconds = time.monotonic() - started
                self.last = report
                if self.on_commit is not None:
                    self.on_commit(report)
            finally:
                for frame in frames:
                    frame.unpersist()
            self._read, self._offsets = dict(self.pipe.notes["tables"]), offsets
            self.pipe.store.drop_intent(tick)
            self._caught_up.update(set(self.stream_sources) - behind)
            self._new_logs.clear()
            publishing = time.monotonic()
            self._publish()
            report.split["publish"] = time.monotonic() - publishing
            return True

    def _read_tables(self) -> tuple[dict[str, DataFrame | pa.Table], dict[str, str | None]]:
        """Changes of table sources whose files changed, and their new fingerprints."""
        deltas: dict[str, DataFrame | pa.Table] = {}
        read: dict[str, str | None] = {}
        for rel in self.table_sources:
            table = self._table(rel)
            fingerprint = _fingerprint(table)
            if fingerprint is None or fingerprint != self._read.get(rel):
                name = engine_name(rel)
                current = table.toDF(*self.pipe.schema(name).fieldNames())
                deltas[name] = zsets.diff(current, self.pipe.snapshot(name, weights=True))
                read[rel] = fingerprint
        return deltas, read

    def _read_streams(self, deltas: dict[str, DataFrame | pa.Table], frames: list[DataFrame], report: TickReport
                      ) -> tuple[dict[str, Ranges], set[str], dict[str, DataFrame]]:
        """This tick's offset ranges of the Kafka sources (those of a crashed tick again, if
        one is to be redone), their changes (into ``deltas``), the sources that have more
        to read, and each source's dead letters."""
        ranges: dict[str, Ranges] = {}
        behind: set[str] = set()
        dead: dict[str, DataFrame] = {}
        for rel in self.stream_sources:
            if rel in self._caught_up:
                continue
            source = self.streams[rel]
            most: dict[int, int] | None = None  # records to read per partition
            if self._replay is not None:  # the lag is what is left after the redone ranges
                ranges[rel] = self._replay.get(rel, {})
                after = {**self._offsets.get(rel, {}), **{p: e for p, (_, e) in ranges[rel].items()}}
                report.lag[rel] = sum(e - s for s, e in self._kafka().ranges(source, after)[0].values())
            else:  # to the end, at most max_records records (not offsets: transaction markers take some)
                ranges[rel], _ = self._kafka().ranges(source, self._offsets.get(rel, {}))
                total = sum(e - s for s, e in ranges[rel].values())
                most = shares(ranges[rel], self.max_records) if self.max_records and total > self.max_records else None
            ends = {p: e for p, (_, e) in ranges[rel].items()}
            if not any(e > s for s, e in ranges[rel].values()):
                report.offsets[rel] = 0
                if report.lag.setdefault(rel, 0):
                    behind.add(rel)
                continue
            reading = sum(most.values()) if most else sum(e - s for s, e in ranges[rel].values())
            if reading > DRIVER_READ or not self._read_in_driver(source, ranges, most, deltas, dead, report):
                frame = kafka_frame(self.spark, self._settings(), source, ranges[rel], most).persist()
                frames.append(frame)
                report.rows_in[rel], report.dead[rel] = _counts(frame)
                if most is not None:
                    ranges[rel] = stops(frame, ranges[rel], most)
                if report.rows_in[rel]:
                    deltas[engine_name(rel)] = self._stream_delta(source, frame.where(F.col("_reason").isNull()))
                if report.dead[rel]:
                    dead[rel] = frame.where(F.col("_reason").isNotNull())
            report.offsets[rel] = sum(e - s for s, e in ranges[rel].values())
            if self._replay is None:
                report.lag[rel] = sum(ends[p] - e for p, (_, e) in ranges[rel].items())
            if report.lag[rel]:
                behind.add(rel)  # the next tick reads on
        return ranges, behind, dead

    def _read_in_driver(self, source: KafkaSource, ranges: dict[str, Ranges], most: dict[int, int] | None,
                        deltas: dict[str, DataFrame | pa.Table], dead: dict[str, DataFrame], report: TickReport
                        ) -> bool:
        """A small read: decoded in the driver into Arrow, which a small tick runs on as it
        is (no Spark job); the source's ranges become those read. False when a column type
        only Spark converts."""
        rel = source.relation
        got = driver_table(self._settings(), source, ranges[rel], most)
        if got is None:
            return False
        table, ranges[rel] = got
        good = pc.is_null(table.column("_reason"))
        rows, letters = table.filter(good), table.filter(pc.invert(good))
        report.rows_in[rel], report.dead[rel] = rows.num_rows, letters.num_rows
        if rows.num_rows:
            deltas[engine_name(rel)] = (rows.select([f.name for f in source.columns.fields] + [WEIGHT])
                                        if source.envelope != "upsert" else self._upsert_arrow(source, rows))
        if letters.num_rows:
            dead[rel] = self.spark.createDataFrame(letters)
        return True

    def _upsert_arrow(self, source: KafkaSource, rows: pa.Table) -> DataFrame | pa.Table:
        """:meth:`_stream_delta` of an upsert source on Arrow: the last record per key, and
        the rows it replaces read from the source's arrangement by its key (by Spark until
        that arrangement is built)."""
        key = list(source.key)
        ranked = kernels.row_number(rows, key, [("_partition", True, False), ("_offset", True, False)], "_n")
        latest = ranked.filter(pc.equal(ranked.column("_n"), 1))
        replaced = self.pipe.current_rows(engine_name(source.relation), key, latest.select(key))
        if replaced is None:
            return self._stream_delta(source, self.spark.createDataFrame(rows))
        columns = [f.name for f in source.columns.fields] + [WEIGHT]
        new = latest.filter(pc.greater(latest.column(WEIGHT), 0)).select(columns)
        return kernels.consolidate(kernels.concat([new.cast(replaced.schema), kernels.negate(replaced)]))

    def _intend(self, tick: int, ranges: dict[str, Ranges]) -> None:
        """Record the Kafka offset ranges a tick reads before any of its output is written: a
        tick redone after a crash reads exactly the same records, so outputs it had already
        written (a sink's transaction) are the same tick."""
        self.pipe.store.intend(tick, {"ranges": {rel: {str(p): list(r) for p, r in parts.items()}
                                                 for rel, parts in ranges.items()}})

    def _intent(self) -> dict[str, Ranges] | None:
        """The ranges of the tick after the committed one, if a crash cut it short."""
        doc = self.pipe.store.intent()
        if doc is None:
            return None
        return {rel: {int(p): (s, e) for p, (s, e) in parts.items()} for rel, parts in doc["ranges"].items()}

    def new_frontier(self) -> None:
        """Let the next :meth:`advance` read Kafka sources up to their new end (by default an
        instance reads each to its end once: one ``dbt run`` sees one frontier)."""
        with self._lock:
            self._caught_up.clear()

    def _settings(self) -> KafkaSettings:
        if self.kafka is None:
            raise ConnectorError("models read or write Kafka topics, but the profile has no `kafka:` block with "
                                 "bootstrap_servers")
        return self.kafka

    def _kafka(self) -> KafkaTopics:
        if self._topics is None:
            self._topics = KafkaTopics(self._settings())
        return self._topics

    def _writer(self, name: str) -> TopicWriter:
        """The transactional producers of a model's sink or a source's dead-letter topic (their
        transactional ids name the state location too: projects do not fence each other)."""
        if name not in self._writers:
            where = hashlib.sha256((local_directory(self.location) or self.location).encode()).hexdigest()[:12]
            self._writers[name] = TopicWriter(self._settings(), f"{where}.{name}")
        return self._writers[name]

    def _stream_delta(self, source: KafkaSource, rows: DataFrame) -> DataFrame:
        """A tick's decoded records as a delta. An upsert source keeps the last record per
        key (by partition, then offset) and retracts the rows it replaces."""
        columns = [zsets.col(f.name) for f in source.columns.fields]
        if source.envelope != "upsert":
            return rows.select(*columns, zsets.col(WEIGHT))
        key = [zsets.col(k) for k in source.key]
        order = Window.partitionBy(*key).orderBy(F.col("_partition").desc(), F.col("_offset").desc())
        latest = rows.withColumn("_n", F.row_number().over(order)).where(F.col("_n") == 1)
        new = latest.where(zsets.col(WEIGHT) > 0).select(*columns, zsets.col(WEIGHT))
        replaced = zsets.restrict(self.pipe.snapshot(engine_name(source.relation), weights=True),
                                  latest.select(*key), list(source.key))
        return zsets.consolidate(zsets.union([new, zsets.scale(replaced, "-1")]))  # type: ignore[arg-type]

    @property
    def table_sources(self) -> list[str]:
        """Relations models read that are neither models nor Kafka sources: diffed every tick."""
        return list(dict.fromkeys(r for m in self.models.values() for r in m.reads
                                  if r not in self.models and r not in self.streams))

    @property
    def stream_sources(self) -> list[str]:
        """Kafka sources models read."""
        return list(dict.fromkeys(r for m in self.models.values() for r in m.reads if r in self.streams))

    @property
    def behind(self) -> bool:
        """Whether a Kafka source has records left this instance has not read (``max_records``)."""
        return any(rel not in self._caught_up for rel in self.stream_sources)

    def _publish(self) -> None:
        """Point every streaming view's and Kafka source's catalog view at the committed state
        (once per tick)."""
        self._published = self.tick
        views = [self.catalog.ensure_schema(rel) for rel in self.stream_sources]  # dbt creates only models' schemas
        views += [m.relation for m in self.models.values() if m.kind == STREAMING_VIEW]
        self.catalog.publish({rel: (self.pipe.relation_sql(engine_name(rel)), self.pipe.schema(engine_name(rel)))
                              for rel in views})

    def _outputs(self, tick: int, changes: Changes, dead: dict[str, DataFrame],
                 report: TickReport) -> None:
        """The tick's outputs, written before it commits and once per tick: the changes of
        each changelog table and Kafka sink, and each Kafka source's dead letters (in
        ``<source>__dead_letters`` and its ``dead_letter_topic``)."""
        at = datetime.now(timezone.utc).replace(tzinfo=None)
        for m in self.models.values():
            if m.kind != CHANGELOG_TABLE:
                continue
            if m.relation in self._new_logs:
                self.spark.sql(f"DROP TABLE IF EXISTS {quote_relation(m.relation)}")
            delta = changes[m.name]
            rows = delta.select(*(zsets.col(c) for c in zsets.data_columns(delta)),
                                F.when(zsets.col(WEIGHT) > 0, "insert").otherwise("delete").alias("_op"),
                                zsets.col(WEIGHT).alias("_weight"), F.lit(at).alias("_committed_at"),
                                F.lit(tick).cast("bigint").alias("_tick"))
            self._append(m.relation, rows, tick)
        for m in self.models.values():
            if m.sink is None:
                continue
            writer = self._writer(m.relation)
            table = changes.in_driver(m.name)
            if table is None:  # a tick on DataFrames: the tasks that compute the change write it
                report.rows_out[m.relation] = writer.write_from_tasks(m.relation, m.sink, changes[m.name], tick)
            else:
                payloads = m.sink.payloads(m.relation, table, self._settings().registry)
                writer.write(m.sink.topic, tick, payloads)
                report.rows_out[m.relation] = len(payloads)
        for rel, frame in dead.items():
            source = self.streams[rel]
            letters = frame.select(F.lit(source.topic).alias("topic"), F.col("_partition").alias("partition"),
                                   F.col("_offset").alias("offset"), F.col("_raw").alias("raw"),
                                   F.col("_reason").alias("reason"), F.lit(at).alias("_committed_at"),
                                   F.lit(tick).cast("bigint").alias("_tick"))
            self._append(f"{rel}__dead_letters", letters, tick)
            if source.dead_letter_topic:
                self._writer(f"{rel}__dead_letters").write(source.dead_letter_topic, tick, [
                    (None, r.raw, [("dbt_stream_topic", r.topic.encode()),
                                   ("dbt_stream_partition", str(r.partition).encode()),
                                   ("dbt_stream_offset", str(r.offset).encode()),
                                   ("dbt_stream_reason", r.reason.encode())]) for r in letters.collect()])

    def _append(self, relation: str, rows: DataFrame, tick: int) -> None:
        """Append a tick's rows to a table partitioned by ``_tick``, idempotently: a tick
        redone after a crash overwrites its partition (a static partition overwrite clears
        the partition's directory, so files a crashed write left before the catalog knew
        the partition go too) instead of adding to it."""
        table = quote_relation(self.catalog.ensure_schema(relation))
        columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in rows.schema)
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING parquet PARTITIONED BY (_tick)")
        view = f"dbt_stream_append_{hashlib.sha1(relation.encode()).hexdigest()[:12]}"
        rows.drop("_tick").createOrReplaceTempView(view)
        try:
            selected = ", ".join(quote(f.name) for f in rows.schema if f.name != "_tick")
            self.spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (_tick = {tick}) SELECT {selected} FROM {view}")
        finally:
            self.spark.catalog.dropTempView(view)

    # --- reading -----------------------------------------------------------------------

    @property
    def tick(self) -> int:
        return self.pipe.tick

    def ordered(self) -> list[Model]:
        """The models, each after the models it reads."""
        return _topological(self.models)

    def close(self) -> None:
        self.pipe.close()
        if self._topics is not None:
            self._topics.close()
            self._topics = None
        for w in self._writers.values():
            w.close()
        self._writers.clear()


@dataclass
class TickReport:
    """What one tick read and wrote, per Kafka source and sink."""

    tick: int
    offsets: dict[str, int] = field(default_factory=dict)  # offsets read per source
    rows_in: dict[str, int] = field(default_factory=dict)  # records that became changes
    dead: dict[str, int] = field(default_factory=dict)  # records sent to the dead letters
    lag: dict[str, int] = field(default_factory=dict)  # offsets left to read after the tick
    rows_out: dict[str, int] = field(default_factory=dict)  # messages written per sink
    failed: dict[str, str] = field(default_factory=dict)  # models set aside: relation → error
    redone: bool = False  # the tick a crash cut short, read again on the same offset ranges
    seconds: float = 0.0
    #: where the time went: read (Kafka and table sources), the pipeline's own split
    #: (spark, driver, write, commit), outputs (sinks, changelogs, dead letters), publish
    split: dict[str, float] = field(default_factory=dict)


def _counts(frame: DataFrame) -> tuple[int, int]:
    """Good and dead records of a read, in one job (which also fills its cache)."""
    got = {bool(r[0]): int(r[1]) for r in frame.groupBy(F.col("_reason").isNull()).count().collect()}
    return got.get(True, 0), got.get(False, 0)


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
