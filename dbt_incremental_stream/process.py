"""What the process keeps for as long as it runs: one pool of threads per purpose, and the
allocator Arrow's memory comes from.

Work a tick fans out (writing its batches and runs, reading Kafka partitions, collecting
DataFrame inputs, sorting a large delta, writing catalog views) runs on pools made once,
not on threads made for the tick, because a thread made per tick costs more than its
start in a process that runs for weeks: a Python thread that calls Spark (collecting a
DataFrame, writing a catalog view) gets a JVM thread of its own, and the Hive metastore
client keeps a connection (a DataNucleus persistence manager) for every JVM thread that
touched it, never released (threads made per tick to write catalog views leaked four of
them a tick, 40 MiB of heap in 2,300 ticks of the shop project). For the memory of the
Python process alone, kept threads measured the same as threads made per tick (below):
what mattered there is the allocator.

:func:`fan_out` keeps what leaving a ``with ThreadPoolExecutor(...)`` block gave: every
call submitted in the block has finished when it is left, an error or not, so a failed
tick leaves nothing writing behind it. One purpose's calls never wait on the same
purpose's pool (that could take every worker and wait forever), so each caller that
fans out from inside another fan-out has a purpose of its own.

Arrow allocates from the C library's ``malloc`` here (:func:`use_system_allocator`), not
from the mimalloc pool pyarrow's wheels default to: ticking, mimalloc kept pages after
each large merge and the process grew in steps of 10–25 MiB (RSS +6–7% per 1,000 ticks
of ``bench/soak.py`` after the first 1,000, with the same threads throughout; the C
library's: +3.5%, jemalloc's +4.2%), at the same tick time. A process that chose its
pool (``ARROW_DEFAULT_MEMORY_POOL``) keeps its choice. Arrow reads that choice once, as
it loads: a process that loaded pyarrow before the engine keeps mimalloc for Arrow's own
allocations (reading and writing Parquet and IPC files) and only pyarrow's calls move.
"""
from __future__ import annotations

import functools
import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

#: threads per purpose: what a tick fans out to at most (a tick's batch and runs written
#: at once, Kafka partitions read at once, DataFrame inputs collected at once, catalog
#: views written at once, a large sort's two halves)
WORKERS = {"write": 4, "kafka": 4, "collect": 4, "publish": 4, "sort": 2}


@functools.cache
def pool(purpose: str) -> ThreadPoolExecutor:
    """The process's threads for ``purpose`` (a key of :data:`WORKERS`), made on first use."""
    return ThreadPoolExecutor(WORKERS[purpose], thread_name_prefix=f"dbt-stream-{purpose}")


@contextmanager
def fan_out(purpose: str) -> Iterator[Callable[..., Future[Any]]]:
    """A ``submit`` to the threads for ``purpose``; every call submitted with it has
    finished when the block is left."""
    submitted: list[Future[Any]] = []

    def submit(fn: Callable[..., T], *args: Any) -> Future[T]:
        future = pool(purpose).submit(fn, *args)
        submitted.append(future)
        return future

    try:
        yield submit
    finally:
        wait(submitted)


def map_all(purpose: str, fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
    """``fn`` of each item, on the threads for ``purpose``, in the items' order; all have
    finished when it returns (the first error is raised after)."""
    with fan_out(purpose) as submit:
        futures = [submit(fn, item) for item in items]
    return [f.result() for f in futures]


def use_system_allocator() -> None:
    """Arrow's default pool: the C library's allocator, unless ``ARROW_DEFAULT_MEMORY_POOL``
    names one (see the module's docstring). Arrow reads that variable once, as it loads:
    set before, it takes every allocation (also Arrow's own, inside Parquet and IPC, and in
    Spark's Python workers, which inherit it); once loaded, pyarrow's default is set too."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
