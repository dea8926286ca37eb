"""What a tick writes besides its state, before it commits and once per tick.

- a ``changelog_table`` model's changes, appended to its table with ``_op``, ``_weight``,
  ``_committed_at`` and ``_tick`` (:data:`CHANGELOG_COLUMNS`);
- a model's ``sink``: its changes as messages of a Kafka topic;
- a Kafka source's dead letters (records that did not decode, with their topic, partition,
  offset and reason): in the table ``<source>__dead_letters`` and, if the source names
  one, its ``dead_letter_topic``.

Tables are partitioned by ``_tick`` and a tick overwrites its partition, and topics are
written by one transactional producer per partition that skips a tick already there, so a
tick redone after a crash writes each output once.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..catalog import Catalog, quote_relation
from ..circuit.operators import WEIGHT, quote
from ..connectors.kafka import KafkaSettings, KafkaSource
from ..connectors.sinks import TopicWriter
from ..runtime.spark import zsets
from ..runtime.ticks import Changes
from ..runtime.storage.location import local_directory
from .models import CHANGELOG_TABLE, Model
from .report import TickReport

#: columns a changelog table has after the model's own
CHANGELOG_COLUMNS = ("_op", "_weight", "_committed_at", "_tick")


class Outputs:
    """The writers of a project's outputs. Transactional ids name the state location, so
    two projects do not fence each other's producers."""

    def __init__(self, spark: SparkSession, catalog: Catalog, location: str, kafka: KafkaSettings | None):
        self.spark, self.catalog, self.kafka = spark, catalog, kafka
        self._where = hashlib.sha256((local_directory(location) or location).encode()).hexdigest()[:12]
        self._writers: dict[str, TopicWriter] = {}
        self._tables: set[str] = set()  # tables this instance created or found (no CREATE per tick)
        self.new_logs: set[str] = set()  # changelog tables to start over at the next tick (cleared by its commit)

    def writer(self, name: str) -> TopicWriter:
        """The transactional producers of a model's sink or a source's dead-letter topic."""
        if name not in self._writers:
            self._writers[name] = TopicWriter(KafkaSettings.required(self.kafka), f"{self._where}.{name}")
        return self._writers[name]

    def write(self, tick: int, models: Mapping[str, Model], changes: Changes, streams: Mapping[str, KafkaSource],
              dead: Mapping[str, DataFrame], report: TickReport) -> None:
        """The tick's changelogs, sinks and dead letters."""
        at = datetime.now(timezone.utc).replace(tzinfo=None)
        for m in models.values():
            if m.kind != CHANGELOG_TABLE:
                continue
            if m.relation in self.new_logs:
                self.spark.sql(f"DROP TABLE IF EXISTS {quote_relation(m.relation)}")
                self._tables.discard(m.relation)
            table = changes.in_driver(m.name)
            delta = changes[m.name]
            rows = delta.select(*(zsets.col(c) for c in zsets.data_columns(delta)),
                                F.when(zsets.col(WEIGHT) > 0, "insert").otherwise("delete").alias("_op"),
                                zsets.col(WEIGHT).alias("_weight"), F.lit(at).alias("_committed_at"),
                                F.lit(tick).cast("bigint").alias("_tick"))
            self._append(m.relation, rows, tick, empty=table is not None and table.num_rows == 0)
        for m in models.values():
            if m.sink is None:
                continue
            writer = self.writer(m.relation)
            table = changes.in_driver(m.name)
            if table is None:  # a tick on DataFrames: the tasks that compute the change write it
                report.rows_out[m.relation] = writer.write_from_tasks(m.relation, m.sink, changes[m.name], tick)
            else:
                payloads = m.sink.payloads(m.relation, table, KafkaSettings.required(self.kafka).registry)
                writer.write(m.sink.topic, tick, payloads)
                report.rows_out[m.relation] = len(payloads)
        for rel, frame in dead.items():
            source = streams[rel]
            letters = frame.select(F.lit(source.topic).alias("topic"), F.col("_partition").alias("partition"),
                                   F.col("_offset").alias("offset"), F.col("_raw").alias("raw"),
                                   F.col("_reason").alias("reason"), F.lit(at).alias("_committed_at"),
                                   F.lit(tick).cast("bigint").alias("_tick"))
            self._append(f"{rel}__dead_letters", letters, tick)
            if source.dead_letter_topic:
                self.writer(f"{rel}__dead_letters").write(source.dead_letter_topic, tick, [
                    (None, r.raw, [("dbt_stream_topic", r.topic.encode()),
                                   ("dbt_stream_partition", str(r.partition).encode()),
                                   ("dbt_stream_offset", str(r.offset).encode()),
                                   ("dbt_stream_reason", r.reason.encode())]) for r in letters.collect()])

    def _append(self, relation: str, rows: DataFrame, tick: int, *, empty: bool = False) -> None:
        """Append a tick's rows to a table partitioned by ``_tick``, idempotently: a tick
        redone after a crash overwrites its partition (a static partition overwrite clears
        the partition's directory, so files a crashed write left before the catalog knew
        the partition go too) instead of adding to it. A tick known to have no rows
        (``empty``) writes no partition: its redo has none either (a tick's input is fixed
        by its intent), and an empty insert is a Spark job and a metastore call per tick."""
        table = quote_relation(self.catalog.ensure_schema(relation))
        if relation not in self._tables:
            columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in rows.schema)
            self.spark.sql(f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING parquet PARTITIONED BY (_tick)")
            self._tables.add(relation)
        if empty:
            return
        view = f"dbt_stream_append_{hashlib.sha1(relation.encode()).hexdigest()[:12]}"
        rows.drop("_tick").createOrReplaceTempView(view)
        try:
            selected = ", ".join(quote(f.name) for f in rows.schema if f.name != "_tick")
            self.spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (_tick = {tick}) SELECT {selected} FROM {view}")
        finally:
            self.spark.catalog.dropTempView(view)

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
