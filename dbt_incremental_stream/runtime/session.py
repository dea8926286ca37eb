"""A SparkSession tuned for ticks: many small jobs, where per-stage overhead dominates."""
from __future__ import annotations

import os
import sys
from typing import Mapping

from pyspark.sql import SparkSession

#: defaults for the embedded local session; a profile's spark_conf overrides them
TICK_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    # adaptive execution re-plans after every shuffle: a win for big batch queries, but it
    # doubles the latency of the small multi-shuffle jobs a tick is made of
    "spark.sql.adaptive.enabled": "false",
    # compiling fused code for each new plan shape costs more than it saves on small deltas
    "spark.sql.codegen.wholeStage": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # tasks commit their files directly: a tick's atomicity comes from its manifest
    "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "2",
    # recording the Python call site of every DataFrame call costs several JVM round trips
    # each; a tick builds hundreds of them
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def session(master: str = "local[2]", conf: Mapping[str, str] | None = None,
            app_name: str = "dbt-incremental-stream", *, hive: bool = False) -> SparkSession:
    """Get or create the process's SparkSession with :data:`TICK_CONF` under ``conf``.

    ``hive``: a persistent catalog, as dbt-spark's session method has it (by default a
    Derby metastore in ``metastore_db/`` and tables in ``spark-warehouse/``, both in the
    working directory; ``spark_conf`` can point Spark at any Hive metastore instead).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    if hive:
        builder = builder.enableHiveSupport()
    for key, value in {**TICK_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
