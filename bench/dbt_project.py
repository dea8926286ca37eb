"""`dbt run` after a small change vs `dbt run --full-refresh`, for integration_tests/ and
examples/shop/: streaming models against the same models as batch tables, in one process
and one Spark session.

    python bench/dbt_project.py [--orders 20000] [--change 0.001] [--projects integration_tests,examples/shop]

Loads ``--orders`` orders (with customers, products and payments) into a local Kafka-protocol
broker, builds each project once, then produces a change of ``--change`` of the orders
(plus the customer and product updates that come with it) and times:

- ``dbt run`` of the streaming project (catches up: one tick for all models),
- ``dbt run --full-refresh`` (rebuilds every model's state from retained input),
- ``dbt run`` of the same models materialized as ``table`` (the batch baseline, reading the
  same input), whose results are compared with the streaming ones,
- for a project with seeds, ``dbt run`` of each after a 3-row change of its first seed (a
  row deleted, one changed, one added; ``dbt seed`` first, not timed).

Prints a table and saves bench/results/dbt_project.png.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyspark  # noqa: E402
import sqlglot  # noqa: E402
from dbt.cli.main import dbtRunner  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from sqlglot import exp  # noqa: E402

from dbt_incremental_stream.connectors.broker import LocalBroker  # noqa: E402
from dbt_incremental_stream.differential import compare  # noqa: E402
from devkit.kafka import create_topics, produce  # noqa: E402
from devkit.shop import TOPICS, ShopEvents  # noqa: E402


def marts(project: Path) -> list[str]:
    """The project's streaming views: marts without a materialization of their own."""
    return sorted(f.stem for f in (project / "models" / "marts").glob("*.sql") if "materialized" not in f.read_text())


def dbt(root: Path, *args: str) -> float:
    return dbt_models(root, *args)[0]


def dbt_models(root: Path, *args: str) -> tuple[float, dict[str, float]]:
    """The whole command's seconds, and each model's execution time as dbt reports it."""
    start = time.perf_counter()
    res = dbtRunner().invoke([*args, "--project-dir", str(root), "--profiles-dir", str(root), "--quiet"])
    if not res.success:
        raise SystemExit(f"dbt {' '.join(args)} failed in {root}: {res.exception or res.result}")
    return time.perf_counter() - start, {r.node.name: r.execution_time for r in getattr(res.result, "results", [])
                                         if r.node.resource_type == "model"}


def widest(project: Path) -> tuple[str, int] | None:
    """The streaming model that reads the most other streaming models (at least two), and how many."""
    views = set(marts(project))
    reads = {v: len(set(re.findall(r"ref\('(\w+)'\)", (project / "models" / "marts" / f"{v}.sql").read_text()))
                    & views) for v in views}
    best = max(reads, key=lambda v: (reads[v], v), default=None)
    return (best, reads[best]) if best is not None and reads[best] >= 2 else None


def load(bootstrap: str, events: ShopEvents, orders: int, per_round: int = 200) -> None:
    batches: dict[str, list] = {t: [] for t in TOPICS}
    while orders > 0:
        for topic, records in events.round(orders=min(per_round, orders)).items():
            batches[topic] += records
        orders -= per_round
    for topic, records in batches.items():
        produce(bootstrap, topic, records)


