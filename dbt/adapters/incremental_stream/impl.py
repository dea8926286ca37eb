"""The adapter: dbt-spark's, plus the methods the streaming materializations call."""
from __future__ import annotations

import os
import threading
from importlib import import_module
from typing import Any, Callable, TypeVar

from dbt.adapters.base.meta import available
from dbt.adapters.base.relation import AdapterTrackingRelationInfo, BaseRelation
from dbt.adapters.contracts.relation import RelationConfig

from dbt.adapters.spark.impl import SparkAdapter
from dbt_common.exceptions import DbtRuntimeError
from pyspark.sql import SparkSession

from dbt.adapters.incremental_stream.connections import (
    IncrementalStreamConnectionManager,
    IncrementalStreamCredentials,
    REMOTE_BY_US,
    logger,
)
from dbt_incremental_stream import catalog
from dbt_incremental_stream.connectors.kafka import KafkaSource
from dbt_incremental_stream.connectors.sinks import KafkaSink
from dbt_incremental_stream.errors import CompileError, StreamError
from dbt_incremental_stream.process import on_kept_thread
from dbt_incremental_stream.project import KINDS, Model, Project
from dbt_incremental_stream.server import ServeClient


T = TypeVar("T")


def relation_name(relation: BaseRelation) -> str:
    """``schema.identifier`` as the engine and compiled SQL name it (Spark has no database)."""
    return ".".join(p for p in (relation.schema, relation.identifier) if p).lower()


def in_files(error: CompileError, sql: str, path: str | None = None, raw: str | None = None,
             compiled: str | None = None) -> CompileError:
    """An error in a model's compiled SQL placed where its user can open it: the model's
    own file when Jinja kept the lines (the column too where that line is unchanged), else
    the compiled file (a macro expanded to lines of its own, or ephemeral models came first)."""
    if error.line is None or not path:
        return error
    lines, written = sql.splitlines(), (raw or "").splitlines()
    if len(written) == len(lines) and 0 < error.line <= len(lines):
        same = written[error.line - 1] == lines[error.line - 1]
        return error.at(path, error.col if same else None)
    return error.at(f"{compiled or 'the compiled SQL'}, compiled from {path}", error.col)


def use_running_serve(creds: IncrementalStreamCredentials, project_root: Any) -> ServeClient | None:
    """A ``dbt-stream serve`` running on this project's state: then this dbt invocation runs
    its SQL through serve's Spark Connect endpoint (serve owns the catalog) and hands it the
    streaming models to deploy."""
    serve = ServeClient.find(creds.state_path(project_root), creds.serve_url)
    if serve is None:
        if os.environ.pop(REMOTE_BY_US, None):
            os.environ.pop("SPARK_REMOTE", None)
        return None
    if not serve.status.get("connect"):
        raise DbtRuntimeError(f"dbt-stream serve is running on this project ({serve.url}) without a Spark Connect "
                              "endpoint: stop it, or restart it without `--connect-port -1`")
    logger.info(f"dbt-stream serve is running at {serve.url}: using its Spark at {serve.status['connect']}")
    os.environ["SPARK_REMOTE"] = serve.status["connect"]  # what PySpark (and dbt-spark's cursor) connects to
    os.environ[REMOTE_BY_US] = "1"
    return serve


