"""`dbt run` of the integration project after a small change: streaming models vs the same
models as batch tables, in one process and one Spark session.

    python bench/dbt_project.py [--orders 20000] [--change 0.001]

Loads ``--orders`` orders (with customers, products and payments) into a local Kafka-protocol
broker, builds integration_tests/ once, then produces a change of ``--change`` of the orders
(plus the customer and product updates that come with it) and times:

- ``dbt run`` of the streaming project (catches up: one tick for all models),
- ``dbt run --full-refresh`` (rebuilds every model's state from retained input),
- ``dbt run`` of the same models materialized as ``table`` (the batch baseline, reading the
  same input), whose results are compared with the streaming ones.

Prints a table and saves bench/results/dbt_project.png.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dbt.cli.main import dbtRunner  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from dbt_incremental_stream.connectors.broker import LocalBroker  # noqa: E402
from dbt_incremental_stream.differential import compare  # noqa: E402
from dbt_incremental_stream.connectors.broker import create_topics, produce  # noqa: E402
from examples.shop.events import TOPICS, ShopEvents  # noqa: E402

MARTS = ["order_lines", "revenue_by_category", "customer_ltv", "region_revenue", "top_products"]


def dbt(root: Path, *args: str) -> float:
    start = time.perf_counter()
    res = dbtRunner().invoke([*args, "--project-dir", str(root), "--profiles-dir", str(root), "--quiet"])
    if not res.success:
        raise SystemExit(f"dbt {' '.join(args)} failed in {root}: {res.exception or res.result}")
    return time.perf_counter() - start


def load(bootstrap: str, events: ShopEvents, orders: int, per_round: int = 200) -> None:
    batches: dict[str, list] = {t: [] for t in TOPICS}
    while orders > 0:
        for topic, records in events.round(orders=min(per_round, orders)).items():
            batches[topic] += records
        orders -= per_round
    for topic, records in batches.items():
        produce(bootstrap, topic, records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--change", type=float, default=0.001)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-dbt-"))
    streaming, batch = work / "streaming", work / "batch"
    ignore = shutil.ignore_patterns("target", "logs", "stream_state", "metastore_db", "spark-warehouse")
    shutil.copytree(ROOT / "integration_tests", streaming, ignore=ignore)
    shutil.copytree(ROOT / "integration_tests", batch, ignore=ignore)
    (batch / "dbt_project.yml").write_text((batch / "dbt_project.yml").read_text()
                                           .replace("+materialized: streaming_view", "+materialized: table"))
    changelog = batch / "models" / "marts" / "revenue_changes.sql"
    changelog.write_text(changelog.read_text().replace("changelog_table", "table"))
    (batch / "profiles.yml").write_text((batch / "profiles.yml").read_text().replace("schema: shop", "schema: shop_batch"))
    os.chdir(work)  # Spark's Derby metastore and warehouse go here
    events = ShopEvents(seed=1)
    rows = []
    with LocalBroker() as bootstrap:
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
        create_topics(bootstrap, *TOPICS, partitions=2)
        load(bootstrap, events, args.orders)
        rows.append(("initial dbt build (streaming)", dbt(streaming, "build")))
        rows.append(("dbt run, nothing new (streaming)", dbt(streaming, "run")))
        load(bootstrap, events, max(1, int(args.orders * args.change)), per_round=max(1, int(args.orders * args.change)))
        rows.append((f"dbt run after a {args.change:.1%} change (streaming)", dbt(streaming, "run")))
        dbt(batch, "seed")
        rows.append(("dbt run of the same models as tables (batch)", dbt(batch, "run")))
        spark = SparkSession.builder.getOrCreate()  # the session dbt started
        for model in MARTS:
            problem = compare([tuple(r) for r in spark.table(f"shop.{model}").collect()],
                              [tuple(r) for r in spark.table(f"shop_batch.{model}").collect()])
            if problem:
                raise SystemExit(f"{model}: streaming and batch differ: {problem}")
        rows.append(("dbt run --full-refresh (streaming)", dbt(streaming, "run", "--full-refresh")))
    width = max(len(r[0]) for r in rows)
    print(f"\nintegration_tests/, {args.orders:,} orders; results of all {len(MARTS)} marts equal to batch\n")
    print(f"{'run':<{width}}  seconds")
    for name, seconds in rows:
        print(f"{name:<{width}}  {seconds:7.1f}")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3))
    ax.barh([r[0] for r in rows][::-1], [r[1] for r in rows][::-1])
    ax.set_xlabel("seconds")
    ax.set_title(f"integration_tests/, {args.orders:,} orders")
    fig.tight_layout()
    fig.savefig(out / "dbt_project.png")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
