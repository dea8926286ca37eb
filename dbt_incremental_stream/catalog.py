"""Catalog views over committed state: how a tick becomes visible to every client of the catalog.

After each commit every streaming view, and every Kafka source's retained input, is a
catalog view whose SQL reads exactly the state files of that tick
(:meth:`Contents.sql <dbt_incremental_stream.runtime.storage.contents.Contents.sql>`).
A tick changes which files a view reads, almost never its columns.

Redefining a view with DDL (``ALTER VIEW … AS``) makes Spark analyse its query first, and
analysing a query over Parquet files runs a schema-inference job: about 0.25 s per view,
most of a small tick's time. So a view whose stored columns already are the ones its new
SQL gives is rewritten in the metastore directly: its stored definition with the new text,
one catalog write and no job, as ``ALTER VIEW`` itself writes it once analysed. DDL stays
the path for a new view, changed columns, a view that was replaced by something else, and
a session with cached plans (``ALTER VIEW`` uncaches them). Between two definitions of the
project an instance is its views' only writer (as it is its state's), so it keeps each
view's stored definition and the next tick's rewrite is a single catalog write.

The catalog's schemas and a schema's relations, as a ``dbt run`` lists them before it
runs a model (:func:`schemas`, :func:`relations`), are read from the session catalog
directly, not by ``SHOW DATABASES`` and ``SHOW TABLE EXTENDED``: each statement costs a
parse, an analysis and a collect (25-50 ms) that the metastore reads under it do not.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from .circuit.operators import quote
from .process import map_all

#: the positions of a CatalogTable's view texts among its fields: the Spark release's, read
#: once per process (a read is a Py4J call per field)
_TEXT_FIELDS: tuple[int, ...] | None = None


def quote_relation(relation: str) -> str:
    return ".".join(quote(p) for p in relation.split("."))


def table_identifier(spark: SparkSession, relation: str) -> Any | None:
    """The session catalog's identifier of ``[schema.]name`` (None for a longer name, or
    a session without a JVM)."""
    parts = relation.split(".")
    jvm: Any = spark._jvm
    if len(parts) > 2 or jvm is None:
        return None
    database = jvm.scala.Some(parts[0]) if len(parts) == 2 else jvm.scala.Option.empty()
    return jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(parts[-1], database)


def _jvm_catalog(spark: SparkSession) -> Any | None:
    """The session catalog, or None for a session without a JVM (Spark Connect)."""
    session = getattr(spark, "_jsparkSession", None)
    return None if session is None else session.sessionState().catalog()


def _missing_schema(error: Exception) -> bool:
    return any(m in str(error) for m in ("SCHEMA_NOT_FOUND", "NoSuchDatabaseException", "NoSuchNamespaceException"))


def schemas(spark: SparkSession) -> list[str] | None:
    """The session catalog's schemas, as ``SHOW DATABASES`` lists them (None: no JVM)."""
    catalog = _jvm_catalog(spark)
    if catalog is None:
        return None
    names = catalog.listDatabases()
    return [names.apply(i) for i in range(names.size())]


def schema_exists(spark: SparkSession, schema: str) -> bool | None:
    catalog = _jvm_catalog(spark)
    return None if catalog is None else bool(catalog.databaseExists(schema))


def relations(spark: SparkSession, schema: str) -> list[tuple[str, str, str]] | None:
    """Each table and view of ``schema`` in the metastore (no session temporary view):
    its schema and name as the catalog spells them, and its description as ``SHOW TABLE
    EXTENDED`` gives it (what dbt-spark reads a relation's type, provider and columns from).
    Empty for a schema that does not exist; None for a session without a JVM. Two metastore
    reads, whatever the number of tables."""
    catalog = _jvm_catalog(spark)
    if catalog is None:
        return None
    try:
        idents = catalog.listTables(schema, "*", False)
    except (AnalysisException, Py4JJavaError) as e:
        if _missing_schema(e):
            return []
        raise
    if idents.isEmpty():
        return []
    found = catalog.getTablesByName(idents)
    out = []
    for i in range(found.size()):  # a table dropped since the listing is left out
        table = found.apply(i)
        out.append((table.database(), table.identifier().table(), table.simpleString() + "\n"))
    return out


