"""The process's SparkSession as the engine starts it."""
from __future__ import annotations

import signal

from pyspark.sql.types import (ArrayType, DecimalType, IntegerType, LongType, MapType, StringType, StructField,
                               StructType)

from dbt_incremental_stream.runtime.spark.session import empty_frame


def test_spark_leaves_ctrl_c_to_its_host(spark):
    """PySpark's context takes SIGINT when it starts (to cancel every job and raise
    KeyboardInterrupt: a tick in flight would fail); the session is handed back without it,
    so dbt stops after the current model and serve after the current tick."""
    handler = signal.getsignal(signal.SIGINT)
    assert "SparkContext" not in getattr(handler, "__qualname__", ""), handler


def test_an_empty_frame_has_exactly_its_schema(spark):
    schema = StructType([StructField("id", LongType(), False), StructField("amount", DecimalType(38, 18), True),
                         StructField("tags", ArrayType(StringType(), False), True),
                         StructField("m", MapType(StringType(), IntegerType(), True), False)])
    for _ in range(2):  # the second from the session's kept types
        df = empty_frame(spark, schema)
        assert df.schema == schema and df.count() == 0
    assert empty_frame(spark, schema).join(empty_frame(spark, schema), "id").count() == 0  # each its own relation
