"""What the last committed tick holds: a view's contents or a source's retained input,
read as a DataFrame, as Arrow in the driver, by key from an arrangement, or as Spark SQL
over the state files (for a catalog view any client reads).

Reading only: the state location's directories are :mod:`.state`'s; this module asks it
for a node's batches (its spine) and arrangements, and the circuit for the node that holds
a name and its columns.
"""
from __future__ import annotations

from typing import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from ...circuit.operators import WEIGHT, quote
from ..arrow import kernels
from ..spark import zsets
from ..circuit import Circuit
from ..spark.session import empty_frame
from .state import Batch, StateStore


def _scan_paths(batches: Sequence[Batch]) -> list[tuple[str, str]]:
    """(struct column, path) to scan for ``batches`` of one node: one glob over their
    tick directories where they share a parent and a leaf (a scan that SQL names costs a
    schema-inference job, so one scan instead of up to ``max_batches``)."""
    parts = [b.path.rsplit("/", 2) for b in batches]
    if len(batches) > 1 and len({(p[0], p[2], b.column) for p, b in zip(parts, batches)}) == 1 \
            and all(len(p) == 3 and not set(p[1]) & set("{},*?[]\\") for p in parts):
        return [(batches[0].column, f"{parts[0][0]}/{{{','.join(p[1] for p in parts)}}}/{parts[0][2]}")]
    return [(b.column, b.path) for b in batches]


class Contents:
    """The committed contents of a pipeline's views and sources (by name)."""

    def __init__(self, spark: SparkSession, circuit: Circuit, store: StateStore):
        self.spark, self.circuit, self.store = spark, circuit, store

    def snapshot(self, name: str, *, weights: bool = False) -> DataFrame:
        """As a bag of rows, like the batch query returns; ``weights=True`` gives one row
        per distinct tuple with its multiplicity in ``_w`` instead."""
        node, schema = self.circuit.contents(name)
        df = self.store.before(node)
        df = empty_frame(self.spark, zsets.with_weight(schema)) if df is None else zsets.consolidate(df)
        return df if weights else zsets.expand(df)

    def holds(self, name: str) -> bool:
        """Whether any batch is held (False: the contents are surely empty)."""
        spine = self.store.spines.get(self.circuit.contents(name)[0])
        return bool(spine and spine.batches)

    def integral(self, name: str) -> DataFrame | None:
        """As a Z-set not yet consolidated (a union of the batches, for a caller that
        consolidates anyway); None when nothing is held."""
        return self.store.before(self.circuit.contents(name)[0])

    def integral_arrow(self, name: str, most_bytes: int) -> pa.Table | None:
        """:meth:`integral` as an Arrow table read in the driver; None when the batches
        pass ``most_bytes`` in all."""
        node, schema = self.circuit.contents(name)
        spine = self.store.spines.get(node)
        batches = list(spine.batches) if spine else []
        if sum(b.bytes for b in batches) > most_bytes:
            return None
        if not batches:
            return zsets.arrow_schema(zsets.with_weight(schema)).empty_table()
        return self.store.read_arrow(batches)

    def by_key(self, source: str, key: Sequence[str], keys: pa.Table, pending: bool) -> pa.Table | None:
        """A source's rows (with weights) whose ``key`` equals a row of ``keys`` (NULL
        matches NULL), from its arrangement by ``key``; None until that arrangement is
        built (or while state is ``pending``)."""
        source = source.lower()
        node = self.circuit.source_state(source).id
        arr = self.store.arrangements.get(node, {}).get(tuple(key))
        if arr is None or self.store.runs is None or pending:
            return None
        _, rows = self.store.runs.probe(arr, keys, list(key), [True] * len(key))
        schema = zsets.arrow_schema(zsets.with_weight(self.circuit.sources[source]))
        return kernels.consolidate(rows.cast(schema)) if rows is not None else schema.empty_table()

    def sql(self, name: str) -> str:
        """A Spark SQL query reading the committed state files: a catalog view defined by
        it shows exactly that tick to any client of the same catalog, and is redefined
        after every commit."""
        node, schema = self.circuit.contents(name)
        spine = self.store.spines.get(node)
        columns = ", ".join(quote(f.name) for f in schema)
        if spine is None or not spine.batches:
            nulls = ", ".join(f"CAST(NULL AS {f.dataType.simpleString()}) AS {quote(f.name)}" for f in schema)
            return f"SELECT {nulls} WHERE 1 = 0"
        scans = " UNION ALL ".join(f"SELECT {quote(column)}.* FROM parquet.`{path}`"
                                   for column, path in _scan_paths(spine.batches))
        groups, out = zsets.identity_columns(schema)  # -0.0 stays -0.0, as the view holds it
        return (f"SELECT {columns} FROM (SELECT {', '.join(out)}, {WEIGHT} FROM (SELECT {', '.join(groups)}, "
                f"SUM({WEIGHT}) AS {WEIGHT} FROM ({scans}) GROUP BY ALL "
                f"HAVING SUM({WEIGHT}) > 0)) LATERAL VIEW explode(sequence(1, {WEIGHT})) AS __copy")
