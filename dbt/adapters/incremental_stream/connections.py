"""Profile keys and the connection: dbt-spark's ``session`` method, with the SparkSession
started by the engine (master, conf) before dbt-spark asks for it, and bound values (a
seed's rows) written as exact Spark SQL literals (:class:`SessionHandle`)."""
from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Tuple

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions import FailedToConnectError
from dbt.adapters.spark.connections import SparkConnectionManager, SparkConnectionMethod, SparkCredentials
from dbt.adapters.spark.session import SessionConnectionWrapper
from dbt_common.exceptions import DbtRuntimeError
from pyspark import SparkContext

from dbt_incremental_stream.connectors.kafka import KafkaSettings
from dbt_incremental_stream.errors import StreamError
from dbt_incremental_stream.process import leave_signals_to_main, on_kept_thread
from dbt_incremental_stream.runtime.spark.session import session

logger = AdapterLogger("incremental_stream")

MASTERS = ("local[", "spark://", "yarn", "k8s://", "mesos://")
#: set while this process's SPARK_REMOTE points at a running dbt-stream serve
REMOTE_BY_US = "DBT_INCREMENTAL_STREAM_REMOTE"


class SessionHandle(SessionConnectionWrapper):
    """dbt-spark's session connection, its bound values as exact Spark SQL literals: it
    quoted a string without escaping it (a seed value ``O'Brien`` broke the statement), and
    wrote NULL as the string ``'None'``, numbers through a float (a BIGINT past 2^53 lost
    digits) and timestamps to the millisecond."""

    @classmethod
    def _fix_binding(cls, value: Any) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, (int, Decimal)):
            return format(value, "f") if isinstance(value, Decimal) else str(value)
        if isinstance(value, float):
            return repr(value) if value == value and abs(value) != float("inf") else f"double('{value}')"
        if isinstance(value, dt.datetime):
            value = value.strftime("%Y-%m-%d %H:%M:%S.%f")
        text = str(value).replace("\\", "\\\\").replace("'", "\\'")
        return f"'{text}'"


