"""How far a project has read its sources, and one tick's read of them.

Two kinds of source feed the models:

- a *table source* — any relation Spark reads that is neither a model nor a Kafka source (a
  dbt seed, a batch model, an external table). It is read again when its listing (files
  with their sizes and modification times, columns, plan) moved. A table of Parquet or ORC
  files, not partitioned, whose files were only added (an ``INSERT INTO``, a file dropped
  into an external table's directory) changes by the rows of the new files, read alone;
  a table the pipeline holds nothing of yet is read whole; any other change is its
  contents minus what the pipeline holds of it (a whole-table comparison). Local Parquet
  files are read by pyarrow in the driver, up to a size (:data:`DRIVER_FILE_BYTES` added,
  :data:`DRIVER_TABLE_BYTES` whole), and compared there by the kernels; else Spark reads
  and compares. Every read lists the table's files anew (a session otherwise keeps the
  listing it first made). Once Spark has listed a table of one local directory, later
  reads by the same instance list that directory in Python and ask the metastore for its
  definition, and read added Parquet files with no analysis by Spark (:class:`Listed`);
- a *Kafka source*, read from where the last committed tick ended, to the end of the topic
  (once per :class:`Inputs`: one ``dbt run`` sees one frontier), at most ``max_records``
  records a tick. A small read is decoded in the driver into Arrow, a large one by Spark.
  Sources read to their end at the last tick are fetched together first, in one pass of
  the driver's consumer, when their new records are few.

The positions are committed with each tick, in the pipeline's notes: ``tables`` (table
source → its listing; the file list only for up to :data:`LISTED_FILES` files) and
``offsets`` (Kafka source → partition → next offset). Before a
tick writes any output, its offset ranges are recorded as an intent (``Store.intend``); a
tick redone after a crash reads exactly those records again, so outputs it had already
written are the same tick.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from py4j.protocol import Py4JError
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ..catalog import quote_relation, table_identifier
from ..circuit.operators import WEIGHT
from ..connectors.datasource import driver_table, kafka_frame, stops
from ..connectors.kafka import Fetched, KafkaSettings, KafkaSource, KafkaTopics, Ranges, shares
from ..errors import ConnectorError
from ..runtime.arrow import kernels, windows
from ..runtime.spark import zsets
from ..runtime.storage.location import local_directory
from ..runtime.pipeline import Pipeline
from ..sql.relations import engine_name
from .report import TickReport

#: a source's read of at most this many offsets is decoded in the driver, not by a Spark job
DRIVER_READ = 100_000
#: a table source of at most this many files keeps its file list in the tick's notes, so
#: that a later read finds the files that were added (a larger one is compared whole)
LISTED_FILES = 5_000
#: file formats whose added files are read alone (self-describing: no reader options)
APPENDABLE = ("parquet", "orc")
#: added Parquet files of at most this many bytes in all are read in the driver
DRIVER_FILE_BYTES = 64 << 20
#: a Parquet table source read whole (at first, or to compare it with the pipeline's
#: batches of it) is read in the driver when its files are at most this many bytes in all
#: (with those batches, when compared): Parquet's bytes, several times that in memory
DRIVER_TABLE_BYTES = 128 << 20

Listing = dict[str, Any]  # a table source's digest, shape and (maybe) files


@dataclass
class Read:
    """One tick's read of every source: the changes, and where each source stands after."""

    tables: list[str]  # the table sources
    streams: list[str]  # the Kafka sources
    redone: bool  # the ranges of a tick a crash cut short, read again
    deltas: dict[str, DataFrame | pa.Table] = field(default_factory=dict)  # by the pipeline's source name
    fingerprints: dict[str, Listing | None] = field(default_factory=dict)  # table sources read
    ranges: dict[str, Ranges] = field(default_factory=dict)  # Kafka offsets read
    behind: set[str] = field(default_factory=set)  # Kafka sources with more to read
    dead: dict[str, DataFrame] = field(default_factory=dict)  # each Kafka source's dead letters
    frames: list[DataFrame] = field(default_factory=list)  # Spark reads cached for the tick

    def release(self) -> None:
        for frame in self.frames:
            frame.unpersist()


