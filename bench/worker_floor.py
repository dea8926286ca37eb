"""The floor of a trivial one-stage Python job in local[2]: why it is erratic, what steadies it.

    python bench/worker_floor.py [--jobs 30] [--configs "spark defaults,reuse off"] [--gaps 0,2]
                                 [--full] [--serial]

Each configuration runs in a fresh process (settings fixed at JVM start take effect): a
session from ``runtime.spark.session.session("local[2]", conf)``, a tiny input (by default a
1-row Arrow table through ``createDataFrame``, as the engine builds its deltas: 1 task), 5
warm-up jobs, then blocks of jobs with a given idle gap (sleep) before each. A job is
``df.mapInArrow(identity, schema).collect()``; the function also emits one row carrying
its worker's pid, so each job reports its Python tasks, the workers they ran in and how
many of those were never seen before (freshly forked). Right after each Python job a
JVM-only one-stage job (``spark.range(1, numPartitions=1).collect()``) is timed as a
control: when both are slow the machine is (CPU contention), when only the Python one is,
its workers are. The 1-minute load average is recorded per block.

Spark closes every pooled Python worker once none has been released for 60 s (checked
every 10 s, so after 60-70 s idle; a fixed constant, no setting), so the 70 s gap blocks
show what any job after such a pause pays. They take most of the time, so they run in
concurrent processes started 25 s apart, whose jobs then do not overlap (``--serial``: one
after another). Defaults take ~10 minutes on 2 cores (more when the machine is busy);
``--full`` runs every gap of every configuration with ``--jobs`` jobs (over an hour).
Prints a table and saves bench/results/worker_floor.png (and .json).

Configurations marked "bench-side" are not plain session settings. "preload daemon" starts
Spark's Python daemon through this file (``spark.python.daemon.module``): it imports
pyarrow and PySpark's worker modules before it forks workers, and the session's
SparkFiles directory is put on the daemon's PYTHONPATH so a new worker need not call
``importlib.invalidate_caches()`` (on Python < 3.12 that re-reads the directory of
pyspark.zip for each of its ~16 cached zip importers). "keep-alive" runs a 1-task Python
job from a driver thread whenever the session has been idle for 30 s.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

#: Spark's own defaults for every key a configuration below varies, so that "spark
#: defaults" stays Spark's defaults whatever TICK_CONF sets
SPARK_DEFAULTS = {
    "spark.python.worker.reuse": "true",
    "spark.python.use.daemon": "true",
    "spark.python.worker.faulthandler.enabled": "false",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
}

LONG_GAP = 70.0  # > the 60 s idle timeout + the 10 s period of the thread enforcing it

#: name -> "conf" (over SPARK_DEFAULTS; None: TICK_CONF untouched), "gaps": [[gap seconds,
#: jobs], ...] at default size (jobs None: --jobs; --full: every block --jobs), "input":
#: arrow (1 row, 1 partition), rows (createDataFrame of a Python list), range2, range8
CONFIGS: dict[str, dict] = {
    "spark defaults": {"conf": {}, "gaps": [[0, None], [2, 6], [10, 3], [LONG_GAP, 2]]},
    "TICK_CONF as shipped": {"conf": None, "gaps": [[0, None]]},
    "reuse off": {"conf": {"spark.python.worker.reuse": "false"}, "gaps": [[0, 10]]},
    "no daemon": {"conf": {"spark.python.use.daemon": "false"}, "gaps": [[0, 6]]},
    "faulthandler on": {"conf": {"spark.python.worker.faulthandler.enabled": "true"}, "gaps": [[0, 20]]},
    "arrow batch 100 rows": {"conf": {"spark.sql.execution.arrow.maxRecordsPerBatch": "100"},
                             "gaps": [[0, 20]]},
    "rows input (Python list)": {"conf": {}, "input": "rows", "gaps": [[0, 20]]},
    "range input 2 partitions": {"conf": {}, "input": "range2", "gaps": [[0, 20]]},
    "range input 8 partitions": {"conf": {}, "input": "range8", "gaps": [[0, 20]]},
    "preload daemon + reuse off (bench-side)": {"conf": {"spark.python.worker.reuse": "false"},
                                               "preload": True, "gaps": [[0, 10]]},
    "preload daemon (bench-side)": {"conf": {}, "preload": True, "gaps": [[LONG_GAP, 2]]},
    "keep-alive 30 s (bench-side)": {"conf": {}, "keepalive": 30.0, "gaps": [[LONG_GAP, 2]]},
}

#: what a worker of a mapInArrow job imports after the fork (measured: not pandas)
PRELOAD = ("pyarrow", "pyspark.worker", "pyspark.sql.pandas.serializers", "pyspark.sql.pandas.types",
           "pyspark.cloudpickle")


def preloading_daemon() -> None:
    """Spark's Python daemon with the worker's imports done once, before any fork: a
    forked worker starts with them in memory instead of importing them (pyspark's from
    pyspark.zip, compiled from source: a zip holds no .pyc). Spark imports after the fork
    on purpose (pyarrow or numpy may start threads, which a fork does not copy); harmless
    for this benchmark's trivial workers."""
    import gc
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    gc.freeze()  # keep the collector off the inherited objects (copy-on-write)
    from pyspark.daemon import manager

    manager()


