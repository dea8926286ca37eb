"""Kafka offset ranges read by Spark executors (PySpark's Python Data Source API).

The driver fixes each partition's [start, end) for a tick; every range (split in chunks
so one busy partition still spreads over several tasks) is one Spark task that reads and
decodes its records into Arrow record batches (:mod:`.columnar`). A row is a change of the
source (its columns, then ``_w``) or a dead letter (``_reason`` set), tagged with the
record's partition and offset.

    frame = kafka_frame(spark, settings, source, {0: (0, 100), 1: (40, 90)})

A small tick's ranges are read in the driver instead (:func:`driver_table`): the same
rows, with no Spark job.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from ..circuit.operators import WEIGHT
from ..runtime.spark import zsets
from ..process import map_all
from .columnar import ChunkDecoder
from .formats import Registry
from .kafka import KafkaSettings, KafkaSource, Ranges, is_secret, read_chunks

NAME = "dbt_stream_kafka"
#: most offsets one task reads
CHUNK = 200_000
#: columns after the source's own
TAGS = [StructField(WEIGHT, LongType(), False), StructField("_partition", IntegerType(), False),
        StructField("_offset", LongType(), False), StructField("_raw", BinaryType(), True),
        StructField("_reason", StringType(), True)]
# option names Spark's redaction (spark.redaction.regex) hides in plans and the UI
_SECRET_OPTION = "kafka.secret."
_REGISTRY = "registry.url"
_REGISTRY_SECRET = "registry.secret.user_info"


def row_schema(source: KafkaSource) -> StructType:
    return StructType(list(source.columns.fields) + TAGS)


def kafka_frame(spark: SparkSession, settings: KafkaSettings, source: KafkaSource, ranges: Ranges,
                most: Mapping[int, int] | None = None) -> DataFrame:
    """The records in ``ranges``, read and decoded by executors; ``most``: at most this many
    records of each partition (then one task reads the partition)."""
    if NAME not in _registered:
        spark.dataSource.register(KafkaRangeSource)
        _registered.add(NAME)
    options = {"source": json.dumps(source.to_json()), "ranges": json.dumps({str(p): r for p, r in ranges.items()})}
    if most is not None:
        options["most"] = json.dumps({str(p): n for p, n in most.items()})
    for k, v in settings.config.items():
        options[(_SECRET_OPTION if is_secret(k) else "kafka.") + k] = v
    if settings.registry is not None:
        options[_REGISTRY] = settings.registry.url
        if settings.registry.user_info:
            options[_REGISTRY_SECRET] = settings.registry.user_info
    return spark.read.format(NAME).schema(row_schema(source)).options(**options).load()


_registered: set[str] = set()


@dataclass(frozen=True)
class _Range(InputPartition):
    partition: int
    start: int
    end: int
    most: int | None = None  # records


class KafkaRangeSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(dict(self.options))


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        self.source = KafkaSource.from_json(json.loads(options["source"]))
        self.ranges = {int(p): tuple(r) for p, r in json.loads(options["ranges"]).items()}
        self.most = {int(p): n for p, n in json.loads(options["most"]).items()} if "most" in options else None
        config = {}
        for k, v in options.items():
            for prefix in (_SECRET_OPTION, "kafka."):
                if k.startswith(prefix):
                    config[k[len(prefix):]] = v
                    break
        registry = Registry(options[_REGISTRY], options.get(_REGISTRY_SECRET)) if _REGISTRY in options else None
        self.settings = KafkaSettings(config, registry)

    def partitions(self) -> list[InputPartition]:
        if self.most is not None:
            return [_Range(p, start, end, self.most[p]) for p, (start, end) in sorted(self.ranges.items())
                    if self.most[p]] or [_Range(0, 0, 0)]
        return [_Range(p, s, min(s + CHUNK, end)) for p, (start, end) in sorted(self.ranges.items())
                for s in range(start, end, CHUNK)] or [_Range(0, 0, 0)]

    def read(self, partition: Any) -> Iterator[Any]:
        decoder = chunk_decoder(self.settings, self.source)
        for chunk in read_chunks(self.settings, self.source.topic, partition.partition, partition.start, partition.end,
                                 most=partition.most):
            yield from decoder(chunk).to_batches()


def chunk_decoder(settings: KafkaSettings, source: KafkaSource) -> ChunkDecoder:
    return ChunkDecoder(source, source.decoder(settings.registry), row_schema(source))


def driver_table(settings: KafkaSettings, source: KafkaSource, ranges: Ranges, most: Mapping[int, int] | None = None,
                 records: Mapping[int, list[Any]] | None = None) -> tuple[pa.Table, Ranges]:
    """The records in ``ranges`` read and decoded in the driver (for a small tick, whose
    read as a Spark job costs more than the records do), and the ranges read: with
    ``most``, each partition's ends after its last record read. ``records``: those of
    ``ranges``, fetched already (:meth:`.KafkaTopics.fetch`)."""
    decoder = chunk_decoder(settings, source)
    if records is not None:
        return _concat(source, [decoder(records[p]) for p in sorted(records) if records[p]]), dict(ranges)

    def read(p: int) -> tuple[list[pa.Table], int]:
        start, end = ranges[p]
        reached: dict[int, int] = {}
        tables = [decoder(chunk) for chunk in read_chunks(settings, source.topic, p, start, end,
                                                          most=None if most is None else most[p], reached=reached)]
        return tables, reached[p]

    busy = sorted(p for p, (start, end) in ranges.items() if end > start and (most is None or most[p]))
    # a thread per partition: the client fetches (without the GIL) while another decodes
    read_ = dict(zip(busy, map_all("kafka", read, busy)))
    return _concat(source, [t for p in busy for t in read_[p][0]]), {
        p: (start, read_[p][1] if p in read_ else (start if most is not None else end))
        for p, (start, end) in ranges.items()}


def _concat(source: KafkaSource, tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if tables else pa.Table.from_batches([], zsets.arrow_schema(row_schema(source)))


def stops(frame: DataFrame, ranges: Ranges, most: Mapping[int, int]) -> Ranges:
    """The ranges a read with ``most`` records per partition covered: a partition that gave
    its ``most`` ends after its last record, one that gave fewer where its range ended."""
    got = {r[0]: (r[1], r[2]) for r in frame.groupBy("_partition").agg(F.countDistinct("_offset"), F.max("_offset"))
           .collect()}
    out = {}
    for p, (start, end) in ranges.items():
        n, last = got.get(p, (0, None))
        out[p] = (start, last + 1 if most[p] and n >= most[p] else (end if most[p] else start))
    return out