@dataclass(frozen=True)
class Listed:
    """A table source as a read of it by Spark in this process found it, so that later
    reads list it without Spark (:meth:`Inputs._listed`): its catalog definition, the one
    local directory of its files (listed there as Spark listed them), its columns, shape
    and file format."""

    definition: str
    directory: str  # as Spark names it (``file:/...``)
    columns: list[str]
    shape: str
    file_format: str
    ident: Any  # its identifier in the session catalog


class Inputs:
    """Where every source was read up to at the committed tick, and the reads of the next."""

    def __init__(self, spark: SparkSession, pipe: Pipeline, kafka: KafkaSettings | None, max_records: int | None):
        self.spark, self.kafka, self.max_records = spark, kafka, max_records
        self.fingerprints: dict[str, Listing | None] = dict(pipe.notes.get("tables", {}))
        self.offsets: dict[str, dict[int, int]] = {rel: {int(p): o for p, o in parts.items()}
                                                   for rel, parts in pipe.notes.get("offsets", {}).items()}
        self.caught_up: set[str] = set()  # Kafka sources read to their end by this instance
        self.backlog: set[str] = set()  # Kafka sources the last tick left records of
        doc = pipe.store.intent()  # offset ranges a crashed tick had read: read them again
        self.replay: dict[str, Ranges] | None = None if doc is None else {
            rel: {int(p): (s, e) for p, (s, e) in parts.items()} for rel, parts in doc["ranges"].items()}
        self._topics: KafkaTopics | None = None
        #: table sources opened since the last read (a definition opens each to learn its
        #: columns, and the tick right after reads it: one analysis, 20 ms, not two)
        self._opened: dict[str, DataFrame] = {}
        #: table sources whose later reads list them without Spark
        self._listed_by_us: dict[str, Listed] = {}
        self._catalog: Any = None  # the session catalog, a JVM object

    def table(self, relation: str, reader: str | None = None) -> DataFrame:
        """A table source as Spark reads it now (as opened since the last read). Its files
        are listed anew: a session keeps a table's relation, files and all, until something
        in the session writes the table, so files another writer added or removed since (an
        ingestion job, a file dropped into an external table) are not seen without."""
        if relation in self._opened:
            return self._opened[relation]
        ident = table_identifier(self.spark, relation)
        if ident is not None:  # the session's cached relation (its file listing) goes
            self._session_catalog().invalidateCachedTable(ident)
        try:
            table = self._opened[relation] = self.spark.table(quote_relation(relation))
            return table
        except AnalysisException as e:
            raise ConnectorError(f"model {reader!r} reads {relation!r}, which is neither a streaming model of "
                                 f"this project nor a table or view Spark can read: {e.getMessage()}") from e

    def new_invocation(self) -> None:
        """Read Kafka sources to their new end, and table sources as they are now."""
        self.caught_up.clear()
        self._opened.clear()

    def topics(self) -> KafkaTopics:
        if self._topics is None:
            self._topics = KafkaTopics(KafkaSettings.required(self.kafka))
        return self._topics

    def forget(self, streams: AbstractSet[str] = frozenset(), tables: AbstractSet[str] = frozenset()) -> None:
        """Read these sources again from their start (their columns or topic changed)."""
        for rel in streams:
            self.offsets.pop(rel, None)
            self.caught_up.discard(rel)
        for rel in tables:
            self.fingerprints.pop(rel, None)
            self._listed_by_us.pop(rel, None)

    def behind(self, streams: Sequence[str]) -> bool:
        return any(rel not in self.caught_up for rel in streams)

    # --- a tick ------------------------------------------------------------------------

    def read(self, pipe: Pipeline, tables: list[str], streams: list[KafkaSource], report: TickReport) -> Read:
        """The changes of every source since the committed tick (those of a crashed tick
        again, if one is to be redone). The caller releases the read after the tick."""
        read = Read(tables, [s.relation for s in streams], redone=self.replay is not None)
        try:
            self._read_tables(pipe, read, report)
        finally:
            self._opened.clear()  # the next tick opens them anew
        streams = [s for s in streams if s.relation not in self.caught_up]
        try:
            fetched = self._fetch(streams)
            for source in streams:
                self._read_stream(pipe, source, read, report, fetched.get(source.relation))
        except BaseException:
            read.release()
            raise
        self.replay = None
        return read

    def positions(self, read: Read) -> dict[str, Any]:
        """Where the sources stand after ``read``: the pipeline's notes commit it with the tick."""
        offsets = self._after(read)
        return {"offsets": {rel: {str(p): o for p, o in offsets[rel].items()} for rel in read.streams
                            if rel in offsets},
                "tables": {**{r: f for r, f in self.fingerprints.items() if r in read.tables}, **read.fingerprints}}

    def intend(self, pipe: Pipeline, tick: int, read: Read) -> None:
        """Record the offset ranges ``tick`` reads before any of its output is written (a
        redone tick keeps the intent it redoes)."""
        if read.ranges and not read.redone:
            pipe.store.intend(tick, {"ranges": {rel: {str(p): list(r) for p, r in parts.items()}
                                                for rel, parts in read.ranges.items()}})

    def committed(self, pipe: Pipeline, tick: int, read: Read) -> None:
        """``tick`` committed ``read``: later ticks read on from there."""
        self.fingerprints, self.offsets = dict(pipe.notes["tables"]), self._after(read)
        pipe.store.drop_intent(tick)
        self._caught_up(read)

    def idle(self, pipe: Pipeline, tick: int, read: Read) -> None:
        """``read`` found nothing: no tick is committed."""
        self._caught_up(read)
        if read.redone:  # the crashed tick had read nothing new
            pipe.store.drop_intent(tick)

    def close(self) -> None:
        if self._topics is not None:
            self._topics.close()
            self._topics = None

    def _caught_up(self, read: Read) -> None:
        self.caught_up.update(set(read.streams) - read.behind)
        self.backlog = (self.backlog - set(read.streams)) | read.behind

    def _after(self, read: Read) -> dict[str, dict[int, int]]:
        return {**self.offsets, **{rel: {**self.offsets.get(rel, {}), **{p: e for p, (_, e) in r.items()}}
                                   for rel, r in read.ranges.items()}}

    def _read_tables(self, pipe: Pipeline, read: Read, report: TickReport) -> None:
        """Changes of table sources whose listing moved, and their new listings."""
        for rel in read.tables:
            old = self.fingerprints.get(rel)
            name = engine_name(rel)
            if self._read_listed(pipe, rel, name, old, read, report):
                continue
            table = self.table(rel)
            listing = _listing(table)
            found = _relation_of(table)
            self._learn(rel, table, listing, found)
            if listing is not None and old is not None and _digest(old) == listing["digest"]:
                continue
            names = pipe.schema(name).fieldNames()
            added = _added(old, listing)
            file_format = found[1] if added and found is not None and found[1] in APPENDABLE else None
            if added and file_format is not None:
                read.deltas[name] = self._read_added(pipe, name, table, file_format, added, listing)
                where = "in the driver" if isinstance(read.deltas[name], pa.Table) else "by Spark"
                report.tables[rel] = f"{len(added)} added files, {where}"
            elif not pipe.contents.holds(name):  # nothing to compare with: all of it is new
                whole = _whole_in_driver(pipe, name, table, listing)
                read.deltas[name] = whole if whole is not None else zsets.inserted(table.toDF(*names))
                report.tables[rel] = "read whole, " + ("in the driver" if whole is not None else "by Spark")
            elif (compared := _compared_in_driver(pipe, name, table, listing)) is not None:
                read.deltas[name] = compared
                report.tables[rel] = "compared whole, in the driver"
            else:
                read.deltas[name] = zsets.diff(table.toDF(*names), pipe.contents.integral(name))
                report.tables[rel] = "compared whole, by Spark"
            read.fingerprints[rel] = listing

    def _read_listed(self, pipe: Pipeline, rel: str, name: str, old: Listing | str | None, read: Read,
                     report: TickReport) -> bool:
        """A table source read without Spark (:meth:`_listed`): True when it is unchanged, or
        its added Parquet files were read in the driver; False: Spark reads it."""
        quick = self._listed(rel, old)
        if quick is None:
            return False
        listing, added = quick
        if not added:
            return True
        known = self._listed_by_us[rel]
        rows = _added_in_driver(pipe, name, known.columns, known.file_format, added, listing)
        if rows is None:
            return False
        read.deltas[name], read.fingerprints[rel] = rows, listing
        report.tables[rel] = f"{len(added)} added files, in the driver"
        return True

    def _listed(self, rel: str, old: Listing | str | None) -> tuple[Listing, list[str]] | None:
        """A table source's listing now and its added files (none: unchanged), without Spark:
        when a Spark read in this process learnt it (:meth:`_learn`), its catalog definition
        is the same, and its files were only added since the committed listing. None: Spark
        reads it (analysing it costs 25-50 ms, most of a small tick's read)."""
        known = self._listed_by_us.get(rel)
        if known is None or not isinstance(old, dict) or old["shape"] != known.shape:
            return None
        files = _files_in(known.directory)
        try:
            same = _definition(self._session_catalog().getTableMetadata(known.ident)) == known.definition
        except Py4JError:  # dropped since: Spark says how
            same = False
        if files is None or not same:
            self._listed_by_us.pop(rel)
            return None
        listing = _listing_of(known.shape, files)
        if _digest(old) == listing["digest"]:
            return listing, []
        added = _added(old, listing)
        return (listing, added) if added else None

    def _learn(self, rel: str, table: DataFrame, listing: Listing | None, found: tuple[Any | None, str] | None
               ) -> None:
        """Remember a table source Spark just listed (``found``: its :func:`_relation_of`),
        for reads without Spark (:meth:`_listed`), when its files are all in one local
        directory, where Python lists the same files."""
        self._listed_by_us.pop(rel, None)
        files = (listing or {}).get("files") or []
        directories = {f[0].rsplit("/", 1)[0] for f in files}
        if not files or any(len(f) != 3 for f in files) or len(directories) != 1:
            return
        directory = directories.pop()
        ident = table_identifier(self.spark, rel)
        if found is None or found[0] is None or found[1] not in APPENDABLE or ident is None \
                or _files_in(directory) != files:
            return
        assert listing is not None
        self._listed_by_us[rel] = Listed(_definition(found[0]), directory, table.columns, listing["shape"], found[1],
                                         ident)

    def _session_catalog(self) -> Any:
        if self._catalog is None:
            self._catalog = self.spark._jsparkSession.sessionState().catalog()
        return self._catalog

    def _read_added(self, pipe: Pipeline, name: str, table: DataFrame, file_format: str, added: list[str],
                    listing: Listing | None) -> DataFrame | pa.Table:
        """The rows of a table source's added files, each of weight 1: in the driver
        (:func:`_added_in_driver`), else by Spark."""
        rows = _added_in_driver(pipe, name, table.columns, file_format, added, listing)
        if rows is not None:
            return rows
        names = pipe.schema(name).fieldNames()
        return zsets.inserted(self.spark.read.schema(table.schema).format(file_format).load(added).toDF(*names))

    def _fetch(self, streams: list[KafkaSource]) -> dict[str, Fetched]:
        """The records of the sources that were read to their end at the last tick, to
        their end now, when they are few (at most ``max_records`` and
        :data:`DRIVER_READ`): one pass of the kept consumer for all of them
        (:meth:`.KafkaTopics.fetch`)."""
        wanted = {s.relation: (s, self.offsets[s.relation]) for s in streams
                  if s.relation in self.offsets and s.relation not in self.backlog}
        if self.replay is not None or not wanted:
            return {}
        return self.topics().fetch(wanted, min(DRIVER_READ, self.max_records or DRIVER_READ))

    def _read_stream(self, pipe: Pipeline, source: KafkaSource, read: Read, report: TickReport,
                     fetched: Fetched | None) -> None:
        """A Kafka source's offset ranges this tick (``fetched``: with their records), its
        changes and dead letters, and whether it has more to read."""
        rel = source.relation
        most: dict[int, int] | None = None  # records to read per partition
        if fetched is not None:
            ranges = read.ranges[rel] = fetched.ranges
        elif self.replay is not None:  # the lag is what is left after the redone ranges
            ranges = read.ranges[rel] = self.replay.get(rel, {})
            after = {**self.offsets.get(rel, {}), **{p: e for p, (_, e) in ranges.items()}}
            report.lag[rel] = sum(e - s for s, e in self.topics().ranges(source, after)[0].values())
        else:  # to the end, at most max_records records (not offsets: transaction markers take some)
            ranges = read.ranges[rel] = self.topics().ranges(source, self.offsets.get(rel, {}))[0]
            total = sum(e - s for s, e in ranges.values())
            most = shares(ranges, self.max_records) if self.max_records and total > self.max_records else None
        ends = {p: e for p, (_, e) in ranges.items()}
        if not any(e > s for s, e in ranges.values()):
            report.offsets[rel] = 0
            if report.lag.setdefault(rel, 0):
                read.behind.add(rel)
            return
        reading = sum(most.values()) if most else sum(e - s for s, e in ranges.values())
        records = None if fetched is None else fetched.records
        if reading <= DRIVER_READ:
            self._read_in_driver(pipe, source, most, read, report, records)
        else:
            frame = kafka_frame(self.spark, KafkaSettings.required(self.kafka), source, ranges, most).persist()
            read.frames.append(frame)
            report.rows_in[rel], report.dead[rel] = _counts(frame)
            if most is not None:
                read.ranges[rel] = stops(frame, ranges, most)
            if report.rows_in[rel]:
                read.deltas[engine_name(rel)] = _changes(pipe, source, frame.where(F.col("_reason").isNull()))
            if report.dead[rel]:
                read.dead[rel] = frame.where(F.col("_reason").isNotNull())
        report.offsets[rel] = sum(e - s for s, e in read.ranges[rel].values())
        if self.replay is None:
            report.lag[rel] = sum(ends[p] - e for p, (_, e) in read.ranges[rel].items())
        if report.lag[rel]:
            read.behind.add(rel)  # the next tick reads on

    def _read_in_driver(self, pipe: Pipeline, source: KafkaSource, most: dict[int, int] | None, read: Read,
                        report: TickReport, records: dict[int, list[Any]] | None) -> None:
        """A small read (``records``: fetched already): decoded in the driver into Arrow,
        which a small tick runs on as it is (no Spark job); the source's ranges become those
        read."""
        rel = source.relation
        table, read.ranges[rel] = driver_table(KafkaSettings.required(self.kafka), source, read.ranges[rel], most,
                                               records)
        good = pc.is_null(table.column("_reason"))
        rows, letters = table.filter(good), table.filter(pc.invert(good))
        report.rows_in[rel], report.dead[rel] = rows.num_rows, letters.num_rows
        if rows.num_rows:
            read.deltas[engine_name(rel)] = _changes(pipe, source, rows)
        if letters.num_rows:
            read.dead[rel] = zsets.arrow_frame(self.spark, letters)


