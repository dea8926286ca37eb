"""The floor of a trivial one-stage Python job in local[2]: why it is erratic, what steadies it.

    python bench/worker_floor.py [--jobs 30] [--configs "spark defaults,reuse off"] [--full] [--serial]

Each configuration runs in a fresh process (settings fixed at JVM start take effect): a
session from ``runtime.session.session("local[2]", conf)``, a tiny input (by default one row
from ``createDataFrame``), 5 warm-up jobs, then blocks of jobs with a given idle gap (sleep)
before each. A job is ``df.mapInArrow(identity, schema).collect()``; the function also emits
one row carrying its worker's pid, so each job reports its task count and how many of its
Python workers were never seen before (freshly forked). Right after each Python job a
JVM-only one-stage job (``spark.range(1, numPartitions=1).collect()``) is timed too, as a
control: when both are slow, the machine is (CPU contention), when only the Python one is,
the Python workers are. The 1-minute load average is recorded per block.

The 70 s gap blocks (Spark closes pooled Python workers after 60-70 s of idleness, see the
report printed at the end) take most of the time; they run in concurrent processes
started 25 s apart so their jobs do not overlap (``--serial``: one after another).
Defaults take ~8 minutes on 2 cores; ``--full`` runs every gap of every configuration
with ``--jobs`` jobs (over an hour). Prints a table and saves bench/results/worker_floor.png.

Configurations marked "bench-side" are not session settings: "preload daemon" starts
Spark's Python daemon through this file (``spark.python.daemon.module``), which imports
pyarrow, pandas and PySpark's worker modules before it forks workers; "keep-alive" runs a
1-task Python job from a driver thread whenever the session has been idle for 45 s.
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

LONG_GAP = 70.0  # > 60 s idle timeout + the 10 s period of the thread that enforces it

#: name -> settings; "gaps": [[gap seconds, jobs], ...] at default size (``--full``: every
#: gap with --jobs jobs); "input": local (createDataFrame, 1 row), range1, range8
CONFIGS: dict[str, dict] = {
    "spark defaults": {"conf": {}, "gaps": [[0, None], [2, 8], [10, 3], [LONG_GAP, 2]]},
    "TICK_CONF as shipped": {"conf": None, "gaps": [[0, None], [2, 8]]},
    "reuse off": {"conf": {"spark.python.worker.reuse": "false"}, "gaps": [[0, 15]]},
    "no daemon": {"conf": {"spark.python.use.daemon": "false"}, "gaps": [[0, 15]]},
    "faulthandler on": {"conf": {"spark.python.worker.faulthandler.enabled": "true"}, "gaps": [[0, None]]},
    "arrow batch 100 rows": {"conf": {"spark.sql.execution.arrow.maxRecordsPerBatch": "100"},
                             "gaps": [[0, None]]},
    "default.parallelism 1": {"conf": {"spark.default.parallelism": "1"}, "gaps": [[0, None]]},
    "range input 1 partition": {"conf": {}, "input": "range1", "gaps": [[0, None]]},
    "range input 8 partitions": {"conf": {}, "input": "range8", "gaps": [[0, None]]},
    "preload daemon (bench-side)": {"conf": {}, "preload": True, "gaps": [[0, None], [LONG_GAP, 2]]},
    "keep-alive 45 s (bench-side)": {"conf": {}, "keepalive": 45.0, "gaps": [[LONG_GAP, 2]]},
}

PRELOAD = ("pyarrow", "pandas", "pyspark.worker", "pyspark.sql.pandas.serializers",
           "pyspark.sql.pandas.types", "pyspark.cloudpickle")


def preloading_daemon() -> None:
    """Spark's Python daemon with the worker's heavy imports done once, before any fork:
    a forked worker then starts with them in memory (copy-on-write) instead of importing
    them itself. (Spark imports after the fork on purpose: pyarrow or numpy may start
    threads, and a fork copies none; harmless for this benchmark's workers.)"""
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    from pyspark.daemon import manager

    manager()


def child(spec: dict) -> dict:
    """One configuration, in this process."""
    sys.path.insert(0, str(HERE.parent))
    import pyarrow as pa

    from dbt_incremental_stream.runtime.session import session

    if spec["preload"]:
        # the daemon is `python -m worker_floor`: this directory must be on its path
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    started = time.perf_counter()
    spark = session("local[2]", spec["conf"])
    start_s = time.perf_counter() - started
    df = {"local": lambda: spark.createDataFrame([(1,)], "x long"),
          # nullable like the local one (the pid batch is)
          "range1": lambda: spark.range(1, numPartitions=1).selectExpr("NULLIF(id, -1) AS x"),
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
        tiny = spark.range(1, numPartitions=1)

        def keepalive() -> None:
            while True:
                time.sleep(1)
                with lock:
                    if time.monotonic() - last[0] >= spec["keepalive"]:
                        tiny.mapInArrow(lambda it: it, tiny.schema).collect()
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
    out = []
    for name in args.configs.split(","):
        c = CONFIGS[name.strip()]
        conf = None if c["conf"] is None else {**SPARK_DEFAULTS, **c["conf"]}
        gaps = [[g, args.jobs if (n is None or args.full) else n] for g, n in c["gaps"]]
        if args.gaps:
            wanted = {float(g) for g in args.gaps.split(",")}
            gaps = [[g, n] for g, n in gaps if g in wanted]
        if not gaps:
            continue
        base = {"name": name.strip(), "conf": conf, "input": c.get("input", "local"),
                "preload": c.get("preload", False), "keepalive": c.get("keepalive"), "warmup": args.warmup}
        short = [[g, n] for g, n in gaps if g < 60]
        long = [[g, n] for g, n in gaps if g >= 60]
        if short:
            out.append({**base, "gaps": short, "long": False})
        if long:
            out.append({**base, "gaps": long, "long": True})
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
    results = []
    with open(RESULTS / "worker_floor.log", "w") as log:
        for spec in (s for s in todo if not s["long"]):
            results.append(collect(run(spec, log), spec))
            print(f"  {spec['name']}: done at {time.perf_counter() - began:.0f} s", file=sys.stderr)
        long = [s for s in todo if s["long"]]
        if args.serial:
            for spec in long:
                results.append(collect(run(spec, log), spec))
        else:
            procs = []
            for i, spec in enumerate(long):
                if i:
                    time.sleep(25)
                procs.append((run(spec, log), spec))
            results += [collect(p, s) for p, s in procs]
        print(f"  long gaps: done at {time.perf_counter() - began:.0f} s", file=sys.stderr)
    (RESULTS / "worker_floor.json").write_text(json.dumps(results, indent=1))
    report(results, time.perf_counter() - began)
    plot(results)


def report(results: list[dict], elapsed: float) -> None:
    print(f"\nTrivial mapInArrow job, local[2], {len(results)} processes, {elapsed / 60:.1f} min. "
          "Seconds per job; 'JVM-only' = a 1-task JVM job right after each; 'fresh' = Python "
          "workers forked for the job (mean per job); 'tasks / workers' = Python tasks per job / "
          "distinct Python workers they ran in.\n")
    print("| configuration | gap (s) | jobs | p50 | p90 | max | JVM-only p50 | tasks / workers | fresh workers/job | load 1 min |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if not r["long"]:
            w = r["warmup"]
            print(f"| {r['name']} | warm-up: job 1 (after start {r['start_s']:.1f} s) | 1 | {w[0][0]:.2f} | | | "
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
                  f"{max(py):.2f} | {statistics.median(x[1] for x in runs):.2f} | "
                  f"{tw(runs)} | {statistics.mean(x[4] for x in runs):.1f} | "
                  f"{b['load']:.1f} |")


def tw(runs: list) -> str:
    """Median tasks / workers per job."""
    return f"{statistics.median(x[2] for x in runs):.0f} / {statistics.median(x[3] for x in runs):.0f}"


def plot(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(f"{r['name']}, gap {b['gap']:g} s", b["runs"]) for r in results for b in r["blocks"]]
    fig, ax = plt.subplots(figsize=(10, 0.38 * len(rows) + 1.5))
    for i, (_, runs) in enumerate(rows):
        py = [x[0] for x in runs]
        fresh = [x[4] > 0 for x in runs]
        jitter = [i + 0.25 * ((k * 0.618) % 1 - 0.5) for k in range(len(py))]
        ax.scatter(py, jitter, s=14, c=["tab:red" if f else "tab:blue" for f in fresh], alpha=.7, lw=0)
        ax.scatter([statistics.median(x[1] for x in runs)], [i], marker="|", s=200, c="gray")
        ax.plot([statistics.median(py)] * 2, [i - .35, i + .35], c="k", lw=2)
    ax.set_yticks(range(len(rows)), [n for n, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("seconds per trivial mapInArrow job (black: p50; gray: JVM-only job p50; "
                  "red: job forked a fresh Python worker)", fontsize=8)
    ax.grid(axis="x", which="both", alpha=.3)
    fig.tight_layout()
    out = RESULTS / "worker_floor.png"
    fig.savefig(out, dpi=120)
    print(f"\nsaved {out}")


if __name__ == "__main__":
    main()
