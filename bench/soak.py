"""What a long-lived process holds as it ticks and as it opens and closes pipelines.

    python bench/soak.py [--ticks 2000] [--pipelines 100] [--shop-ticks 0] [--every 100]

Part 1, ticking (what ``dbt-stream serve`` does between its HTTP calls): the shop's three
views (a join + aggregate, a per-customer COUNT DISTINCT/MAX, a top-3 per region) over a
few thousand orders, then ``--ticks`` ticks in a row of 20 changed orders each (inserts,
deletes and a customer update, as rows), back to back. Part 2, pipelines (a scheduler
running ``dbt run`` in one process): ``--pipelines`` times, a new pipeline in a new state
location joins 2 to 6 small tables (10–200 rows a tick), ticks 3 times and is closed; the
pipelines take turns in the driver, in Spark tasks and on the DataFrame evaluator.
With ``--shop-ticks``, first the example project examples/shop as serve runs it: a local
broker, ``dbt build``, then that many ticks of serve's loop, each after a round of shop
events; its orders, payments and customers are kept, so its state grows with its input.

Every ``--every`` ticks (or pipelines) it samples: the JVM heap in use after full GCs and
what the JVM has committed for it, the storage memory Spark's block managers hold (cached
RDDs and DataFrames, broadcasts), persisted RDDs, this process's RSS (then again after
glibc's ``malloc_trim``, and its anonymous part: not mapped files, split into the main
heap and the other anonymous mappings), what Arrow's pool holds, its Python objects (those
the GC tracks, and pymalloc's blocks, which count untracked ones too),
open files and memory maps, the JVM's RSS and open files, Spark's Python workers, the
bytes and directories under the state location, and the tick time; for the shop, also what
the broker alone takes to serve a tick's Kafka read (the same requests by a consumer of its
own: this broker's cost per request grows with what a partition holds). It prints the
samples, the growth of each quantity per 1,000 ticks after ``--warmup`` ticks and per 100
pipelines (a least-squares slope over those samples, as a share of the first of them), the
p99 tick of the last sample window against the first and against the one after the
warm-up (for the shop also less its Kafka read), and saves bench/results/soak.png (and its
samples, tick times and splits in soak.json).
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pyspark import SparkContext  # noqa: E402

from dbt_incremental_stream import Pipeline  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import session  # noqa: E402

import pyarrow as pa  # noqa: E402  (after the engine, which chooses Arrow's allocator as pyarrow loads)

SOURCES = {"orders": "id BIGINT, cust INT, amount DOUBLE",
           "customers": "id INT, region STRING, tier STRING"}
VIEWS = {
    "revenue": "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS s, AVG(o.amount) AS a "
               "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY c.region",
    "per_customer": "SELECT cust, COUNT(DISTINCT amount) AS kinds, MAX(amount) AS top FROM orders GROUP BY cust",
    "top3": "SELECT region, cust, s, r FROM (SELECT c.region, o.cust, SUM(o.amount) AS s, "
            "RANK() OVER (PARTITION BY c.region ORDER BY SUM(o.amount) DESC) AS r "
            "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY c.region, o.cust) WHERE r <= 3",
}
#: part 2 runs its pipelines in turn in the driver, in Spark tasks and on the DataFrame
#: evaluator, so that Spark's jobs (its memory, accumulators, broadcasts) are soaked too
PLACEMENTS = ("auto", "tasks", "dataframe")
QUANTITIES = ("heap MiB", "heap committed MiB", "storage MiB", "persisted RDDs", "RSS MiB", "RSS trimmed MiB",
              "anon MiB", "brk heap MiB", "anon maps MiB", "malloc main MiB", "malloc arenas MiB",
              "malloc mmap MiB", "Arrow MiB", "Python objects", "Python blocks",
              "fds", "maps", "JVM RSS MiB", "JVM fds", "Python workers", "state MiB",
              "state directories")


def _status(path: str, key: str) -> float:
    with open(path) as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return 0.0


def _count(path: str) -> int:
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def sample(spark, state: Path) -> dict[str, float]:
    """The quantities of :data:`QUANTITIES`, after full GCs on both sides. Spark's context
    cleaner drops the broadcasts and shuffles of collected plans only after a GC, and
    asynchronously, and a closed pipeline's last jobs are still being cleaned up: GCs a
    second apart until the heap in use stops falling (at most 5) count what they held as
    freed (with two, the heap after GC of 200 closed pipelines read 77–81 MiB at most
    samples and 145–466 MiB at a few)."""
    jvm = spark._jvm
    runtime = jvm.java.lang.Runtime.getRuntime()
    used = float("inf")
    for _ in range(5):
        gc.collect()
        jvm.java.lang.System.gc()
        before, used = used, runtime.totalMemory() - runtime.freeMemory()
        if used > 0.99 * before:
            break
        time.sleep(1)
    blocks = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().valuesIterator()
    storage = 0  # what the block managers hold: cached RDDs and DataFrames, broadcasts
    while blocks.hasNext():
        held = blocks.next()
        storage += held._1() - held._2()
    proc = getattr(SparkContext._gateway, "proc", None)
    jpid = proc.pid if proc is not None else None
    with open("/proc/self/maps") as maps:
        mapped = sum(1 for _ in maps)
    size, dirs = _under(state)
    rss, anon = _status("/proc/self/status", "VmRSS"), _status("/proc/self/status", "RssAnon")
    _trim()
    heap, maps = _anonymous()
    main, arenas, mapped_out = _malloc()
    return {"heap MiB": used / 2 ** 20, "heap committed MiB": runtime.totalMemory() / 2 ** 20,
            "storage MiB": storage / 2 ** 20,
            "persisted RDDs": spark.sparkContext._jsc.getPersistentRDDs().size(),
            "RSS MiB": rss, "RSS trimmed MiB": _status("/proc/self/status", "VmRSS"),
            "anon MiB": anon, "brk heap MiB": heap, "anon maps MiB": maps,
            "malloc main MiB": main, "malloc arenas MiB": arenas, "malloc mmap MiB": mapped_out,
            "Arrow MiB": pa.total_allocated_bytes() / 2 ** 20,
            "Python objects": len(gc.get_objects()), "Python blocks": sys.getallocatedblocks(),
            "fds": _count("/proc/self/fd"), "maps": mapped,
            "JVM RSS MiB": _status(f"/proc/{jpid}/status", "VmRSS") if jpid else 0.0,
            "JVM fds": _count(f"/proc/{jpid}/fd") if jpid else 0, "Python workers": _workers(),
            "state MiB": size / 2 ** 20, "state directories": dirs}


def _anonymous() -> tuple[float, float]:
    """This process's resident anonymous memory (after ``malloc_trim``) in the C library's
    main heap (``[heap]``, grown by ``brk``: the main thread's allocations) and in the rest
    of its anonymous mappings (other threads' arenas, thread stacks, allocations past
    glibc's mmap threshold), in MiB: which of them grows says whose memory it is."""
    heap = other = 0
    name = ""
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                name = head[5] if len(head) > 5 else ""
            elif head[0] == "Anonymous:":
                if name == "[heap]":
                    heap += int(head[1])
                elif not name:
                    other += int(head[1])
    return heap / 1024, other / 1024


def _malloc() -> tuple[float, float, float]:
    """What glibc's allocator has handed out and not had back, in MiB, from ``malloc_info``:
    in its main arena (the main thread's), in the other threads' arenas, and in chunks it
    mapped one by one (those past its mmap threshold). Unlike RSS, this leaves out the free
    memory the allocator keeps: growth here is memory something still holds. Zeros where
    the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return 0.0, 0.0, 0.0
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    text = ctypes.string_at(buf, size.value).decode()
    libc.free(ctypes.cast(buf, ctypes.c_void_p))
    used = []
    for nr, body in re.findall(r'<heap nr="(\d+)">(.*?)</heap>', text, re.S):
        free = sum(map(int, re.findall(r'<total type="(?:fast|rest)" count="\d+" size="(\d+)"', body)))
        used.append((int(nr), int(re.search(r'<system type="current" size="(\d+)"', body)[1]) - free))
    mapped = re.search(r'<total type="mmap" count="\d+" size="(\d+)"', text.rsplit("</heap>", 1)[-1])
    return (sum(u for nr, u in used if nr == 0) / 2 ** 20, sum(u for nr, u in used if nr) / 2 ** 20,
            int(mapped[1]) / 2 ** 20 if mapped else 0.0)


def _under(path: Path) -> tuple[int, int]:
    """The bytes of the files under ``path`` and its directories, listed by ``find`` in a
    process of its own: walking the state location in this process (``Path.rglob``, each
    file stat'ed) grew its RSS by about 1 MiB a walk while it ticked (1,000 ticks sampled
    every 100: 168 → 178 MiB, against 164 → 165 MiB without the walk): the soak measured
    itself."""
    if not path.exists():
        return 0, 0
    listed = subprocess.run(["find", str(path), "-printf", "%y %s\n"], capture_output=True, text=True).stdout
    size = dirs = 0
    for line in listed.splitlines():
        kind, _, n = line.partition(" ")
        size += int(n) if kind == "f" else 0
        dirs += kind == "d"
    return size, dirs


@functools.cache
def _glibc() -> Any:
    """glibc, with the signatures :func:`_malloc` calls; None where the C library is another."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.open_memstream.restype = ctypes.c_void_p
        libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.free.argtypes = [ctypes.c_void_p]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


def _trim() -> None:
    """Hand the C allocator's free memory back to the system (glibc's ``malloc_trim``)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _workers() -> int:
    """Spark's Python worker processes (the daemon and the workers it forked)."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                count += b"pyspark.daemon" in f.read()
        except OSError:  # gone since the listing
            pass
    return count


def ticking(spark, work: Path, ticks: int, every: int) -> tuple[list[tuple[int, dict[str, float]]], list[float]]:
    rng = random.Random(11)
    pipe = Pipeline(spark, str(work / "ticking"))
    for name, ddl in SOURCES.items():
        pipe.add_source(name, ddl)
    for name, sql in VIEWS.items():
        pipe.add_view(name, sql)
    live = {i: (i, rng.randrange(500), float(rng.randrange(1, 500))) for i in range(5000)}
    customers = {c: (c, f"r{c % 20}", "gold" if c % 7 == 0 else "silver") for c in range(500)}
    pipe.step({"orders": [(row, 1) for row in live.values()], "customers": [(row, 1) for row in customers.values()]})
    samples, times, next_id = [(0, sample(spark, work / "ticking"))], [], 5000
    for tick in range(1, ticks + 1):
        gone = rng.sample(sorted(live), 10)
        orders = [(live.pop(i), -1) for i in gone]
        for _ in range(10):
            live[next_id] = (next_id, rng.randrange(500), float(rng.randrange(1, 500)))
            orders.append((live[next_id], 1))
            next_id += 1
        c = rng.randrange(500)
        old, customers[c] = customers[c], (c, f"r{rng.randrange(20)}", customers[c][2])
        started = time.perf_counter()
        pipe.step({"orders": orders, "customers": [(old, -1), (customers[c], 1)]})
        times.append(time.perf_counter() - started)
        if tick % every == 0:
            samples.append((tick, sample(spark, work / "ticking")))
            print(f"  tick {tick}: {fmt(samples[-1][1])}, p50 {statistics.median(times[-every:]):.3f} s",
                  file=sys.stderr, flush=True)
    pipe.close()
    return samples, times


def pipelines(spark, work: Path, count: int, every: int) -> list[tuple[int, dict[str, float]]]:
    rng = random.Random(5)
    root = work / "pipelines"
    samples = [(0, sample(spark, root))]
    for n in range(1, count + 1):
        location = root / f"p{n}"
        pipe = Pipeline(spark, str(location), placement=PLACEMENTS[n % len(PLACEMENTS)])
        tables = rng.randint(2, 6)
        for t in range(tables):
            pipe.add_source(f"t{t}", "k INT, v INT")
        joined = " ".join(f"JOIN t{t} ON t{t}.k = t0.k" for t in range(1, tables))
        pipe.add_view("j", f"SELECT t0.k, COUNT(*) AS n, SUM(t{tables - 1}.v) AS s FROM t0 {joined} GROUP BY t0.k")
        for tick in range(3):  # keys mostly distinct: a join of 6 tables stays the size of one
            pipe.step({f"t{t}": [((k, rng.randrange(100)), 1) for k in rng.sample(range(2000), 10 + rng.randrange(190))]
                       for t in range(tables)})
        pipe.close()
        shutil.rmtree(location)  # what a closed pipeline left on disk is not the process's growth
        if n % every == 0:
            samples.append((n, sample(spark, root)))
            print(f"  pipeline {n}: {fmt(samples[-1][1])}", file=sys.stderr, flush=True)
    return samples


def fmt(s: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in s.items())


def growth(samples: list[tuple[int, dict[str, float]]], per: int, warmup: int = 1) -> dict[str, float]:
    """Per quantity: the least-squares slope over the samples from step ``warmup`` on (at
    least the first is left out), per ``per`` steps, as a share of the first of them (0
    where that is 0)."""
    kept = [s for s in samples[1:] if s[0] >= warmup]
    if len(kept) < 2:
        return {}
    xs = [x for x, _ in kept]
    out = {}
    for q in QUANTITIES:
        ys = [s[q] for _, s in kept]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        out[q] = slope * per / ys[0] if ys[0] else 0.0
    return out


def p99(times: list[float]) -> float:
    return sorted(times)[int(0.99 * (len(times) - 1))]


def shop(work: Path, ticks: int, every: int) -> tuple[list[tuple[int, dict[str, float]]], list[float],
                                                     list[dict[str, float]], list[tuple[int, float]], bool]:
    """examples/shop as ``dbt-stream serve`` runs it: a local broker, ``dbt build``, then
    ``ticks`` ticks of serve's loop (a new frontier, one advance) after each round of shop
    events (20 orders, their payments, customer and product changes, all kept: the data
    grows). Returns the samples, the tick times and their splits (``TickReport.split``:
    read, the pipeline's spark / driver / write, outputs, commit, publish), what the broker
    alone takes to serve a tick's read at each sample (:func:`broker_fetch`), and whether
    revenue_by_category equals DuckDB's answer over every event sent. Starts this
    process's Spark (with its catalog in the project, as serve's); the events are made,
    sent and remembered by a process of their own (:func:`_feed`), so what this process
    holds is the engine's."""
    from devkit.kafka import create_topics
    from devkit.shop import TOPICS
    from dbt_incremental_stream.connectors.broker import LocalBroker
    from dbt_incremental_stream.connectors.kafka import KafkaSettings, KafkaTopics
    from dbt_incremental_stream.project import Project
    from examples.demo import SINK, same_as_batch

    project_dir = work / "shop"
    shutil.copytree(ROOT / "examples" / "shop", project_dir, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    state = project_dir / "stream_state"
    with LocalBroker() as bootstrap:
        create_topics(bootstrap, *TOPICS, SINK)
        spawn = multiprocessing.get_context("spawn")  # not a fork of a process that runs a JVM
        feed, its_end = spawn.Pipe()
        feeder = spawn.Process(target=_feed, args=(bootstrap, its_end), daemon=True)
        feeder.start()

        def ask(what: str | int) -> Any:
            feed.send(what)
            return feed.recv()

        ask(200)
        subprocess.run([str(Path(sys.executable).parent / "dbt"), "build", "--quiet"], cwd=project_dir, check=True,
                       env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap})
        os.chdir(project_dir)  # the catalog (metastore_db/) is where dbt has it
        spark = session("local[2]", hive=True)
        project = Project(spark, str(state), kafka=KafkaSettings.from_profile({"bootstrap_servers": bootstrap}),
                          max_records=5000)
        probe = KafkaTopics(project.inputs.kafka)
        samples, times, splits, broker = [(0, sample(spark, state))], [], [], []
        for tick in range(1, ticks + 1):
            ask(20)
            before = {rel: dict(parts) for rel, parts in project.inputs.offsets.items()}
            started = time.perf_counter()
            project.new_frontier()
            project.advance()
            times.append(time.perf_counter() - started)
            splits.append(project.last.split)
            if tick % every == 0:
                broker.append((tick, broker_fetch(probe, project.streams, before)))
                samples.append((tick, sample(spark, state)))
                print(f"  shop tick {tick}: {fmt(samples[-1][1])}, p50 {statistics.median(times[-every:]):.3f} s, "
                      f"broker fetch {broker[-1][1]:.3f} s", file=sys.stderr, flush=True)
        probe.close()
        ok = same_as_batch(spark, ask("answer"))
        ask("stop")
        feeder.join()
        project.close()
    return samples, times, splits, broker, ok


def broker_fetch(probe: Any, streams: dict[str, Any], offsets: dict[str, dict[int, int]], repeat: int = 5) -> float:
    """The median time of ``repeat`` fetches of the sources' records from ``offsets`` (where
    the last tick started) to their end, by a consumer of its own: the Kafka requests of
    that tick's read, with no engine around them. The local broker's cost per request
    grows with the batches a partition holds (it keeps no offset index), so this separates
    what the broker takes from what the tick adds."""
    wanted = {rel: (streams[rel], parts) for rel, parts in offsets.items() if rel in streams}
    spent = []
    for _ in range(repeat):
        started = time.perf_counter()
        probe.fetch(wanted, 10 ** 9)
        spent.append(time.perf_counter() - started)
    return statistics.median(spent)


def _feed(bootstrap: str, asks: Any) -> None:
    """Shop events, sent to ``bootstrap`` as the connection ``asks`` says: a round of that
    many orders, DuckDB's revenue_by_category over everything sent (``"answer"``), or
    ``"stop"``; each answered."""
    from examples.demo import Feed, batch_answer

    feed = Feed(bootstrap)
    while (what := asks.recv()) != "stop":
        asks.send(batch_answer(feed) if what == "answer" else feed.send(orders=what))
    asks.send(None)


def table(parts: list[tuple[str, list[tuple[int, dict[str, float]]], int, int]]) -> None:
    """Per part (title, samples, steps per growth, warm-up): first and last sample, growth."""
    print("| quantity | " + " | ".join(f"{t}: first | last | growth per {per:,} after {w}" for t, _, per, w in parts)
          + " |")
    print("|---|" + "---|---|---|" * len(parts))
    grown = [growth(samples, per, w) for _, samples, per, w in parts]
    for q in QUANTITIES:
        cells = [f"{samples[1][1][q]:.1f} | {samples[-1][1][q]:.1f} | {g.get(q, 0):+.1%}"
                 for (_, samples, _, _), g in zip(parts, grown)]
        print(f"| {q} | " + " | ".join(cells) + " |")


def tails(title: str, times: list[float], window: int, warmup: int) -> None:
    """p50 and p99 of the first ``window`` ticks, of the ``window`` after ``warmup`` ticks
    (the start growth is measured from) and of the last ``window``; the last against both."""
    window = min(window, len(times))
    first, start, last = times[:window], times[warmup:warmup + window] or times[:window], times[-window:]
    print(f"{title}: tick p50 {statistics.median(first):.3f} → {statistics.median(start):.3f} (after {warmup}) → "
          f"{statistics.median(last):.3f} s; p99 of the first {window} {p99(first):.3f} s, after {warmup} "
          f"{p99(start):.3f} s, of the last {window} {p99(last):.3f} s ({p99(last) / p99(first):.2f}x the first, "
          f"{p99(last) / p99(start):.2f}x after {warmup})")


def slowest(times: list[float], splits: list[dict[str, float]], window: int) -> None:
    """Where the slowest 1% of the first and last ``window`` ticks went, beside the median
    tick's: the mean of each part of their splits, and of what no part holds (other)."""
    window = min(window, len(times))
    parts = sorted({p for s in splits for p in s})
    print("| ticks | which | total | " + " | ".join(parts) + " | other |")
    print("|---|---|---|" + "---|" * (len(parts) + 1))
    for name, span in (("first", range(window)), ("last", range(len(times) - window, len(times)))):
        ranked = sorted(span, key=lambda i: times[i])
        for which, chosen in (("median", [ranked[len(ranked) // 2]]),
                              ("slowest 1%", ranked[-max(1, len(ranked) // 100):])):
            mean = {p: statistics.fmean(splits[i].get(p, 0.0) for i in chosen) for p in parts}
            other = statistics.fmean(times[i] - sum(splits[i].values()) for i in chosen)
            print(f"| {name} {window} | {which} | {statistics.fmean(times[i] for i in chosen):.3f} | "
                  + " | ".join(f"{mean[p]:.3f}" for p in parts) + f" | {other:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=2000)
    parser.add_argument("--pipelines", type=int, default=100)
    parser.add_argument("--shop-ticks", type=int, default=0, help="ticks of examples/shop through Kafka, as serve "
                                                                  "runs it (default 0: none); run first")
    parser.add_argument("--every", type=int, default=100, help="sample every this many ticks (a tenth for pipelines)")
    parser.add_argument("--warmup", type=int, default=1000, help="ticks before growth is measured (default 1000, "
                                                                 "at most half the ticks)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    parts, timings, out = [], [], Path(__file__).parent / "results"
    try:
        if args.shop_ticks:
            shop_samples, shop_times, shop_splits, broker, ok = shop(work, args.shop_ticks, args.every)
            parts.append(("shop project", shop_samples, 1000, min(args.warmup, args.shop_ticks // 2)))
            timings.append(("shop project", shop_times))
            timings.append(("shop project less its Kafka read",
                            [t - s.get("read", 0.0) for t, s in zip(shop_times, shop_splits)]))
        spark = session("local[2]")
        if args.ticks:
            tick_samples, times = ticking(spark, work, args.ticks, args.every)
            parts.append(("ticks", tick_samples, 1000, min(args.warmup, args.ticks // 2)))
            timings.append(("ticks", times))
        if args.pipelines:
            parts.append(("pipelines", pipelines(spark, work, args.pipelines, max(1, args.every // 10)), 100, 1))
    finally:
        os.chdir(ROOT)
        shutil.rmtree(work, ignore_errors=True)
    out.mkdir(exist_ok=True)
    (out / "soak.json").write_text(json.dumps({"parts": [(t, s) for t, s, _, _ in parts], "times": timings,
                                               **({"shop splits": shop_splits, "broker fetch": broker}
                                                  if args.shop_ticks else {})}))
    print(f"\n{args.shop_ticks} ticks of the shop project; {args.ticks} ticks of 20 changed orders; "
          f"{args.pipelines} pipelines opened, ticked 3 times, closed\n")
    table(parts)
    print()
    for title, times in timings:
        tails(title, times, args.every, min(args.warmup, len(times) // 2))
    if args.shop_ticks:
        print("\nshop project, where its ticks went (seconds):")
        slowest(shop_times, shop_splits, args.every)
        print("\nshop project, its read against the broker's (the same requests, no engine), medians of the "
              f"{args.every} ticks up to each sample, in ms:")
        print("| tick | read | broker fetch |")
        print("|---|---|---|")
        for tick, spent in broker:
            window = shop_splits[tick - args.every:tick]
            print(f"| {tick} | {1000 * statistics.median(s.get('read', 0.0) for s in window):.1f} | "
                  f"{1000 * spent:.1f} |")
        print(f"shop project: revenue_by_category equals DuckDB's batch answer over every event sent: "
              f"{'yes' if ok else 'NO'}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(parts), figsize=(5.5 * len(parts), 3.8), squeeze=False)
    for ax, (title, samples, _, _) in zip(axes[0], parts):
        base = samples[1][1] if len(samples) > 1 else samples[0][1]
        for q in ("heap MiB", "RSS MiB", "JVM RSS MiB", "fds", "maps", "state MiB"):
            if base[q]:
                ax.plot([x for x, _ in samples[1:]], [s[q] / base[q] for _, s in samples[1:]], marker=".", label=q)
        ax.set_xlabel("pipelines closed" if title == "pipelines" else "tick")
        ax.set_title(title)
        ax.set_ylabel("relative to the first sample")
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(out / "soak.png", dpi=80)
    print(f"plot: {out / 'soak.png'}")


if __name__ == "__main__":
    main()