class IncrementalStreamAdapter(SparkAdapter):
    ConnectionManager = IncrementalStreamConnectionManager

    def __init__(self, config: Any, mp_context: Any) -> None:
        super().__init__(config, mp_context)
        self._project: Project | None = None
        self._pruned = False
        self._project_lock = threading.Lock()
        root = getattr(config, "project_root", None)  # `dbt debug` passes a profile without a project
        self._serve = use_running_serve(self._credentials, root) if root else None

    @classmethod
    def type(cls) -> str:
        return "incremental_stream"

    @classmethod
    def get_adapter_run_info(cls, config: RelationConfig) -> AdapterTrackingRelationInfo:
        """dbt derives the plugin module from the class name, which here has an underscore."""
        return AdapterTrackingRelationInfo(
            adapter_name=cls.type(),
            base_adapter_version=import_module("dbt.adapters.__about__").version,
            adapter_version=import_module("dbt.adapters.incremental_stream.__version__").version,
            model_adapter_details=cls._get_adapter_specific_run_info(config),
        )

    @property
    def _credentials(self) -> IncrementalStreamCredentials:
        return self.config.credentials  # type: ignore[return-value]

    def project(self) -> Project:
        """The project's streaming state, once per dbt invocation: the one an earlier
        invocation of this process set down, if still current (:meth:`Project.take_up`)."""
        with self._project_lock:
            if self._project is None:
                spark = self._session()
                assert spark is not None, "streaming models run in this process only without a dbt-stream serve"
                creds = self._credentials
                self._project = Project.take_up(spark, self.state_location(), kafka=creds.kafka_settings,
                                                max_records=creds.max_records_per_tick)
            return self._project

    def environment(self) -> ServeClient | Project:
        """Where streaming models run, chosen once per invocation (when the adapter starts): a
        ``dbt-stream serve`` running on the project's state, else this process."""
        return self._serve if self._serve is not None else self.project()

    def state_location(self) -> str:
        return self._credentials.state_path(self.config.project_root)

    @available
    def stream_deploy(self, relation: BaseRelation, sql: str, kind: str, full_refresh: bool,
                      streaming_models: list[str], streams: list[dict[str, Any]],
                      sink: dict[str, Any] | None = None, files: dict[str, str | None] | None = None
                      ) -> dict[str, Any]:
        """Deploy one streaming model and bring the whole project up to date: compile it into
        the circuit (building its state from retained input if it is new or its SQL changed),
        read every source's changes, commit one tick for all models and publish them.
        ``files``: the model's ``path`` and ``raw`` code and its ``compiled`` path, where an
        error in its SQL is placed."""
        if kind not in KINDS:
            raise DbtRuntimeError(f"unknown streaming materialization {kind!r}")
        name = relation_name(relation)
        keep = None if self._pruned else set(streaming_models)  # models no longer streaming leave the state
        try:
            model = Model(name, sql, kind, KafkaSink.from_config(sink))
            sources = [KafkaSource.from_config(s["relation"], self._with_schema_file(s["kafka"]), s["columns"])
                       for s in streams if s["relation"] in model.reads]
            result = on_kept_thread(self.environment().run_model, model, sources, full_refresh=full_refresh, keep=keep)
        except CompileError as e:
            placed = in_files(e, sql, **files) if files and e.view == name else e
            raise DbtRuntimeError(f"streaming model {name}: {placed}") from e
        except StreamError as e:
            raise DbtRuntimeError(f"streaming model {name}: {e}") from e
        self._pruned = True
        for report in result.pop("ticks", []):  # where each tick's time went, in dbt's debug log
            why = f" ({report['why']})" if report["why"] else ""
            split = ", ".join(f"{part} {seconds:.2f}" for part, seconds in report["split"].items())
            logger.debug(f"streaming model {name}: tick {report['tick']} in {report['seconds']:.2f}s "
                         f"on {report['path']}{why} ({split})")
        return result

    def _with_schema_file(self, kafka: dict[str, Any]) -> dict[str, Any]:
        """A source's Avro ``schema_file`` (relative to the dbt project) read into its config."""
        if not kafka.get("schema_file"):
            return kafka
        path = os.path.join(str(self.config.project_root), str(kafka["schema_file"]))
        try:
            with open(path) as f:
                return {**kafka, "avro_schema": f.read()}
        except OSError as e:
            raise StreamError(f"Avro schema_file {kafka['schema_file']!r}: {e.strerror}") from e

    def _session(self) -> SparkSession | None:
        """This process's SparkSession (started if need be), or None when the SQL runs
        elsewhere (a running dbt-stream serve's Spark Connect endpoint)."""
        return self._in_catalog(lambda spark: spark)

    def _in_catalog(self, read: Callable[..., T | None], *args: Any) -> T | None:
        """``read(spark, *args)`` of this process's session, on the engine's kept thread
        (dbt's thread makes no Py4J call: see :func:`~dbt_incremental_stream.process.
        on_kept_thread`); None where the SQL runs elsewhere (a running dbt-stream serve)."""
        if self._serve is not None:
            return None
        self.connections.get_thread_connection().handle  # noqa: B018  (opening it starts Spark)
        return on_kept_thread(lambda: read(SparkSession.builder.getOrCreate(), *args))

    def list_schemas(self, database: str) -> list[str]:
        """From the session catalog (:func:`~dbt_incremental_stream.catalog.schemas`)."""
        names = self._in_catalog(catalog.schemas)
        return super().list_schemas(database) if names is None else names

    def check_schema_exists(self, database: str, schema: str) -> bool:
        exists = self._in_catalog(catalog.schema_exists, schema)
        return super().check_schema_exists(database, schema) if exists is None else exists

    def list_relations_without_caching(self, schema_relation: BaseRelation) -> list[BaseRelation]:
        """From the session catalog (:func:`~dbt_incremental_stream.catalog.relations`),
        described as dbt-spark's `SHOW TABLE EXTENDED` describes them; without session
        temporary views either way (`SHOW TABLE EXTENDED` lists them in every schema, with no
        schema, and an in-process session keeps dbt's `__dbt_tmp` views around)."""
        found = self._in_catalog(catalog.relations, schema_relation.schema)
        if found is None:
            return [r for r in super().list_relations_without_caching(schema_relation) if r.schema]
        rows = [(schema, name, False, information) for schema, name, information in found]
        return self._build_spark_relation_list(rows, self._get_relation_information)  # type: ignore[arg-type]

    def debug_query(self) -> None:
        """`dbt debug`: Spark answers a query, and Kafka (when configured) is reachable."""
        super().debug_query()
        kafka = self._credentials.kafka_settings
        if kafka is not None:
            try:
                kafka.check()
            except StreamError as e:
                raise DbtRuntimeError(str(e)) from e

    def cleanup_connections(self) -> None:
        with self._project_lock:
            if self._project is not None:
                self._project.set_down()
                self._project, self._pruned = None, False
        super().cleanup_connections()