def _changes(pipe: Pipeline, source: KafkaSource, rows: DataFrame | pa.Table) -> DataFrame | pa.Table:
    """A tick's decoded records as a delta of the source. An upsert source keeps the last
    record per key (by partition, then offset): it inserts that record's row unless it is a
    tombstone, and retracts the row the source holds for the key. On Arrow the replaced rows
    come from the source's arrangement, on Spark (also until the arrangement is built) from
    its snapshot."""
    columns = [f.name for f in source.columns.fields] + [WEIGHT]
    if source.envelope != "upsert":
        return rows.select(columns) if isinstance(rows, pa.Table) else rows.select(*map(zsets.col, columns))
    key, name = list(source.key), engine_name(source.relation)
    if isinstance(rows, pa.Table):
        ranked = windows.ranks(rows, key, [("_partition", True, False), ("_offset", True, False)],
                               [windows.Ordered("_n", "row_number")])
        assert ranked is not None  # ROW_NUMBER alone is always Arrow's
        latest = ranked.filter(pc.equal(ranked.column("_n"), 1))
        replaced = pipe.contents.by_key(name, key, latest.select(key), pipe.pending)
        if replaced is not None:
            new = latest.filter(pc.greater(latest.column(WEIGHT), 0)).select(columns)
            return kernels.consolidate(kernels.concat([new.cast(replaced.schema), kernels.negate(replaced)]))
        rows = zsets.arrow_frame(pipe.spark, rows)
    keys = [zsets.col(k) for k in key]
    order = Window.partitionBy(*keys).orderBy(F.col("_partition").desc(), F.col("_offset").desc())
    latest = rows.withColumn("_n", F.row_number().over(order)).where(F.col("_n") == 1)
    new = latest.where(zsets.col(WEIGHT) > 0).select(*map(zsets.col, columns))
    replaced_rows = zsets.restrict(pipe.snapshot(name, weights=True), latest.select(*keys), key)
    return zsets.consolidate(zsets.union([new, zsets.scale(replaced_rows, "-1")]))  # type: ignore[arg-type]


