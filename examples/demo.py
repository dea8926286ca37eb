"""The shop demo on the embedded default: a local Kafka-protocol broker and Spark in local
mode, both started here.

    python examples/demo.py [--seconds 60] [--rate 1]

1. starts a broker and sends a first batch of shop events (orders, payments, customer
   upserts, Debezium product changes);
2. ``dbt build``s examples/shop (streaming views, an upsert sink, tests) in a copy under
   ``.demo/``;
3. starts ``dbt-stream serve`` on it, sends ``--rate`` batches of live events a second, and
   shows the views changing, read through serve's Spark Connect endpoint like a BI tool;
4. stops producing, lets serve catch up, checks revenue_by_category against DuckDB over
   every event sent, and stops serve with SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devkit.shop import TOPICS, ShopEvents  # noqa: E402
from dbt_incremental_stream.connectors.broker import free_port  # noqa: E402
from devkit.kafka import create_topics, produce  # noqa: E402

BIN = Path(sys.executable).parent
SINK = "shop.revenue_by_category"
BATCH_SQL = """
SELECT p.category, COUNT(*) AS lines, COUNT(DISTINCT c.customer_id) AS customers, SUM(o.quantity * p.price) AS revenue
FROM orders o JOIN products p ON p.product_id = o.product_id JOIN customers c ON c.customer_id = o.customer_id
WHERE o.quantity > 0 GROUP BY p.category ORDER BY p.category
"""


class Feed:
    """Shop events into the broker; remembers what it sent for the batch check."""

    def __init__(self, bootstrap: str):
        self.bootstrap, self.events, self.orders = bootstrap, ShopEvents(seed=7), []
        self.sent = {t: 0 for t in TOPICS}  # records per topic
        self.stop = threading.Event()

    def send(self, orders: int, rounds: int = 1) -> None:
        """``rounds`` rounds of shop events with ``orders`` orders each, one produce per topic."""
        merged: dict[str, list] = {}
        for _ in range(rounds):
            for topic, records in self.events.round(orders=orders).items():
                merged.setdefault(topic, []).extend(records)
        for topic, records in merged.items():
            produce(self.bootstrap, topic, records)
            self.sent[topic] += len(records)
            if topic == "shop.orders":
                self.orders += [value for _, value in records]

    def run(self, rate: float) -> None:
        while not self.stop.wait(1 / rate):
            self.send(orders=15)


def status(url: str) -> dict:
    with urllib.request.urlopen(url + "status", timeout=5) as r:
        return json.loads(r.read())


def show(spark, st: dict, sent: int) -> None:
    last = st.get("last_tick") or {}
    out = ["\033[2J\033[H" if sys.stdout.isatty() else "\n" + "-" * 72,
           f"dbt-stream serve: tick {st.get('tick')}, last tick {last.get('seconds', 0):.2f}s, "
           f"lag {sum((last.get('lag') or {}).values())} offsets; {sent} orders sent", ""]
    for title, sql in [("shop.revenue_by_category", "SELECT * FROM shop.revenue_by_category ORDER BY category"),
                       ("shop.customers_by_tier", "SELECT * FROM shop.customers_by_tier ORDER BY tier"),
                       ("shop.unpaid_orders", "SELECT * FROM shop.unpaid_orders"),
                       ("shop.sales_per_day (last 3 days)",
                        "SELECT * FROM shop.sales_per_day ORDER BY day DESC LIMIT 3")]:
        frame = spark.sql(sql)
        rows = frame.collect()
        out.append(title)
        out.append("  " + "  ".join(f"{c:>14}" for c in frame.columns))
        out += ["  " + "  ".join(f"{str(v):>14}" for v in r) for r in rows]
        out.append("")
    print("\n".join(out), flush=True)


def batch_answer(feed: Feed) -> list[tuple]:
    """revenue_by_category by the same SQL in DuckDB over everything ``feed`` sent."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE orders (order_id BIGINT, customer_id BIGINT, product_id BIGINT, quantity INT)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)",
                    [(o["order_id"], o["customer_id"], o["product_id"], o["quantity"]) for o in feed.orders])
    con.execute("CREATE TABLE products (product_id BIGINT, category VARCHAR, price DECIMAL(10,2))")
    con.executemany("INSERT INTO products VALUES (?, ?, ?)",
                    [(p["product_id"], p["category"], p["price"]) for p in feed.events.products.values()])
    con.execute("CREATE TABLE customers (customer_id BIGINT)")
    con.executemany("INSERT INTO customers VALUES (?)", [(c,) for c in feed.events.customers])
    return [(c, n, k, Decimal(str(r))) for c, n, k, r in con.sql(BATCH_SQL).fetchall()]