def child(spec: dict) -> dict:
    """One configuration, in this process."""
    sys.path.insert(0, str(HERE.parent))
    import pyarrow as pa

    from dbt_incremental_stream.runtime.spark.session import session

    conf = spec["conf"]
    if spec["preload"]:
        # the daemon is `python -m worker_floor`: this directory must be on its path
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
        conf = {**(conf or {}), "spark.python.daemon.module": "worker_floor"}
    started = time.perf_counter()
    spark = session("local[2]", conf)
    start_s = time.perf_counter() - started
    if spec["preload"]:
        from pyspark import SparkFiles

        # before any Python function exists: their environment is the daemon's
        spark.sparkContext.environment["PYTHONPATH"] = SparkFiles.getRootDirectory()
    # all nullable, like the pid batch the function adds
    df = {"arrow": lambda: spark.createDataFrame(pa.table({"x": pa.array([1], pa.int64())})),
          "rows": lambda: spark.createDataFrame([(1,)], "x long"),
          "range2": lambda: spark.range(1, numPartitions=2).selectExpr("NULLIF(id, -1) AS x"),
          "range8": lambda: spark.range(1, numPartitions=8).selectExpr("NULLIF(id, -1) AS x")}[spec["input"]]()
    jvm_df = spark.range(1, numPartitions=1)

    def identity(batches):
        import os

        import pyarrow as pa

        for batch in batches:
            yield batch
        yield pa.RecordBatch.from_arrays([pa.array([-os.getpid()], pa.int64())], ["x"])

    seen: set[int] = set()
    lock = threading.Lock()
    last = [time.monotonic()]

    def job() -> tuple[float, float, int, int, int]:
        with lock:
            t0 = time.perf_counter()
            rows = df.mapInArrow(identity, df.schema).collect()
            py = time.perf_counter() - t0
            t0 = time.perf_counter()
            jvm_df.collect()
            jvm = time.perf_counter() - t0
            last[0] = time.monotonic()
        tasks = [-r.x for r in rows if r.x < 0]
        pids = set(tasks)
        fresh = len(pids - seen)
        seen.update(pids)
        return py, jvm, len(tasks), len(pids), fresh

    if spec["keepalive"]:
        def keepalive() -> None:
            while True:
                time.sleep(1)
                with lock:
                    if time.monotonic() - last[0] >= spec["keepalive"]:
                        df.mapInArrow(identity, df.schema).collect()
                        last[0] = time.monotonic()

        threading.Thread(target=keepalive, daemon=True).start()

    warmup = [job() for _ in range(spec["warmup"])]
    blocks = []
    for gap, jobs in spec["gaps"]:
        load = os.getloadavg()[0]
        runs = []
        for _ in range(jobs):
            time.sleep(gap)
            runs.append(job())
        blocks.append({"gap": gap, "runs": runs, "load": (load + os.getloadavg()[0]) / 2})
    spark.stop()
    return {"start_s": start_s, "warmup": warmup, "blocks": blocks}