def _parquet_in_driver(pipe: Pipeline, name: str, columns: list[str], files: list[str]) -> pa.Table | None:
    """Parquet files of a table source on this machine, read by pyarrow: its rows, each
    inserted once, in the source's types; None when pyarrow does not read them as Spark
    does (Spark reads them then)."""
    try:
        rows = pq.read_table([local_directory(f) for f in files], columns=columns,
                             coerce_int96_timestamp_unit="us")
        return pipe.circuit.conform_arrow(name, kernels.inserted(rows.rename_columns(pipe.schema(name).fieldNames())))
    except (pa.ArrowException, OSError, KeyError):
        return None


def _added_in_driver(pipe: Pipeline, name: str, columns: list[str], file_format: str, added: list[str],
                     listing: Listing | None) -> pa.Table | None:
    """A table source's added files read by pyarrow (:func:`_parquet_in_driver`), when they
    are Parquet files on this machine of at most :data:`DRIVER_FILE_BYTES` in all (a Spark
    job costs more than reading them); None: Spark reads them."""
    sizes = {f[0]: f[1] for f in (listing or {}).get("files") or [] if len(f) == 3}  # local files only
    if file_format != "parquet" or not all(f in sizes for f in added) or sum(sizes[f] for f in added) \
            > DRIVER_FILE_BYTES:
        return None
    return _parquet_in_driver(pipe, name, columns, added)