class Catalog:
    """The catalog views and schemas one project instance writes, and what it knows of them."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self._view_sql: dict[str, str] = {}  # each catalog view's SQL as this instance last wrote it
        self._schemas: set[str] = set()  # catalog schemas this instance made sure exist
        #: per view this instance wrote: its columns, its stored definition and that one's fields
        self._fields: dict[str, tuple[list[tuple[str, Any]], Any, list[Any]]] = {}

    def forget(self) -> None:
        """Know nothing: dbt may have dropped or replaced catalog objects since."""
        self._view_sql.clear()
        self._schemas.clear()
        self._fields.clear()

    def recheck(self) -> None:
        """Write every view and make sure of every schema again at the next publish (another
        client may have dropped them), from the stored definitions this instance knows: a
        view dropped since fails the catalog write and is written by DDL."""
        self._view_sql.clear()
        self._schemas.clear()

    def ensure_schema(self, relation: str) -> str:
        """The relation, once its schema exists (dbt does not create sources' schemas)."""
        schema = relation.split(".")[0] if "." in relation else None
        if schema is not None and schema not in self._schemas:  # once per instance: a catalog round trip
            self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
            self._schemas.add(schema)
        return relation

    def publish(self, views: Mapping[str, tuple[str, StructType]]) -> None:
        """Make each relation a view of its SQL, whose columns are the given schema's; views
        whose SQL this instance already wrote are left alone, the others are written by
        :data:`PUBLISHERS` threads."""
        changed = {rel: view for rel, view in views.items() if self._view_sql.get(rel) != view[0]}
        if not changed:
            return
        direct = self.spark._jsparkSession.sharedState().cacheManager().isEmpty()
        if len(changed) > 1:
            map_all("publish", lambda rel: self._define_view(rel, *changed[rel], direct), changed)
        else:
            for rel, (sql, schema) in changed.items():
                self._define_view(rel, sql, schema, direct)

    def _define_view(self, rel: str, sql: str, schema: StructType, direct: bool) -> None:
        if not (direct and self._rewrite(rel, sql, schema)):
            stored = self._stored(rel)
            text = _value(stored.viewText()) if stored is not None else None
            if text != sql:
                try:  # ALTER VIEW writes the catalog once, where CREATE OR REPLACE drops and creates
                    if text is None:
                        raise LookupError(rel)
                    self.spark.sql(f"ALTER VIEW {quote_relation(rel)} AS {sql}")
                except (LookupError, AnalysisException):  # no such view, or dropped since
                    self.spark.sql(f"CREATE OR REPLACE VIEW {quote_relation(rel)} AS {sql}")
        self._view_sql[rel] = sql

    def _stored(self, rel: str) -> Any:
        """The relation's stored definition (a metastore read, no analysis), or None."""
        ident = table_identifier(self.spark, rel)
        if ident is None:
            return None
        try:
            return self.spark._jsparkSession.sessionState().catalog().getTableMetadata(ident)
        except Exception:  # no such relation yet: the view is written by DDL
            return None

    def _rewrite(self, rel: str, sql: str, schema: StructType) -> bool:
        """Store ``sql`` as the view's text without analysing it, when the view already has
        ``schema``'s columns; False where DDL must do it. The stored definition's fields are
        kept for the next tick's write, which then is one catalog write."""
        columns = _columns(schema)
        known = self._fields.get(rel)
        if known is None or known[0] != columns:
            stored = self._stored(rel)
            if (stored is None or stored.tableType().name() != "VIEW"
                    or _columns(StructType.fromJson(json.loads(stored.schema().json()))) != columns):
                return False
            global _TEXT_FIELDS
            if _TEXT_FIELDS is None:  # CatalogTable's fields by name, once: their number varies by release
                names = [stored.productElementName(i) for i in range(stored.productArity())]
                _TEXT_FIELDS = tuple(i for i, n in enumerate(names) if n in ("viewText", "viewOriginalText"))
            known = (columns, stored, [stored.productElement(i) for i in range(stored.productArity())])
            if _value(stored.viewText()) == sql:  # as a previous instance left it
                self._fields[rel] = known
                return True
        assert self.spark._jvm is not None and _TEXT_FIELDS is not None  # both set: ``known`` was read
        text = self.spark._jvm.scala.Some(sql)
        fields = [text if i in _TEXT_FIELDS else f for i, f in enumerate(known[2])]
        try:
            self.spark._jsparkSession.sessionState().catalog().alterTable(known[1].copy(*fields))
        except Exception:  # dropped or replaced by another client since: DDL decides
            self._fields.pop(rel, None)
            return False
        self._fields[rel] = known
        return True


def _columns(schema: StructType) -> list[tuple[str, Any]]:
    return [(f.name, f.dataType) for f in schema]


def _value(option: Any) -> Any:
    return option.get() if option.isDefined() else None
