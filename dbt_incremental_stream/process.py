"""What the process keeps for as long as it runs: one pool of threads per purpose, the
allocator Arrow's memory comes from and how much free memory it may keep, and which thread
takes a stop signal.

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

Every thread the engine makes leaves SIGINT and SIGTERM to the main thread
(:func:`leave_signals_to_main`), where Python handles them.

Arrow allocates from the C library's ``malloc`` here (:func:`use_system_allocator`), not
from the mimalloc pool pyarrow's wheels default to: ticking, mimalloc kept pages after
each large merge and the process grew in steps of 10–25 MiB (RSS +6–7% per 1,000 ticks
of ``bench/soak.py`` after the first 1,000, with the same threads throughout; the C
library's: +3.5%, jemalloc's +4.2%), at the same tick time. A process that chose its
pool (``ARROW_DEFAULT_MEMORY_POOL``) keeps its choice. Arrow reads that choice once, as
it loads: a process that loaded pyarrow before the engine keeps mimalloc for Arrow's own
allocations (reading and writing Parquet and IPC files) and only pyarrow's calls move.

glibc's allocator is then told how much free memory a thread's arena may keep
(:func:`bound_free_memory`). By default it raises its mmap threshold to the size of the
largest buffer freed so far (up to 32 MiB) and its trim threshold to twice that: every
buffer smaller than the largest merge's comes from an arena, and each of the engine's
threads' arenas keeps up to 64 MiB of freed memory at its top, which ``malloc_trim`` does
not give back (it trims only the main arena's top). A served shop project's anonymous
memory grew with its state that way (``bench/soak.py``, 2,000 ticks: the other threads'
anonymous memory 62 → 73 MiB from tick 1,000 while what their arenas had handed out stayed
at 3–4 MiB). With both thresholds fixed, buffers of :data:`MMAP_BYTES` and more are mapped
and unmapped one by one, and an arena gives back its top past :data:`TRIM_BYTES`: the
anonymous memory of 3,000 such ticks grew +1.0% per 1,000 ticks instead of +13.4%, and a
tick of 1M changed rows took 3–10% longer (``bench/join_aggregate.py``). Keeping 8 MiB at each
arena's top (a 4 MiB mmap threshold) grew as the default did. A process that set either
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) keeps its settings; Spark's JVM
and Python workers keep glibc's defaults.
"""
from __future__ import annotations

import ctypes
import functools
import os
import signal
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

#: threads per purpose: what a tick fans out to at most (a tick's batch and runs written
#: at once, Kafka partitions read at once, DataFrame inputs collected at once, catalog
#: views written at once, a large sort's two halves), and the one thread a host's calls
#: run on (:func:`on_kept_thread`)
WORKERS = {"write": 4, "kafka": 4, "collect": 4, "publish": 4, "sort": 2, "host": 1}


#: glibc's allocator: buffers from this size up are mapped one by one (and unmapped when
#: freed), and a thread's arena gives back the free memory at its top past TRIM_BYTES
MMAP_BYTES = 1 << 20
TRIM_BYTES = 128 << 10
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)

#: what a host stops on (a terminal's Ctrl-C, ``docker stop``, systemd, Kubernetes)
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def leave_signals_to_main() -> None:
    """Block :data:`STOP_SIGNALS` in the calling thread, unless it is the main thread (POSIX).

    Python runs signal handlers in the main thread only, but the kernel hands a signal sent
    to the process to any thread that does not block it: a thread that starts a thread or a
    process (glibc blocks and restores its signals around both) takes a pending signal off
    the process's queue, and a main thread asleep on a lock is never woken. dbt's main
    thread waits so for its models: a Ctrl-C taken by the thread running a model (starting
    Kafka readers, Spark, these pools) was seen only once every model had run. Threads
    started from a blocking thread inherit its mask."""
    if threading.current_thread() is not threading.main_thread() and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def threads(workers: int, name: str, initializer: Callable[[], None] | None = None) -> ThreadPoolExecutor:
    """A pool whose threads leave the stop signals to the main thread (and then run
    ``initializer``); the engine makes its threads here."""
    def start() -> None:
        leave_signals_to_main()
        if initializer is not None:
            initializer()
    return ThreadPoolExecutor(workers, thread_name_prefix=name, initializer=start)


@functools.cache
def pool(purpose: str) -> ThreadPoolExecutor:
    """The process's threads for ``purpose`` (a key of :data:`WORKERS`), made on first use."""
    return threads(WORKERS[purpose], f"dbt-stream-{purpose}")


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


def on_kept_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on the process's kept thread for a host's calls, waited for.
    A host that makes its threads per call (dbt makes them per run: one to list schemas,
    one per model) would otherwise touch Spark from a new thread each time: a new Py4J
    connection (3-6 ms), and in the embedded Hive metastore a new persistence manager for
    the JVM thread behind it (20 ms on its first catalog read, and kept until the process
    ends). One thread is enough: the engine runs one model at a time (its own lock)."""
    if threading.current_thread().name.startswith("dbt-stream-host"):
        return fn(*args, **kwargs)
    return pool("host").submit(fn, *args, **kwargs).result()


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


def bound_free_memory() -> None:
    """Fix glibc's mmap and trim thresholds (see the module's docstring), unless the
    process's environment set either; nothing where the C library is not glibc."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)
    mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES)
