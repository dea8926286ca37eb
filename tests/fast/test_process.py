"""What the process keeps for as long as it runs (``process.py``): its pools of threads, which
behave as a ``with ThreadPoolExecutor`` block did, and the allocator Arrow uses."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from dbt_incremental_stream.process import WORKERS, fan_out, map_all, on_kept_thread


def test_leaving_a_fan_out_waits_for_every_call_even_after_an_error():
    finished = []

    def slow(i: int) -> None:
        time.sleep(0.05)
        finished.append(i)

    with pytest.raises(RuntimeError):
        with fan_out("write") as submit:
            for i in range(3):
                submit(slow, i)
            raise RuntimeError("the tick failed")
    assert sorted(finished) == [0, 1, 2]  # nothing is left writing behind a failed tick


def test_map_all_keeps_the_order_and_raises_after_all_finished():
    assert map_all("collect", lambda x: x * 2, range(10)) == [x * 2 for x in range(10)]
    done = []

    def one(i: int) -> int:
        if i == 0:
            raise ValueError("first")
        time.sleep(0.05)
        done.append(i)
        return i

    with pytest.raises(ValueError, match="first"):
        map_all("collect", one, range(4))
    assert sorted(done) == [1, 2, 3]


def test_every_call_runs_on_the_same_threads():
    def name(_: int) -> str:
        time.sleep(0.01)
        return threading.current_thread().name

    seen: set[str] = set()
    for _ in range(3):
        seen |= set(map_all("sort", name, range(8)))
    assert len(seen) <= WORKERS["sort"]


def test_a_hosts_calls_run_on_one_kept_thread_and_raise_there():
    """dbt makes its threads per run; what they hand over runs on the same thread each time,
    errors included, and a call made from that thread runs in place (no wait on itself)."""
    def name() -> str:
        return threading.current_thread().name

    seen = set()
    for _ in range(3):
        caller = threading.Thread(target=lambda: seen.add(on_kept_thread(name)))
        caller.start()
        caller.join()
    seen.add(on_kept_thread(name))
    assert len(seen) == 1 and next(iter(seen)).startswith("dbt-stream-host")
    assert on_kept_thread(lambda: on_kept_thread(name)) in seen

    def fail(why: str) -> None:
        raise KeyError(why)

    with pytest.raises(KeyError, match="no such"):
        on_kept_thread(fail, "no such")


def allocator(env: dict[str, str], first: str = "") -> str:
    """The pool Arrow's C++ code defaults to (as the variable says once Arrow is loaded) and
    pyarrow's, in a new process importing the engine (after ``first``)."""
    code = (f"{first}import os, dbt_incremental_stream, pyarrow as pa; "
            "print(os.environ['ARROW_DEFAULT_MEMORY_POOL'], pa.default_memory_pool().backend_name)")
    clean = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_engine_allocates_arrow_memory_with_the_c_library_unless_told_otherwise():
    assert allocator({}) == "system system"
    assert allocator({}, first="import pyarrow; ") == "system system"  # pyarrow's own calls, at least
    assert allocator({"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}) == "mimalloc mimalloc"


#: what a thread's arena keeps once a large buffer was freed before (glibc raises its
#: thresholds to that buffer's size): the RssAnon a thread's 32 MiB of 512 KiB buffers
#: leaves behind after they are freed and the allocator trimmed, in MiB
ARENA_KEPT = """
import ctypes, threading
{first}
def anon():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon")) / 1024
def work():
    big = bytearray(30 << 20)
    del big
    chunks = [bytearray(1 << 19) for _ in range(64)]
    del chunks
before = anon()
thread = threading.Thread(target=work)
thread.start()
thread.join()
ctypes.CDLL("libc.so.6").malloc_trim(0)
print(anon() - before)
"""


def glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False


@pytest.mark.skipif(not glibc(), reason="glibc's allocator")
def test_a_threads_arena_gives_back_what_it_freed():
    """glibc keeps up to twice the largest buffer freed so far at the top of each thread's
    arena, which malloc_trim does not give back: a served project's memory grew so with its
    state. The engine fixes the thresholds."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def kept(first: str) -> float:
        return float(subprocess.run([sys.executable, "-c", ARENA_KEPT.format(first=first)], env=clean,
                                    capture_output=True, text=True, check=True).stdout)

    assert kept("") > 24  # glibc's own thresholds: the arena keeps it
    assert kept("import dbt_incremental_stream") < 12


#: a main thread asleep on a lock (as dbt's waits for its models) while one of the
#: engine's threads changes its signal mask over and over, as glibc does around starting
#: each thread or process (Kafka readers, Spark, a pool's threads)
SIGNAL_THIEF = """
import signal, threading
# as a terminal's process starts: Ctrl-C raises KeyboardInterrupt and is not blocked (a
# child inherits its parent's disposition and the spawning thread's mask, which a test
# process's earlier work may have changed)
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
from dbt_incremental_stream.process import pool
running, stop = threading.Event(), threading.Event()
def starting_threads():
    while not stop.is_set():
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1])
        running.set()
pool("write").submit(starting_threads)
running.wait()
try:
    print("asleep", flush=True)
    threading.Event().wait()
except KeyboardInterrupt:
    print("interrupted", flush=True)
finally:
    stop.set()
"""


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX thread signal masks")
def test_a_stop_signal_wakes_the_main_thread_while_engine_threads_start_threads():
    """A thread that does not block SIGINT takes it whenever its mask changes while the
    signal waits for the main thread, which then sleeps on (a Ctrl-C during a `dbt run`
    was seen once all its models had run); the engine's threads leave it to the main one."""
    proc = subprocess.Popen([sys.executable, "-c", SIGNAL_THIEF], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "asleep"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the main thread never saw the SIGINT: another thread took it")
    assert out.strip() == "interrupted"
