"""What a tick hands on: each view's change (:class:`Changes`) and how the tick ran
(:class:`TickStats`), whichever path computed it; the views whose SQL failed on the
tick's data (:func:`data_error`, :class:`ViewsFailed`); and the tick's time, for views
that read it (:class:`Clock`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Mapping

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame

from ..circuit.operators import Integral, Recompute
from ..errors import StreamError

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
    #: in Spark tasks: the seconds its tasks spent per phase (:data:`.tasks.PHASES`), summed
    #: over them (on two cores, up to twice the tick's time)
    in_tasks: dict[str, float] = field(default_factory=dict)


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


def data_error(e: BaseException) -> str | None:
    """``e`` as "CONDITION: message" when it is an error of the data a view's SQL met (a
    division by zero, an overflow, a cast of a malformed value, an index out of range,
    ``assert_true``: SQLSTATE class 22 or P0001); None for any other error."""
    found = [(e.getSqlState(), e.getCondition(), str(e))] if isinstance(e, PySparkException) else []
    cause = getattr(e, "java_exception", None)  # an error Spark raised in another thread: its causes
    for _ in range(8):
        if cause is None:
            break
        try:
            found.append((cause.getSqlState(), cause.getCondition(), cause.getMessage()))
        except Py4JError:  # not a SparkThrowable
            pass
        cause = cause.getCause()
    for state, condition, message in found:
        if state and (state.startswith("22") or state == "P0001"):
            return f"{condition}: {str(message).splitlines()[0]}"
    return None


class ViewsFailed(Exception):
    """Views whose change could not be computed on this tick's input: view → error."""

    def __init__(self, failed: dict[str, str]):
        super().__init__(failed)
        self.failed = failed


class NodeFailed(Exception):
    """A data error (:func:`data_error`, ``why``) met computing one node of a tick on
    arrangements: each view whose circuit holds that node fails with it, as it would
    computed alone in Spark, and the others go on."""

    def __init__(self, node: str, why: str):
        super().__init__(f"node {node}: {why}")
        self.node = node
        self.why = why


def instant(t: datetime) -> datetime:
    """A time as an instant in UTC: a naive datetime is UTC (a tick's time in the state,
    whatever the process's local time)."""
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


class Clock:
    """The time views read: a source of one row (:data:`~..sql.temporal.CLOCK`) whose
    value each tick moves forward, never back (rows outside every window for good have
    left the state by then)."""

    def __init__(self, recorded: str | datetime | None):
        #: the last committed tick's time, in UTC (None before the first)
        self.now = None if recorded is None else instant(
            datetime.fromisoformat(recorded) if isinstance(recorded, str) else recorded)

    def advance(self, now: datetime | None) -> tuple[datetime, list[tuple[tuple[Any, ...], int]]]:
        """The next tick's time (``now``, else the wall clock, never before :attr:`now`)
        and the change that moves the time's row there (none if it stays)."""
        if now is not None and self.now is not None and instant(now) < self.now:
            raise StreamError(f"the time {instant(now)} is before the last tick's {self.now}: the time views "
                              f"read never goes back (rows outside every window for good leave the state)")
        wall = datetime.now(timezone.utc)
        clock = instant(now) if now is not None else wall if self.now is None else max(wall, self.now)
        if clock == self.now:
            return clock, []
        return clock, [((clock,), 1)] + ([((self.now,), -1)] if self.now is not None else [])