def _driver_files(table: DataFrame, listing: Listing | None) -> list[list[Any]] | None:
    """A table source's files, when it is read whole in the driver: a Parquet table whose
    files are on this machine, of at most :data:`DRIVER_TABLE_BYTES` in all. Spark's
    conversion of 5M rows to Arrow for the tick's tasks took most of a first build's 15 s,
    pyarrow reads them in 0.5 s. None: Spark reads it."""
    files = (listing or {}).get("files") or []
    if not files or any(len(f) != 3 for f in files) or sum(f[1] for f in files) > DRIVER_TABLE_BYTES \
            or _file_format(table) != "parquet":
        return None
    return files


def _whole_in_driver(pipe: Pipeline, name: str, table: DataFrame, listing: Listing | None) -> pa.Table | None:
    """A table source's rows read whole in the driver (:func:`_driver_files`); None: Spark
    reads it."""
    files = _driver_files(table, listing)
    return None if files is None else _parquet_in_driver(pipe, name, table.columns, [f[0] for f in files])


def _compared_in_driver(pipe: Pipeline, name: str, table: DataFrame, listing: Listing | None) -> pa.Table | None:
    """A table source's change, its rows now against what the pipeline holds of it, in
    the driver by the kernels (:func:`.kernels.diff`): when its rows are read in the
    driver (:func:`_driver_files`) and, with the pipeline's batches of it, are of at most
    :data:`DRIVER_TABLE_BYTES` in all. Spark's comparison of the same (an aggregation of
    both by every column) took 10-15 s for 5M rows a side on two cores, this 4-5 s. None:
    Spark compares them. The table is checked first, so that nothing is read for a table
    Spark compares."""
    files = _driver_files(table, listing)
    if files is None:
        return None
    held = pipe.contents.integral_arrow(name, DRIVER_TABLE_BYTES - sum(f[1] for f in files))
    now = _parquet_in_driver(pipe, name, table.columns, [f[0] for f in files]) if held is not None else None
    if held is None or now is None:
        return None
    return kernels.diff(now.drop_columns([WEIGHT]), held)