@dataclass
class IncrementalStreamCredentials(SparkCredentials):
    """The profile keys. The docs' reference table is generated from these fields: each
    ``#:`` comment is its key's entry there."""

    #: `session`, the only method: Spark runs inside the dbt process. It may be left out.
    method: SparkConnectionMethod = SparkConnectionMethod.SESSION  # type: ignore[assignment]
    #: Not used: Spark runs in-process. dbt-spark requires a value, so it has one.
    host: Optional[str] = "embedded"
    #: The Spark master URL. `local[*]` runs Spark inside dbt. `spark://host:7077`, `yarn`
    #: or `k8s://https://host:port` runs it on a cluster.
    master: str = "local[*]"
    #: Extra Spark settings, such as a Hive metastore, the warehouse directory or executor
    #: sizes. They override the engine's tick settings and dbt-spark's own, such as ANSI
    #: mode off.
    spark_conf: Dict[str, str] = field(default_factory=dict)
    #: Where streaming state lives. A relative path is relative to the dbt project. On a
    #: cluster, give a location every executor reaches, such as `hdfs://` or `s3a://`.
    state_location: str = "stream_state"
    #: `bootstrap_servers` plus any librdkafka setting, such as `security.protocol`,
    #: `sasl.*` or `ssl.*`, and a `schema_registry` block (`url`, `basic.auth.user.info`)
    #: for Avro. Secrets are never printed or logged. Only needed when models read or
    #: write Kafka.
    kafka: Dict[str, Any] = field(default_factory=dict)
    #: At most this many Kafka records per source per tick, split equally over its
    #: partitions. A `dbt run` then takes several ticks. Unset: no cap.
    max_records_per_tick: Optional[int] = None
    #: The URL of a running `dbt-stream serve` to work through. Without it, dbt finds serve
    #: by the `_serve.json` file in a local state location.
    serve_url: Optional[str] = None

    def __post_init__(self) -> None:
        if self.method != SparkConnectionMethod.SESSION:
            raise DbtRuntimeError(
                f"incremental_stream runs Spark in-process: `method` must be `session` (or left out), "
                f"not `{self.method}`")
        super().__post_init__()
        if self.master != "local" and not self.master.startswith(MASTERS):
            raise DbtRuntimeError(
                f"`master: {self.master}` is not a Spark master URL: use local[*] (the default), "
                "spark://host:port, yarn or k8s://https://host:port")
        if not self.state_location:
            raise DbtRuntimeError("`state_location` may not be empty: it is where streaming state is kept")
        if self.max_records_per_tick is not None and self.max_records_per_tick <= 0:
            raise DbtRuntimeError("`max_records_per_tick` must be a positive number of records")
        try:
            self.kafka_settings  # noqa: B018  (validates the block)
        except StreamError as e:
            raise DbtRuntimeError(f"profile `kafka:` block: {e}") from e
        # YAML's true is Python's True; Spark writes it true
        self.spark_conf = {str(k): str(v).lower() if isinstance(v, bool) else str(v)
                           for k, v in self.spark_conf.items()}
        # dbt-spark sets these on the session at every statement (ANSI mode off among them):
        # a setting the profile gives wins
        self.server_side_parameters = {**self.server_side_parameters, **self.spark_conf}

    def state_path(self, project_root: str | Path) -> str:
        """The state location; a relative path is relative to the dbt project (the JVM does
        not follow the Python process's working directory)."""
        if "://" in self.state_location or os.path.isabs(self.state_location):
            return self.state_location
        return os.path.join(str(project_root), self.state_location)

    @property
    def kafka_settings(self) -> KafkaSettings | None:
        return KafkaSettings.from_profile(self.kafka) if self.kafka else None

    @property
    def type(self) -> str:
        return "incremental_stream"

    @property
    def unique_field(self) -> str:
        return self.master

    def _connection_keys(self) -> Tuple[str, ...]:
        # what `dbt debug` prints: never the kafka block (it may hold SASL/SSL secrets)
        return "master", "schema", "state_location", "max_records_per_tick"

    def connection_info(self, *, with_aliases: bool = False) -> Iterable[Tuple[str, Any]]:
        """What `dbt debug` prints, and the Kafka servers (not the rest of the block)."""
        yield from super().connection_info(with_aliases=with_aliases)
        if self.kafka_settings is not None:
            yield "kafka_bootstrap_servers", self.kafka_settings.bootstrap_servers


class IncrementalStreamConnectionManager(SparkConnectionManager):
    TYPE = "incremental_stream"

    def set_connection_name(self, name: str | None = None) -> Connection:
        # dbt names a connection on each thread as a model starts on it: from then on that
        # thread leaves Ctrl-C to dbt's main thread, which waits for the models and stops
        # the run (the model's thread starts Spark, Kafka readers and the engine's threads)
        leave_signals_to_main()
        return super().set_connection_name(name)

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        creds: IncrementalStreamCredentials = connection.credentials  # type: ignore[assignment]
        if not os.environ.get(REMOTE_BY_US):  # else a running dbt-stream serve's Spark (see impl.use_running_serve)
            starting = SparkContext._active_spark_context is None
            if starting:  # the first statement waits for it: say why (30 s and more on a busy machine)
                logger.info(f"Starting Spark ({creds.master}) ...")
                started = time.monotonic()
            try:  # each setting is a Py4J call: on the engine's kept thread, not a new connection per dbt thread
                on_kept_thread(session, creds.master, creds.server_side_parameters, hive=True)
                if starting:
                    logger.info(f"Spark started in {time.monotonic() - started:.0f}s")
            except Exception as e:  # Spark raises several types when the master is unreachable
                raise FailedToConnectError(f"could not start Spark with master {creds.master}: {e}") from e
        connection = super().open(connection)
        if isinstance(connection.handle, SessionConnectionWrapper):
            connection.handle = SessionHandle(connection.handle.handle)
        return connection