def pct(values: list[float], q: float) -> float:
    """The q-quantile, nearest rank (p90 of 2 values is the larger)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def specs(args: argparse.Namespace) -> list[dict]:
    """One child process per configuration and kind of gap (short, or >= 60 s)."""
    out = []
    wanted = {float(g) for g in args.gaps.split(",")} if args.gaps else None
    for name in (n.strip() for n in args.configs.split(",")):
        c = CONFIGS[name]
        conf = None if c["conf"] is None else {**SPARK_DEFAULTS, **c["conf"]}
        gaps = [[g, args.jobs if (n is None or args.full) else n] for g, n in c["gaps"]
                if wanted is None or g in wanted]
        base = {"name": name, "conf": conf, "input": c.get("input", "arrow"), "preload": c.get("preload", False),
                "keepalive": c.get("keepalive"), "warmup": args.warmup}
        for long in (False, True):
            part = [[g, n] for g, n in gaps if (g >= 60) == long]
            if part:
                out.append({**base, "gaps": part, "long": long})
    return out


def run(spec: dict, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--child", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=log, text=True,
                            env={**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)})


def collect(proc: subprocess.Popen, spec: dict) -> dict:
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{spec['name']} failed (exit {proc.returncode}); see bench/results/worker_floor.log")
    return {**spec, **json.loads(out.strip().splitlines()[-1])}


def main() -> None:
    if os.environ.get("PYTHON_WORKER_FACTORY_SECRET") and __name__ == "__main__":
        preloading_daemon()  # started by Spark as spark.python.daemon.module
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30, help="jobs per gap-0 block (every block with --full)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--gaps", help="only these gaps, e.g. 0,2")
    parser.add_argument("--full", action="store_true", help="--jobs jobs in every block")
    parser.add_argument("--serial", action="store_true", help="long-gap processes one after another")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    RESULTS.mkdir(exist_ok=True)
    todo = specs(args)
    began = time.perf_counter()
    load = os.getloadavg()[0]
    results = []
    with open(RESULTS / "worker_floor.log", "w") as log:
        for spec in (s for s in todo if not s["long"]):
            results.append(collect(run(spec, log), spec))
            print(f"  {spec['name']}: done at {time.perf_counter() - began:.0f} s", file=sys.stderr)
        long = [s for s in todo if s["long"]]
        if args.serial:
            results += [collect(run(spec, log), spec) for spec in long]
        else:
            procs = []
            for i, spec in enumerate(long):
                if i:
                    time.sleep(25)
                procs.append((run(spec, log), spec))
            results += [collect(p, s) for p, s in procs]
        if long:
            print(f"  long gaps: done at {time.perf_counter() - began:.0f} s", file=sys.stderr)
    (RESULTS / "worker_floor.json").write_text(json.dumps(results, indent=1))
    report(results, time.perf_counter() - began, (load, os.getloadavg()[0]))
    plot(results)


def tw(runs: list) -> str:
    """Median tasks / workers per job."""
    return f"{statistics.median(x[2] for x in runs):.0f} / {statistics.median(x[3] for x in runs):.0f}"


def report(results: list[dict], elapsed: float, load: tuple[float, float]) -> None:
    print(f"\nTrivial mapInArrow job, local[2], {len(results)} processes, {elapsed / 60:.1f} min, 1-minute "
          f"load average {load[0]:.1f} at start, {load[1]:.1f} at end ({os.cpu_count()} CPUs). Seconds per job; "
          "'JVM-only' = a 1-task JVM job right after each; 'tasks / workers' = Python tasks per job / "
          "distinct Python workers they ran in; 'fresh' = workers forked for the job, mean per job.\n")
    print("| configuration | gap (s) | jobs | p50 | p90 | max | JVM-only p50 | tasks / workers | fresh workers/job "
          "| load 1 min |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if not r["long"]:
            w = r["warmup"]
            print(f"| {r['name']} | warm-up: job 1 (session start {r['start_s']:.1f} s) | 1 | {w[0][0]:.2f} | | | "
                  f"{w[0][1]:.2f} | {w[0][2]} / {w[0][3]} | {w[0][4]} | |")
            rest = w[1:]
            if rest:
                py = [x[0] for x in rest]
                print(f"| {r['name']} | warm-up: jobs 2-{len(w)} | {len(rest)} | {statistics.median(py):.2f} | "
                      f"{pct(py, .9):.2f} | {max(py):.2f} | {statistics.median(x[1] for x in rest):.2f} | "
                      f"{tw(rest)} | {statistics.mean(x[4] for x in rest):.1f} | |")
        for b in r["blocks"]:
            runs = b["runs"]
            py = [x[0] for x in runs]
            print(f"| {r['name']} | {b['gap']:g} | {len(runs)} | {statistics.median(py):.2f} | {pct(py, .9):.2f} | "
                  f"{max(py):.2f} | {statistics.median(x[1] for x in runs):.2f} | {tw(runs)} | "
                  f"{statistics.mean(x[4] for x in runs):.1f} | {b['load']:.1f} |")


def plot(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(f"{r['name']}, gap {b['gap']:g} s", b["runs"]) for r in results for b in r["blocks"]]
    fig, ax = plt.subplots(figsize=(10, 0.38 * len(rows) + 1.5))
    for i, (_, runs) in enumerate(rows):
        py = [x[0] for x in runs]
        jitter = [i + 0.25 * ((k * 0.618) % 1 - 0.5) for k in range(len(py))]
        ax.scatter(py, jitter, s=14, c=["tab:red" if x[4] else "tab:blue" for x in runs], alpha=.7, lw=0)
        ax.scatter([statistics.median(x[1] for x in runs)], [i], marker="|", s=200, c="gray")
        ax.plot([statistics.median(py)] * 2, [i - .35, i + .35], c="k", lw=2)
    ax.set_yticks(range(len(rows)), [n for n, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("seconds per trivial mapInArrow job (black: p50; gray: JVM-only job p50; "
                  "red: the job forked a fresh Python worker)", fontsize=8)
    ax.grid(axis="x", which="both", alpha=.3)
    fig.tight_layout()
    out = RESULTS / "worker_floor.png"
    fig.savefig(out, dpi=120)
    print(f"\nsaved {out}")


if __name__ == "__main__":
    main()