def _counts(frame: DataFrame) -> tuple[int, int]:
    """Good and dead records of a read, in one job (which also fills its cache)."""
    got = {bool(r[0]): int(r[1]) for r in frame.groupBy(F.col("_reason").isNull()).count().collect()}
    return got.get(True, 0), got.get(False, 0)


def _listing(table: DataFrame) -> Listing | None:
    """What a table source is read from: its shape (columns and plan, which do not name
    its files), its files (with size and modification time where they are on this
    machine), and a digest of all. None for a relation read from no files (it is compared
    whole every tick)."""
    files = sorted(table.inputFiles())
    if not files:
        return None
    return _listing_of(_sha(json.dumps([table.schema.json(), table.semanticHash()])), [_file_stat(f) for f in files])


def _listing_of(shape: str, listed: list[list[Any]]) -> Listing:
    return {"digest": _sha(json.dumps([shape, listed])), "shape": shape,
            "files": listed if len(listed) <= LISTED_FILES else None}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _file_stat(path: str) -> list[Any]:
    """A file as listed: its path, and its size and modification time when it is local (a
    file rewritten under the same name changes them)."""
    local = local_directory(path) if path.startswith("file:") else None
    if local is None:
        return [path]
    try:
        st = os.stat(local)
    except OSError:
        return [path]
    return [path, st.st_size, st.st_mtime_ns]


