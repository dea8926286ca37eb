"""The threads the process keeps: one pool per purpose, made once, for as long as it runs.

Work a tick fans out (writing its batches and runs, reading Kafka partitions, collecting
DataFrame inputs, sorting a large delta, writing catalog views) runs on these pools, not on
threads made for the tick, because a thread made per tick costs more than its start in a
process that runs for weeks:

- Arrow's default allocator (mimalloc) gives every thread a heap of its own and, when the
  thread exits, abandons it with the pages it holds: the process's memory grew in steps of
  10–25 MiB, +3.4% per 1,000 ticks (``bench/soak.py``), and stays flat with kept threads.
- A Python thread that calls Spark gets a JVM thread of its own, and the Hive metastore
  client keeps a connection (a DataNucleus persistence manager) for every JVM thread that
  touched it, never released: threads made per tick to write catalog views leaked four of
  them a tick (40 MiB of heap in 2,300 ticks of the shop project).

:func:`fan_out` keeps what leaving a ``with ThreadPoolExecutor(...)`` block gave: every
call submitted in the block has finished when it is left, an error or not, so a failed
tick leaves nothing writing behind it. One purpose's calls never wait on the same
purpose's pool (that could take every worker and wait forever), so each caller that
fans out from inside another fan-out has a purpose of its own.
"""
from __future__ import annotations

import functools
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