def bench_project(name: str, work: Path, bootstrap: str, events: ShopEvents, orders: int, change: float
                  ) -> list[tuple[str, str, float]]:
    """The timed runs of one project, streaming and batch over the same topics."""
    streaming, batch = work / name / "streaming", work / name / "batch"
    ignore = shutil.ignore_patterns("target", "logs", "stream_state", "metastore_db", "spark-warehouse", "*.py")
    shutil.copytree(ROOT / name, streaming, ignore=ignore)
    shutil.copytree(ROOT / name, batch, ignore=ignore)
    (batch / "dbt_project.yml").write_text((batch / "dbt_project.yml").read_text()
                                           .replace("+materialized: streaming_view", "+materialized: table"))
    for model in (batch / "models").rglob("*.sql"):
        model.write_text(model.read_text().replace("changelog_table", "table"))
    tag = Path(name).name  # each project's models in schemas of their own
    for kind, root in (("stream", streaming), ("batch", batch)):
        profile = (root / "profiles.yml").read_text().replace("schema: shop", f"schema: {tag}_{kind}")
        (root / "profiles.yml").write_text(re.sub(r"max_records_per_tick: \d+", "max_records_per_tick: 100000000",
                                                  profile))  # the load in one tick
    views = marts(streaming)
    first, streamed = dbt_models(streaming, "build")
    rows = [("initial dbt build (streaming; with seeds, tests and Spark's start)", first)]
    if (batch / "seeds").exists():
        dbt(batch, "seed")
    first, tables = dbt_models(batch, "run")
    rows.append(("initial dbt run of the models as tables (batch)", first))
    if (wide := widest(streaming)) is not None:
        model, ups = wide
        rows += [(f"first build of {model} ({ups} upstream models; streaming)", streamed[model]),
                 (f"first build of {model} as a table (batch)", tables[model])]
    rows.append(("dbt run, nothing new (streaming)", dbt(streaming, "run")))
    changed = max(1, int(orders * change))
    load(bootstrap, events, changed, per_round=changed)
    log = streaming / "logs" / "dbt.log"
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    rows.append((f"dbt run after a {change:.1%} change (streaming)", dbt(streaming, "run")))
    for line in log.read_text().splitlines()[seen:]:  # where the change's tick went (the adapter's debug line)
        if "streaming model" in line and " tick " in line:
            print(f"  {name}: {line.split('streaming model ', 1)[1]}", file=sys.stderr)
    rows.append(("dbt run of the same models as tables (batch)", dbt(batch, "run")))
    spark = SparkSession.builder.getOrCreate()  # the session dbt started
    for model in views:
        problem = compare([tuple(r) for r in spark.table(f"{tag}_stream.{model}").collect()],
                          [tuple(r) for r in spark.table(f"{tag}_batch.{model}").collect()])
        if problem:
            raise SystemExit(f"{name}/{model}: streaming and batch differ: {problem}")
    seeds = sorted((streaming / "seeds").glob("*.csv")) if (streaming / "seeds").exists() else []
    if seeds:
        for root in (streaming, batch):
            change_seed(root / "seeds" / seeds[0].name)
            dbt(root, "seed")
        seen = len(log.read_text().splitlines())
        rows.append((f"dbt run after a 3-row change of {seeds[0].name} (streaming)", dbt(streaming, "run")))
        ticks = {line.split(": tick ", 1)[1].split(" ", 1)[0] for line in log.read_text().splitlines()[seen:]
                 if "streaming model" in line and ": tick " in line}
        print(f"  {name}: the seed change's run committed {len(ticks)} tick(s)", file=sys.stderr)
        rows.append((f"dbt run after a 3-row change of {seeds[0].name}, as tables (batch)", dbt(batch, "run")))
        for model in views:
            problem = compare([tuple(r) for r in spark.table(f"{tag}_stream.{model}").collect()],
                              [tuple(r) for r in spark.table(f"{tag}_batch.{model}").collect()])
            if problem:
                raise SystemExit(f"{name}/{model}: after the seed change, streaming and batch differ: {problem}")
    rows += declarative_pipeline(spark, batch, work / name / "sdp", tag)
    rows.append(("dbt run --full-refresh (streaming)", dbt(streaming, "run", "--full-refresh")))
    print(f"  {name}: all {len(views)} streaming views equal to batch", file=sys.stderr)
    return [(name, run, seconds) for run, seconds in rows]


def change_seed(path: Path) -> None:
    """Three rows of a seed changed: its last deleted, its first given the second's last
    field, and a copy of its third added under a new first field."""
    header, *body = path.read_text().splitlines()
    first, second, third = (row.split(",") for row in body[:3])
    body = body[:-1]
    body[0] = ",".join(first[:-1] + second[-1:])
    body.append(",".join(["new_" + third[0]] + third[1:]))
    path.write_text("\n".join([header, *body]) + "\n")


