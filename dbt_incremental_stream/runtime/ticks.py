"""What a tick hands on: each view's change (:class:`Changes`) and how the tick ran
(:class:`TickStats`), whichever path computed it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame

from ..circuit.operators import Integral, Recompute

State = Integral | Recompute  # nodes with persisted state: an integral, or a per-group recompute's output


@dataclass(frozen=True)
class TickStats:
    """How a tick ran: ``path`` is "arranged" (kernels on indexed state) or "dataframe"
    (Spark jobs over whole batches); ``seconds`` splits its time."""

    path: str
    input_rows: int
    seconds: dict[str, float]
    why: str | None = None  # why a tick took the DataFrame path
    rows_read: int = 0  # arranged: rows of state that its joins and temporal filters read


class Changes(Mapping[str, DataFrame]):
    """Views' changes as DataFrames made when first read (most ticks read few of them);
    on the arranged path also as the Arrow tables they are made from."""

    def __init__(self, make: dict[str, Callable[[], DataFrame]], tables: Mapping[str, pa.Table] | None = None):
        self._make = make
        self._made: dict[str, DataFrame] = {}
        self._tables = tables or {}

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._made:
            self._made[name] = self._make[name]()
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._make)

    def __len__(self) -> int:
        return len(self._make)

    def in_driver(self, name: str) -> pa.Table | None:
        """A view's change (its columns, then ``_w``) as Arrow if the tick made it on
        arrangements, else None."""
        return self._tables.get(name)