def same_as_batch(spark, want: list[tuple]) -> bool:
    """Whether the streaming revenue_by_category is ``want`` (:func:`batch_answer`)."""
    got = [(r.category, r.lines, r.customers, Decimal(str(r.revenue)))
           for r in spark.sql("SELECT * FROM shop.revenue_by_category ORDER BY category").collect()]
    if got != want:
        print(f"streaming: {got}\nbatch:     {want}")
    return got == want


def batch_check(spark, feed: Feed) -> bool:
    """revenue_by_category against the same SQL in DuckDB over everything sent."""
    return same_as_batch(spark, batch_answer(feed))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="how long to stream live events (default 60)")
    parser.add_argument("--rate", type=float, default=1.0, help="batches of events per second (default 1)")
    args = parser.parse_args()
    from dbt_incremental_stream.connectors.broker import LocalBroker

    work = ROOT / ".demo"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT / "examples" / "shop", work, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    with LocalBroker() as bootstrap:
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
        create_topics(bootstrap, *TOPICS, SINK)
        feed = Feed(bootstrap)
        feed.send(orders=200)
        built = dict(feed.sent)  # what dbt build reads
        print(f"== broker at {bootstrap}; 200 orders sent. dbt build of examples/shop (in {work}):", flush=True)
        if subprocess.run([str(BIN / "dbt"), "build"], cwd=work, env=env).returncode != 0:
            return 1
        http, connect = free_port(), free_port()
        print(f"== dbt-stream serve (log in {work / 'serve.log'}); live events at {args.rate}/s", flush=True)
        with open(work / "serve.log", "w") as log:
            serve = subprocess.Popen([str(BIN / "dbt-stream"), "serve", "--interval", "1", "--port", str(http),
                                      "--connect-port", str(connect)], cwd=work, env=env, stdout=log, stderr=log)
        url = f"http://127.0.0.1:{http}/"
        try:
            while True:
                try:
                    if status(url)["state"] == "running":
                        break
                except OSError:
                    pass
                if serve.poll() is not None:
                    print((work / "serve.log").read_text()[-3000:])
                    return 1
                time.sleep(0.5)
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.remote(f"sc://127.0.0.1:{connect}").getOrCreate()
            producer = threading.Thread(target=feed.run, args=(args.rate,), daemon=True)
            producer.start()
            until = time.monotonic() + args.seconds
            while time.monotonic() < until:
                show(spark, status(url), len(feed.orders))
                time.sleep(2)
            feed.stop.set()
            producer.join()
            while not _read_all(url, feed, built):  # let serve read everything that was sent
                time.sleep(1)
            show(spark, status(url), len(feed.orders))
            ok = batch_check(spark, feed)
            print(f"revenue_by_category equals the same SQL run in batch by DuckDB over all {len(feed.orders)} "
                  f"orders: {'yes' if ok else 'NO'}")
            spark.stop()
        finally:
            serve.send_signal(signal.SIGTERM)  # finishes the tick, commits, exits
            serve.wait(120)
        print(f"\nThe project is in {work}: `cd {work} && KAFKA_BOOTSTRAP_SERVERS=... dbt-stream serve` runs it "
              "again (with a broker); `make demo` starts over.")
        return 0 if ok else 1


def _read_all(url: str, feed: Feed, built: dict[str, int]) -> bool:
    """Whether serve has committed every record sent (its metrics count offsets per source)."""
    with urllib.request.urlopen(url + "metrics", timeout=5) as r:
        read = {line.split('"')[1]: float(line.split()[-1]) for line in r.read().decode().splitlines()
                if line.startswith("dbt_stream_source_offsets_total{")}
    return all(read.get(f"shop_raw.{t.split('.')[1]}", 0) + built[t] >= n for t, n in feed.sent.items())


if __name__ == "__main__":
    sys.exit(main())
