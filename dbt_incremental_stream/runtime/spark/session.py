"""A SparkSession tuned for ticks: many small jobs, where per-stage overhead dominates."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import weakref
from pathlib import Path
from typing import Any, Mapping

from pyspark import SparkConf, SparkContext
from pyspark.logger import PySparkLogger
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

#: defaults for the embedded local session; a profile's spark_conf overrides them
TICK_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    # adaptive execution re-plans after every shuffle: a win for big batch queries, but it
    # doubles the latency of the small multi-shuffle jobs a tick is made of
    "spark.sql.adaptive.enabled": "false",
    # compiling fused code for each new plan shape costs more than it saves on small deltas
    "spark.sql.codegen.wholeStage": "false",
    "spark.ui.enabled": "false",
    # Spark's status store keeps its last 1,000 jobs, stages and SQL executions (each with
    # its plan's text, tens of KB for a tick's plans) even without the UI: ~35 MiB of heap
    # that a process ticking for weeks fills in its first thousand ticks (bench/soak.py).
    # A tick runs a few jobs; the last hundred are what anyone reads.
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # tasks commit their files directly: a tick's atomicity comes from its manifest
    "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "2",
    # recording the Python call site of every DataFrame call costs several JVM round trips
    # each; a tick builds hundreds of them
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Python workers: Spark's defaults, pinned against a spark-defaults.conf that differs.
    # A new worker costs ~0.6 s of CPU before it runs anything: on Python 3.11 it re-reads
    # pyspark.zip's directory once per cached zip importer, compiles PySpark's worker
    # modules from that zip (no .pyc in it) and imports pyarrow. bench/worker_floor.py,
    # trivial mapInArrow job on 2 busy cores: p50 0.10-0.18 s on reused workers, 1.3 s
    # forking one per task (reuse off), 2.4 s launching one per task (no daemon). Spark
    # still closes all idle workers after 60-70 s without a Python task (a constant, no
    # setting): the first Python job after such a pause pays the fork again (1.05 s).
    "spark.python.use.daemon": "true",
    "spark.python.worker.reuse": "true",
}


#: share of physical memory given to the heap of a local session's JVM, and its bounds
LOCAL_HEAP_FRACTION = 0.25
LOCAL_HEAP_MIN = 1 << 30  # Spark's own default: never size below it
LOCAL_HEAP_MAX = 16 << 30  # past this, Python workers and the OS page cache need it more


def local_driver_memory(master: str, conf: Mapping[str, str] | None = None) -> str | None:
    """``spark.driver.memory`` for a local session: a share of physical memory.

    In local mode the driver JVM is the executor too, so Spark's 1 GiB default heap is all
    the memory a tick's joins, aggregates and cached state get, whatever the machine has.
    The other 3/4 stay for the Python driver, its Arrow kernels, the Python workers and
    the page cache. None (Spark decides) when the master is not local, when ``conf`` or
    ``SPARK_DRIVER_MEMORY`` sets the heap, when a JVM already runs in this process (its
    heap is fixed), or when the share is below Spark's default.
    """
    if not (master == "local" or master.startswith("local[")):
        return None
    if "spark.driver.memory" in (conf or {}) or os.environ.get("SPARK_DRIVER_MEMORY"):
        return None
    if SparkContext._gateway is not None:
        return None
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        return None
    heap = min(int(physical * LOCAL_HEAP_FRACTION), LOCAL_HEAP_MAX)
    return f"{heap >> 20}m" if heap >= LOCAL_HEAP_MIN else None


def _launch_apart(settings: Mapping[str, str]) -> None:
    """Start Spark's JVM in a session of its own (POSIX), as PySpark would start it.

    A signal to this process's group (``docker stop``, systemd's ``KillMode=control-group``,
    Ctrl-C in a terminal) then reaches only Python, which finishes and commits the tick in
    flight and stops; the JVM still exits with this process (it stops when its stdin, a
    pipe from here, closes)."""
    if SparkContext._gateway is not None or os.name != "posix" or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False)
    for key, value in {**settings, **_quiet_driver(settings)}.items():
        conf.set(key, value)
    SparkContext._gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
    SparkContext._jvm = SparkContext._gateway.jvm


def session(master: str = "local[2]", conf: Mapping[str, str] | None = None,
            app_name: str = "dbt-incremental-stream", *, hive: bool = False) -> SparkSession:
    """Get or create the process's SparkSession with :data:`TICK_CONF` under ``conf``.

    ``hive``: a persistent catalog, as dbt-spark's session method has it (by default a
    Derby metastore in ``metastore_db/`` and tables in ``spark-warehouse/``, both in the
    working directory; ``spark_conf`` can point Spark at any Hive metastore instead).
    A local session's heap is sized from the machine (:func:`local_driver_memory`) unless
    ``conf`` sets ``spark.driver.memory``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    if hive:
        builder = builder.enableHiveSupport()
    memory = local_driver_memory(master, conf)
    sized = {"spark.driver.memory": memory} if memory else {}
    settings = {**TICK_CONF, **sized, **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    _launch_apart({"spark.master": master, "spark.app.name": app_name, **settings})
    main = threading.current_thread() is threading.main_thread()
    interrupt = signal.getsignal(signal.SIGINT) if main else None
    spark = builder.getOrCreate()
    if main and interrupt is not None and signal.getsignal(signal.SIGINT) is not interrupt:
        # PySpark's context takes Ctrl-C to cancel every job and raise KeyboardInterrupt
        # (a tick in flight would fail); its host decides: dbt stops after the current
        # model, serve after the current tick
        signal.signal(signal.SIGINT, interrupt)
    level = _log_level()
    spark.sparkContext.setLogLevel(level)
    if level == "ERROR":
        # PySpark logs each error it converts that has a query context (with the JVM's stack
        # trace, as one JSON line on stderr) even when the caller handles it; the engine
        # reports the errors it does not handle itself
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    return spark


#: Spark's log level (default ERROR: what dbt and serve print is theirs)
LOG_LEVEL = "DBT_STREAM_SPARK_LOG_LEVEL"


def _log_level() -> str:
    return os.environ.get(LOG_LEVEL, "ERROR").upper()


def _quiet_driver(settings: Mapping[str, str]) -> dict[str, str]:
    """The driver JVM's options with the engine's log4j2 configuration (errors only), so
    that Spark's start-up lines and WARNs do not reach the terminal; none when the level
    is asked for (:data:`LOG_LEVEL`) or the settings choose a configuration."""
    options = settings.get("spark.driver.extraJavaOptions", "")
    if _log_level() != "ERROR" or "log4j2.configurationFile" in options:
        return {}
    path = Path(__file__).with_name("log4j2.properties")
    return {"spark.driver.extraJavaOptions": f"{options} -Dlog4j2.configurationFile={path.as_uri()}".strip()}


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """A DataFrame of no rows and exactly ``schema`` (nullability too), as a local relation:
    ``createDataFrame([], schema)`` goes through a Python RDD (a pickled function shipped to
    the JVM, about 30 ms), and typing a new view's operators makes one per node. The JVM's
    empty list and parsed types are kept per session (each a round trip to make)."""
    known = _EMPTY.get(spark)
    if known is None:
        assert spark._jvm is not None
        known = _EMPTY[spark] = (spark._jvm.java.util.ArrayList(), {})
    rows, types = known
    text = schema.json()
    parsed = types.get(text)
    if parsed is None:
        if len(types) >= 4096:
            types.clear()
        parsed = types[text] = spark._jsparkSession.parseDataType(text)
    return DataFrame(spark._jsparkSession.createDataFrame(rows, parsed), spark)


#: per session: an empty java.util.List, and JVM types by their JSON
_EMPTY: weakref.WeakKeyDictionary[SparkSession, tuple[Any, dict[str, Any]]] = weakref.WeakKeyDictionary()


def share_functions(spark: SparkSession, session: SparkSession) -> list[str]:
    """Registers in ``session`` the functions the user registered in ``spark``: Python
    and pandas UDFs, Scala UDFs and SQL functions (``CREATE TEMPORARY FUNCTION``). A
    session of ``spark.newSession()`` does not see them. Returns their names. One JVM
    call lists them (Spark's built-ins are not copied); each found is a few more."""
    registry = spark._jsparkSession.sessionState().functionRegistry()
    target = session._jsparkSession.sessionState().functionRegistry()
    jvm = spark._jvm
    assert jvm is not None
    builtin = jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin()
    names = []
    for ident in jvm.scala.jdk.javaapi.CollectionConverters.asJava(
            registry.listFunction().diff(builtin.listFunction())):
        target.registerFunction(ident, registry.lookupFunction(ident).get(),
                                registry.lookupFunctionBuilder(ident).get())
        names.append(str(ident.funcName()))
    return names