def declarative_pipeline(spark, batch: Path, work: Path, tag: str) -> list[tuple[str, float]]:
    """The batch project's models as materialized views of Spark Declarative Pipelines,
    run with ``spark-pipelines run`` (which recomputes every materialized view), over
    Parquet copies of the same input (its own Spark Connect server cannot share this
    process's metastore). Returns the run's own time (from its log: run started → run
    completed) and the whole command's (with its server's start)."""
    compiled = next((batch / "target" / "compiled").iterdir()) / "models"
    models = {f.stem: f.read_text() for f in compiled.rglob("*.sql")}
    flows = work / "transformations"
    flows.mkdir(parents=True)
    for model, sql in models.items():
        tree = sqlglot.parse_one(sql, read="spark")
        ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}  # an ephemeral model's CTE, the model's own
        for table in list(tree.find_all(exp.Table)):
            if table.name in ctes and not table.db:
                continue
            if table.name in models:
                table.replace(exp.Table(this=exp.to_identifier(table.name), alias=table.args.get("alias")))
                continue
            relation = f"{table.db}.{table.name}" if table.db else table.name
            path = work / "input" / relation
            if not path.exists():
                spark.table(relation).write.parquet(str(path))
            table.replace(exp.Table(this=exp.to_identifier(str(path), quoted=True), db=exp.to_identifier("parquet"),
                                    alias=table.args.get("alias")))
        (flows / f"{model}.sql").write_text(f"CREATE MATERIALIZED VIEW {model} AS {tree.sql('spark')};\n")
    (work / "pipeline.yml").write_text(f"name: bench_{tag}\nstorage: {(work / 'storage').as_uri()}\n"
                                       "libraries:\n  - glob:\n      include: transformations/**\n")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYSPARK_PYTHON": sys.executable, "SPARK_HOME": str(Path(pyspark.__file__).parent)}
    start = time.perf_counter()
    done = subprocess.run(["spark-pipelines", "run", "--spec", "pipeline.yml"], cwd=work, env=env,
                          capture_output=True, text=True)
    whole = time.perf_counter() - start
    stamps = {m.group(2): datetime.fromisoformat(m.group(1))
              for m in re.finditer(r"^(\S+ \S+): (Starting run|Run is COMPLETED)", done.stdout + done.stderr, re.M)}
    if done.returncode or len(stamps) != 2:
        raise SystemExit(f"spark-pipelines failed in {work}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    run = (stamps["Run is COMPLETED"] - stamps["Starting run"]).total_seconds()
    return [("Declarative Pipelines run, all materialized views (run only)", run),
            ("Declarative Pipelines run, whole command (with its server start)", whole)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--change", type=float, default=0.001)
    parser.add_argument("--projects", default="integration_tests,examples/shop")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-dbt-"))
    os.chdir(work)  # Spark's Derby metastore and warehouse go here
    rows: list[tuple[str, str, float]] = []
    with LocalBroker() as bootstrap:
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
        create_topics(bootstrap, *TOPICS, partitions=2)
        create_topics(bootstrap, "shop.revenue_by_category")
        events = ShopEvents(seed=1)
        load(bootstrap, events, args.orders)
        for name in args.projects.split(","):
            rows += bench_project(name, work, bootstrap, events, args.orders, args.change)
    print(f"\n{args.orders:,} orders, then {args.change:.1%} more; every streaming view equal to batch\n")
    print("| project | run | seconds |\n|---|---|---|")
    for project, run, seconds in rows:
        print(f"| {project} | {run} | {seconds:.1f} |")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 0.3 * len(rows) + 1.2))
    colors = ["tab:grey" if "batch" in r or "Declarative" in r else "tab:blue" for _, r, _ in rows]
    ax.barh([f"{p}: {r}" for p, r, _ in rows][::-1], [s for _, _, s in rows][::-1], color=colors[::-1])
    ax.set_xscale("log")
    ax.set_xlabel("seconds (log); blue: streaming, grey: batch")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(f"dbt run, {args.orders:,} orders")
    fig.tight_layout()
    fig.savefig(out / "dbt_project.png", dpi=80)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