def _digest(listing: Listing | str) -> str:
    """A listing's digest (a fingerprint string, as notes held it before listings)."""
    return listing if isinstance(listing, str) else str(listing["digest"])


def _added(old: Listing | str | None, new: Listing | None) -> list[str] | None:
    """The files of ``new`` that ``old`` lacks, when the table is otherwise as it was
    (same shape, every old file still there unchanged); None when it is not."""
    if not isinstance(old, dict) or new is None or old["shape"] != new["shape"] \
            or old.get("files") is None or new["files"] is None:
        return None
    before = {tuple(f) for f in old["files"]}
    now = {tuple(f) for f in new["files"]}
    if not before <= now:
        return None
    return sorted(f[0] for f in now - before)


def _relation_of(table: DataFrame) -> tuple[Any | None, str] | None:
    """The catalog definition (None: not a catalog table) and file format of a relation
    read straight from files, not partitioned (a partition's values are in its path); None
    for any other relation."""
    try:
        plan = table._jdf.queryExecution().analyzed()
        while plan.getClass().getSimpleName() == "SubqueryAlias":
            plan = plan.child()
        if plan.getClass().getSimpleName() != "LogicalRelation":
            return None
        relation = plan.relation()
        if relation.getClass().getSimpleName() != "HadoopFsRelation" or not relation.partitionSchema().isEmpty():
            return None
        catalog_table = plan.catalogTable()
        return catalog_table.get() if catalog_table.isDefined() else None, str(relation.fileFormat().shortName())
    except Py4JError:
        return None


def _file_format(table: DataFrame) -> str | None:
    """The format of a table read straight from files, when its added files can be read
    alone: Parquet or ORC, not partitioned."""
    found = _relation_of(table)
    return found[1] if found is not None and found[1] in APPENDABLE else None


def _definition(table: Any) -> str:
    """What of a catalog table's definition decides how its files are read: its columns,
    format and storage (location, options); not its statistics or times. (A table
    partitioned anew has its files in directories, which Spark lists.)"""
    return "\n".join((table.schema().json(), table.provider().toString(), table.storage().toString()))


def _files_in(directory: str) -> list[list[Any]] | None:
    """The files of a local directory as Spark lists a table's (names starting with ``_``
    or ``.``, and files being copied, left out; a listing as :func:`_file_stat` gives),
    sorted; None when it is not local or holds a directory (Spark decides then)."""
    local = local_directory(directory) if directory.startswith("file:") else None
    if local is None:
        return None
    try:
        entries = list(os.scandir(local))
    except OSError:
        return None
    files = []
    for entry in entries:
        if entry.name.startswith(("_", ".")) or entry.name.endswith("._COPYING_"):
            continue
        if not entry.is_file(follow_symlinks=False):
            return None
        st = entry.stat()
        files.append([f"{directory}/{entry.name}", st.st_size, st.st_mtime_ns])
    return sorted(files)


