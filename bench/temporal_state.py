"""State size over a long run of a sliding window: rows that leave every window for good
leave the state when the source expires them; kept, the state grows with all input so far.

    python bench/temporal_state.py [--ticks 300] [--events 500] [--every 25]

Two pipelines in one process get the same ticks: each tick is one minute later and brings
``--events`` events stamped up to five minutes back (2% of them two hours late, already
out of every window) and deletes 1% of earlier ones. Both maintain the same views (the
last hour's events and a per-user count over the last 30 minutes); the source of one is
declared ``expire``. Every ``--every`` ticks it prints, for both, the rows of the source's
retained input, the rows in arrangements, the bytes under the state location and the
median tick, and checks the views are equal. Saves bench/results/temporal_state.png.
"""
from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dbt_incremental_stream.runtime.pipeline import Pipeline  # noqa: E402
from dbt_incremental_stream.runtime.spark.session import session  # noqa: E402

VIEWS = {
    "last_hour": "SELECT id, u, v FROM events WHERE ts > current_timestamp() - INTERVAL 1 HOUR",
    "recent": "SELECT u, COUNT(*) AS n, SUM(v) AS s FROM events "
              "WHERE ts BETWEEN now() - INTERVAL 30 MINUTES AND now() GROUP BY u",
}
SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us")), ("u", pa.int32()), ("v", pa.int64()),
                    ("_w", pa.int64())])


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--events", type=int, default=500, help="events per tick (one minute)")
    parser.add_argument("--every", type=int, default=25, help="report every N ticks")
    args = parser.parse_args()

    spark = session("local[2]", {"spark.sql.shuffle.partitions": "2"})
    work = Path(tempfile.mkdtemp(prefix="temporal-state-"))
    pipes = {}
    for name, expire in (("expire", True), ("keep", False)):
        p = Pipeline(spark, str(work / name))
        p.add_source("events", "id BIGINT, ts TIMESTAMP, u INT, v BIGINT", expire=expire)
        for view, sql in VIEWS.items():
            p.add_view(view, sql)
        pipes[name] = p

    rng = random.Random(7)
    t0 = datetime(2026, 1, 1)
    live: list[tuple] = []
    next_id = 0
    seconds: dict[str, list[float]] = {n: [] for n in pipes}
    samples: list[tuple[int, dict[str, tuple[int, int, int]]]] = []
    header = f"{'tick':>5} {'input rows':>10} | " + " | ".join(
        f"{n + ' state rows':>18} {'arranged':>9} {'MiB':>6} {'tick p50':>8}" for n in pipes)
    print(header)
    for tick in range(1, args.ticks + 1):
        now = t0 + timedelta(minutes=tick)
        rows = []
        for _ in range(args.events):
            late = rng.random() < 0.02
            ts = now - (timedelta(hours=2) if late else timedelta(seconds=rng.randrange(300)))
            row = (next_id, ts, rng.randrange(50), rng.randrange(1000))
            next_id += 1
            rows.append(row + (1,))
            live.append(row)
        for _ in range(args.events // 100):
            gone = live.pop(rng.randrange(len(live)))
            rows.append(gone + (-1,))
        delta = pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)
        for name, p in pipes.items():
            started = time.perf_counter()
            p.step({"events": delta}, now=now)
            seconds[name].append(time.perf_counter() - started)
        if tick % args.every == 0 or tick == args.ticks:
            sizes = {}
            for name, p in pipes.items():
                arranged = sum(a.rows for arrs in p.store.arrangements.values() for a in arrs.values())
                sizes[name] = (p.snapshot("events").count(), arranged, disk_bytes(work / name))
            for view in VIEWS:
                a, b = (sorted(pipes[n].snapshot(view).collect()) for n in pipes)
                if a != b:
                    print(f"view {view} differs at tick {tick}")
                    return 1
            samples.append((tick, sizes))
            print(f"{tick:>5} {len(live):>10} | " + " | ".join(
                f"{sizes[n][0]:>18,} {sizes[n][1]:>9,} {sizes[n][2] / 2**20:>6.1f} "
                f"{statistics.median(seconds[n][-args.every:]):>8.3f}" for n in pipes))
    for p in pipes.values():
        p.close()
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name in pipes:
        ax.plot([t for t, _ in samples], [s[name][0] for _, s in samples], marker="o", label=f"source {name}")
    ax.set_xlabel("tick (one minute each)")
    ax.set_ylabel("rows of the source's retained input")
    ax.set_title("State over a long run of a one-hour sliding window")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "temporal_state.png")
    print(f"plot: {out / 'temporal_state.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
