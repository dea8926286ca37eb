"""A class-data sharing (CDS) archive of the classes a Spark JVM of the tests loads.

Every test process, and every `dbt` and `dbt-stream serve` process a functional test
starts, launches a Spark driver JVM, which loads and verifies some 15,000 classes from
Spark's jars before it runs anything: ~10 s of a quiet 2-core machine for a session and
its first queries. Mapped from an archive (JDK 13+ dynamic CDS: ``-XX:SharedArchiveFile``)
the same takes about half (measured: session 9.8 → 5.8 s, first queries 7.5 → 3.4 s).

The archive is made once, by a JVM that runs what the tests' JVMs run (a Hive catalog, SQL,
Parquet, a shuffle, Arrow to and from Python) and dumps its classes at exit. It is kept
beside the test environment's Python (``sys.prefix``), named by what it depends on (the
Java runtime, the jars, the JVM options), so a changed environment makes a new one. A JVM
whose classpath does not match the archive runs as it would without it (its warning
silenced). Semantics do not change: the classes are the same bytes, verified when dumped.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: the options every test JVM is started with (see tests/conftest.py)
OPTIONS = "-XX:TieredStopAtLevel=1"
#: a mismatched or unreadable archive is used as no archive, without a line on stderr
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

_EXERCISE = r"""
import sys
from pyspark import SparkContext
from pyspark.sql import functions as F
from dbt_incremental_stream.runtime.spark.session import session

spark = session("local[2]", {"spark.sql.shuffle.partitions": "1", "spark.sql.codegen.wholeStage": "false",
                             "spark.sql.warehouse.dir": sys.argv[1] + "/warehouse"}, hive=True)
spark.sql("CREATE TABLE t (id INT, v DECIMAL(10,2), s STRING) USING parquet")
spark.sql("INSERT INTO t VALUES (1, 1.50, 'a'), (2, 2.25, 'b')")
spark.sql("CREATE VIEW w AS SELECT s, SUM(v) AS total, COUNT(*) AS n FROM t GROUP BY s")
spark.table("w").join(spark.table("t"), "s").collect()
df = spark.createDataFrame([(i, float(i), str(i)) for i in range(100)], "id INT, d DOUBLE, s STRING")
df.mapInArrow(lambda batches: batches, df.schema).repartition(2, "s").groupBy("s").agg(F.max("d")).toArrow()
df.write.parquet(sys.argv[1] + "/p")
spark.read.parquet(sys.argv[1] + "/p").where("id > 3").orderBy("d").limit(3).collect()
jvm = SparkContext._gateway.proc
spark.stop()
jvm.stdin.close()  # the JVM exits at the end of its input, and dumps its classes on the way out
jvm.wait(timeout=300)
"""


def _java_version() -> str:
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    return out.stderr + out.stdout


def archive_options() -> str:
    """JVM options that map the archive (made first if there is none): ``OPTIONS`` alone
    when no archive can be made (no JDK 13+, a read-only environment)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    key = hashlib.sha256("\n".join([_java_version(), OPTIONS, *sorted(p.name for p in jars.glob("*.jar"))])
                         .encode()).hexdigest()[:16]
    archive = Path(sys.prefix) / f"spark-classes-{key}.jsa"
    if not archive.exists():
        dumping = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
        try:
            with tempfile.TemporaryDirectory() as work:
                env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{OPTIONS} -XX:ArchiveClassesAtExit={dumping} {QUIET}"}
                subprocess.run([sys.executable, "-c", _EXERCISE, work], cwd=work, env=env, timeout=600,
                               capture_output=True, check=True)
            os.replace(dumping, archive)  # whole or not at all, for a run beside this one
        except (OSError, subprocess.SubprocessError):
            dumping.unlink(missing_ok=True)
            return OPTIONS
    return f"{OPTIONS} -XX:SharedArchiveFile={archive} {QUIET}"
