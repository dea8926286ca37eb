"""Every supported construct, on random inserts, deletes and updates, equals DuckDB
running the same SQL in batch after every tick."""
from __future__ import annotations

import itertools
from collections import Counter
import os
from datetime import date, datetime, timedelta
from decimal import Decimal

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from dbt_incremental_stream.differential import ARRANGED_PATH, Differential
from dbt_incremental_stream.errors import StreamError
from dbt_incremental_stream.runtime.pipeline import Pipeline
from dbt_incremental_stream.runtime.spark.tasks import PHASES
from tests.twin import spark_conf
from tests.workload import SOURCES, run

# each example runs Spark jobs: few examples, no shrinking (a failure prints its first example);
# EXAMPLES=20 make test for a deeper, slower search
SETTINGS = settings(max_examples=int(os.environ.get("EXAMPLES", "2")), deadline=None,
                    derandomize=os.environ.get("EXAMPLES") is None, database=None,
                    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))

GROUPS: dict[str, dict[str, str]] = {
    "linear": {
        "projection": "SELECT id, amount * qty AS total, CASE WHEN qty > 2 THEN 'big' WHEN qty IS NULL THEN 'none' "
                      "ELSE 'small' END AS size, CAST(qty AS DOUBLE) / 2 AS half, upper(status) AS st, "
                      "concat(status, '-', CAST(id AS STRING)) AS tag, coalesce(cust, -1) AS c FROM orders",
        "filter": "SELECT id, amount FROM orders WHERE status = 'open' AND qty >= 2 OR amount > 50",
        "union_all": "SELECT cust AS k, 'o' AS src FROM orders UNION ALL SELECT id, 'c' FROM customers",
        "star": "SELECT * FROM customers WHERE region IS NOT NULL",
    },
    "joins": {
        "join2": "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON o.cust = c.id",
        "join3": "SELECT o.id, c.region, i.sku FROM orders o JOIN customers c ON o.cust = c.id "
                 "JOIN items i ON i.order_id = o.id AND i.price > o.qty",
        "comma_join": "SELECT c.region, i.price FROM orders o, items i, customers c "
                      "WHERE o.id = i.order_id AND c.id = o.cust AND i.price < 50",
        "self_join": "SELECT a.id, b.id AS other FROM orders a JOIN orders b ON a.cust = b.cust AND a.id < b.id",
        "using": "SELECT id, name, cust FROM customers JOIN (SELECT cust AS id, cust FROM orders) t USING (id)",
        # dbt_utils.deduplicate as it expands on Spark: a NATURAL JOIN on every column
        "deduplicate": "WITH base AS (SELECT * FROM customers), row_numbered AS (SELECT _inner.*, row_number() "
                       "OVER (PARTITION BY region ORDER BY id) AS rn FROM base AS _inner) SELECT DISTINCT data.* "
                       "FROM base AS data NATURAL JOIN row_numbered WHERE row_numbered.rn = 1",
        # constant relations (SELECT without FROM), as dbt_utils.generate_series writes them
        "constant_join": "SELECT o.id, k.label FROM orders o JOIN (SELECT 1 AS q, 'one' AS label UNION ALL "
                         "SELECT 2, 'two') k ON o.qty = k.q",
        "series": "WITH p AS (SELECT 0 AS g UNION ALL SELECT 1), s AS (SELECT p0.g * 2 + p1.g AS n FROM p p0 "
                  "CROSS JOIN p p1) SELECT s.n, COUNT(o.id) AS orders FROM s LEFT JOIN orders o ON o.qty = s.n "
                  "GROUP BY s.n",
    },
    "aggregates": {
        "linear_agg": "SELECT cust, COUNT(*) AS n, COUNT(qty) AS nq, SUM(amount) AS s, AVG(qty) AS a, "
                      "AVG(amount) AS aa FROM orders GROUP BY cust",
        "minmax": "SELECT status, MIN(amount) AS mn, MAX(qty) AS mx, COUNT(DISTINCT cust) AS dc, "
                  "SUM(qty) AS s FROM orders GROUP BY status",
        "having": "SELECT cust, SUM(qty) AS q FROM orders GROUP BY cust HAVING COUNT(*) > 1",
        "global": "SELECT COUNT(*) AS n, SUM(amount) AS s, MAX(qty) AS m, AVG(price) AS p FROM orders, items "
                  "WHERE orders.id = items.order_id",
        "global_linear": "SELECT COUNT(*) AS n, SUM(qty) AS s FROM orders",
        "group_expr": "SELECT qty % 2 AS parity, COUNT(*) AS n, SUM(qty) + 1 AS s1 FROM orders GROUP BY qty % 2",
        "group_all": "SELECT status, cust, MIN(id) AS first_id FROM orders GROUP BY ALL",
        "distinct_calls": "SELECT status, COUNT(DISTINCT cust) AS dc, COUNT(*) AS n, SUM(DISTINCT qty) AS sq, "
                          "AVG(DISTINCT amount) AS da, COUNT(DISTINCT qty) AS dq, SUM(amount) AS s "
                          "FROM orders GROUP BY status",
        "global_distinct": "SELECT COUNT(DISTINCT cust) AS dc FROM orders",
    },
    "composed": {
        "distinct": "SELECT DISTINCT status, cust FROM orders",
        "union": "SELECT cust AS k FROM orders UNION SELECT id FROM customers",
        "cte_subquery": "WITH big AS (SELECT * FROM orders WHERE qty > 1) "
                        "SELECT t.cust, t.n FROM (SELECT cust, COUNT(*) AS n FROM big GROUP BY cust) t WHERE t.n >= 1",
        "region_revenue": "SELECT c.region, SUM(o.amount * o.qty) AS rev, COUNT(*) AS n FROM orders o "
                          "JOIN customers c ON o.cust = c.id GROUP BY c.region",
        "view_on_view": "SELECT region, rev FROM region_revenue WHERE rev > 10",
        "agg_of_agg": "SELECT n, COUNT(*) AS groups FROM (SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust) "
                      "GROUP BY n",
    },
    "outer_joins": {
        "left": "SELECT o.id, o.cust, c.name FROM orders o LEFT JOIN customers c ON o.cust = c.id",
        "left_on_filters": "SELECT o.id, c.region FROM orders o LEFT OUTER JOIN customers c "
                           "ON o.cust = c.id AND c.region = 'eu' AND o.qty > 1",
        "right": "SELECT c.id, c.name, o.amount FROM orders o RIGHT JOIN customers c ON o.cust = c.id",
        "full": "SELECT o.id AS oid, o.status, c.id AS cid FROM orders o FULL OUTER JOIN customers c ON o.cust = c.id",
        "left_non_equi": "SELECT o.id, i.sku FROM orders o LEFT JOIN items i ON i.order_id = o.id AND i.price > o.qty",
        "left_then_inner": "SELECT o.id, c.name, i.sku FROM orders o LEFT JOIN customers c ON o.cust = c.id "
                           "JOIN items i ON i.order_id = o.id WHERE o.status <> 'paid'",
        "left_agg": "SELECT c.id, COUNT(o.id) AS n, SUM(o.amount) AS s FROM customers c "
                    "LEFT JOIN orders o ON o.cust = c.id GROUP BY c.id",
        "semi_anti": "SELECT o.id FROM orders o LEFT SEMI JOIN customers c ON o.cust = c.id "
                     "UNION ALL SELECT o.id FROM orders o LEFT ANTI JOIN items i ON i.order_id = o.id",
        "cross_small": "SELECT c.id, s.n FROM customers c CROSS JOIN (SELECT COUNT(*) AS n FROM items) s",
    },
    "subqueries": {
        "exists": "SELECT o.id, o.amount FROM orders o WHERE EXISTS "
                  "(SELECT 1 FROM items i WHERE i.order_id = o.id AND i.price > 10)",
        "not_exists": "SELECT c.id, c.name FROM customers c WHERE NOT EXISTS "
                      "(SELECT * FROM orders o WHERE o.cust = c.id)",
        "in": "SELECT id, status FROM orders WHERE cust IN (SELECT id FROM customers WHERE region = 'eu')",
        "not_in_nulls": "SELECT c.id FROM customers c WHERE c.id NOT IN (SELECT qty FROM orders WHERE status = 'open')",
        "not_in_correlated": "SELECT o.id FROM orders o WHERE o.qty NOT IN "
                             "(SELECT o2.qty FROM orders o2 WHERE o2.cust = o.cust AND o2.id <> o.id)",
        "scalar": "SELECT id, amount FROM orders WHERE amount > (SELECT AVG(amount) FROM orders)",
        "scalar_count": "SELECT o.id FROM orders o WHERE o.qty > "
                        "(SELECT COUNT(*) FROM items i WHERE i.order_id = o.id)",
        "exists_non_equi": "SELECT o.id, o.cust FROM orders o WHERE EXISTS "
                           "(SELECT * FROM orders o2 WHERE o2.cust = o.cust AND o2.id <> o.id)",
        "in_select_list": "SELECT c.id, c.id IN (SELECT cust FROM orders) AS has_orders, "
                          "(SELECT MAX(price) FROM items) AS top FROM customers c",
        "or_exists": "SELECT id FROM orders o WHERE o.qty = 0 OR "
                     "EXISTS (SELECT 1 FROM customers c WHERE c.id = o.cust AND c.region = 'us')",
        "having_scalar": "SELECT cust, SUM(qty) AS q FROM orders GROUP BY cust "
                         "HAVING SUM(qty) > (SELECT AVG(qty) FROM orders)",
    },
    "set_operations": {
        "intersect": "SELECT cust FROM orders INTERSECT SELECT id FROM customers",
        "intersect_all": "SELECT cust FROM orders INTERSECT ALL SELECT id FROM customers",
        "except": "SELECT id FROM customers EXCEPT SELECT cust FROM orders",
        "except_all": "SELECT cust FROM orders EXCEPT ALL SELECT id FROM customers",
        "filter_clause": "SELECT cust, COUNT(*) FILTER (WHERE qty > 2) AS big, "
                         "SUM(amount) FILTER (WHERE status = 'open') AS open_amt FROM orders GROUP BY cust",
        "case_in_agg": "SELECT status, SUM(CASE WHEN qty > 1 THEN amount ELSE 0 END) / SUM(amount) AS share "
                       "FROM orders GROUP BY status",
    },
    "windows": {
        "rank": "SELECT cust, id, amount, RANK() OVER (PARTITION BY cust ORDER BY amount DESC) AS r, "
                "DENSE_RANK() OVER (PARTITION BY cust ORDER BY qty) AS d FROM orders",
        "running": "SELECT id, cust, SUM(qty) OVER (PARTITION BY cust ORDER BY id) AS run, "
                   "COUNT(*) OVER (PARTITION BY cust) AS n, AVG(amount) OVER (PARTITION BY cust) AS a, "
                   "MIN(qty) OVER (PARTITION BY status) AS m FROM orders",
        "lag_lead": "SELECT id, status, LAG(amount) OVER (PARTITION BY status ORDER BY id, cust, amount, qty) AS prev, "
                    "LEAD(id, 1) OVER (PARTITION BY status ORDER BY id, cust, amount, qty) AS nxt FROM orders",
        "first_last": "SELECT id, cust, FIRST_VALUE(amount) OVER (PARTITION BY cust ORDER BY id, amount, qty, status) "
                      "AS f, LAST_VALUE(qty) OVER (PARTITION BY cust ORDER BY id, amount, qty, status ROWS BETWEEN "
                      "UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS l FROM orders",
        "top_k": "SELECT id, amount FROM orders ORDER BY amount DESC LIMIT 3",
        "top_k_agg": "SELECT cust, SUM(qty) AS q FROM orders GROUP BY cust ORDER BY q DESC, cust LIMIT 2 OFFSET 1",
        "top_per_group": "SELECT * FROM (SELECT cust, id, amount, ROW_NUMBER() OVER (PARTITION BY cust "
                         "ORDER BY amount DESC, id, qty, status) AS rn FROM orders) t WHERE rn <= 2",
        "qualify": "SELECT cust, id FROM orders QUALIFY RANK() OVER (PARTITION BY cust ORDER BY id DESC) = 1",
    },
}


#: views whose every operator runs on arrangements: a small tick takes the arranged path
ARRANGED = {
    **{k: GROUPS["joins"][k] for k in ("join2", "join3", "self_join", "using")},
    **{k: GROUPS["aggregates"][k] for k in ("linear_agg", "having", "global_linear", "group_expr", "distinct_calls",
                                            "global_distinct")},
    **{k: GROUPS["composed"][k] for k in ("region_revenue", "view_on_view", "agg_of_agg")},
    **{k: GROUPS["windows"][k] for k in ("top_k", "top_k_agg")},
    "join_of_agg": "SELECT c.name, t.n, t.s FROM customers c JOIN (SELECT cust, COUNT(*) AS n, SUM(qty) AS s "
                   "FROM orders GROUP BY cust) t ON t.cust = c.id",
    "items_join": "SELECT i.sku, COUNT(*) AS n, AVG(i.price) AS p FROM items i JOIN orders o ON o.id = i.order_id "
                  "WHERE o.status IS NOT NULL GROUP BY i.sku",
}


@given(data=st.data())
@SETTINGS
def test_arranged_ticks_equal_batch(spark, tmp_path_factory, data):
    """Joins and linear aggregates after the first tick: every tick on arrangements, the
    changes handed over as rows and as DataFrames (one per source, collected side by side)
    in turn."""
    from tests.workload import changes

    diff = Differential(spark, str(tmp_path_factory.mktemp("state")), SOURCES, ARRANGED, max_batches=3)
    try:
        for tick in range(4):
            diff.form = ("rows", "dataframe")[tick % 2]
            diff.step(changes(data, diff, list(SOURCES)))
            assert tick == 0 or diff.pipeline.last_tick.path == "arranged", diff.pipeline.last_tick.why
    finally:
        diff.close()


@pytest.mark.parametrize("group", list(GROUPS))
@given(data=st.data())
@SETTINGS
def test_views_equal_batch_after_every_tick(spark, tmp_path_factory, group, data):
    views = GROUPS[group]
    used = [s for s in SOURCES if any(s in sql for sql in views.values())]
    run(data, lambda: Differential(spark, str(tmp_path_factory.mktemp("state")), SOURCES, views,
                                   max_batches=3), used, ticks=3)


@given(data=st.data())
@SETTINGS
def test_tick_boundaries_do_not_matter(spark, tmp_path_factory, data):
    """All changes in one tick, or one change a tick: the same final result."""
    from tests.workload import changes

    views = {**GROUPS["composed"], "minmax": GROUPS["aggregates"]["minmax"]}
    whole = Differential(spark, str(tmp_path_factory.mktemp("whole")), SOURCES, views)
    split = Differential(spark, str(tmp_path_factory.mktemp("split")), SOURCES, views)
    try:
        batch = changes(data, whole, ["orders", "customers"])
        whole.step(batch)
        singles = [(s, c) for s, cs in batch.items() for c in cs]
        for source, change in singles[:10]:
            split.step({source: [change]}, check=False)
        rest = {s: [c for c in cs if (s, c) not in singles[:10]] for s, cs in batch.items()}
        split.step(rest)
        for name in views:
            got = sorted(map(tuple, split.pipeline.snapshot(name).collect()), key=repr)
            want = sorted(map(tuple, whole.pipeline.snapshot(name).collect()), key=repr)
            assert got == want, name
    finally:
        whole.close()
        split.close()


@pytest.mark.parametrize("placement", ["auto", "tasks"])
def test_view_added_later_is_backfilled(spark, tmp_path, placement):
    """A view added to a pipeline that ran is built on arrangements (in the driver, or in
    Spark tasks) from all retained input and the tick's delta, in the tick that adds it,
    its joins' arrangements of the kept sources by new keys built from their batches."""
    diff = Differential(spark, str(tmp_path), SOURCES, {"n": "SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust"},
                        placement=placement)
    rows = [((i, i % 3, i * 1.5, i % 4, "open"), 1) for i in range(1, 9)]
    diff.step({"orders": rows[:5], "customers": [((1, "ann", "eu"), 1), ((2, "bob", "us"), 1)]})
    diff.step({"orders": rows[5:] + [(rows[0][0], -1)]})
    diff.add_view("late", "SELECT c.region, MAX(o.amount) AS m FROM orders o JOIN customers c ON o.cust = c.id "
                          "GROUP BY c.region")
    diff.add_view("by_status", "SELECT o.id, c.name FROM orders o JOIN customers c ON o.status = c.region")
    diff.step({"orders": [((20, 1, 99, 1, "paid"), 1), (rows[1][0], -1)]})
    assert diff.pipeline.last_tick.path == ARRANGED_PATH[placement], diff.pipeline.last_tick.why
    diff.add_view("late_total", "SELECT COUNT(*) AS n FROM late")
    diff.step({"customers": [((1, "ann", "eu"), -1)]})
    assert diff.pipeline.last_tick.path == ARRANGED_PATH[placement], diff.pipeline.last_tick.why
    diff.step({"customers": [((3, "cy", "eu"), 1)], "orders": [((21, 3, 5, 2, "open"), 1)]})
    assert diff.pipeline.last_tick.path == ARRANGED_PATH[placement], diff.pipeline.last_tick.why
    diff.close()


@pytest.mark.parametrize("placement", ["auto", "tasks"])
@pytest.mark.parametrize("aggregates", [
    "COUNT(*) AS n, SUM(amount) AS s, AVG(qty) AS a",
    "COUNT(*) AS n, MAX(amount) AS m, MIN(status) AS lo, COUNT(DISTINCT cust) AS c",
], ids=["linear", "others"])
def test_keyless_aggregate_over_no_rows_has_its_row(spark, tmp_path, placement, aggregates):
    """A keyless aggregate over no rows has one row (COUNT 0, the others NULL), on the first
    tick as after deletes. In Spark tasks exactly one task gives it, the one its rows would
    go to (the others see none of them either)."""
    views = {"total": f"SELECT {aggregates} FROM orders",
             "per_region": "SELECT region, COUNT(*) AS n FROM customers GROUP BY region"}
    diff = Differential(spark, str(tmp_path), SOURCES, views, placement=placement)
    try:
        diff.step({"customers": [((i, f"c{i}", f"r{i % 3}"), 1) for i in range(40)]})
        rows = diff.pipeline.snapshot("total", weights=True).collect()
        assert len(rows) == 1 and rows[0]["n"] == 0 and rows[0]["_w"] == 1, rows
        assert diff.pipeline.last_tick.path == ARRANGED_PATH[placement], diff.pipeline.last_tick.why
        orders = [((i, i % 3, i * 1.5, i % 4, "open"), 1) for i in range(30)]
        diff.step({"orders": orders})
        assert diff.pipeline.last_tick.path == ARRANGED_PATH[placement], diff.pipeline.last_tick.why
        diff.step({"orders": [(r, -w) for r, w in orders]})  # no rows again
        assert diff.pipeline.last_tick.path == ARRANGED_PATH[placement], diff.pipeline.last_tick.why
    finally:
        diff.close()


def test_a_view_over_views_is_built_from_their_contents(spark, tmp_path, monkeypatch):
    """A view added over views whose sources do not change in the tick that adds it is
    built from those views' committed contents (their joins and windows are not computed
    again over all retained input); it then equals batch, and keeps equal as they change."""
    from dbt_incremental_stream.runtime.on_arrangements import ArrangedTicks

    seeded: list[set[str]] = []
    real = ArrangedTicks._seeds

    def seeds(self, new, fetched):
        found = real(self, new, fetched)
        seeded.append(set(found))
        return found

    monkeypatch.setattr(ArrangedTicks, "_seeds", seeds)
    diff = Differential(spark, str(tmp_path), SOURCES, {
        "late": "SELECT c.region, MAX(o.amount) AS m, COUNT(*) AS n FROM orders o JOIN customers c ON o.cust = c.id "
                "GROUP BY c.region",
        "ranked": "SELECT id, cust, amount, RANK() OVER (PARTITION BY cust ORDER BY amount DESC) AS r FROM orders"})
    rows = [((i, i % 3, i * 1.5, i % 4, "open"), 1) for i in range(1, 12)]
    diff.step({"orders": rows, "customers": [((0, "al", "us"), 1), ((1, "ann", "eu"), 1), ((2, "bob", "us"), 1)]})
    diff.step({"orders": [(rows[0][0], -1), ((30, 2, 7.5, 1, "paid"), 1)], "customers": [((0, "al", "us"), -1)]})
    diff.add_view("over_views", "SELECT l.region, l.m, COUNT(r.id) AS top FROM late l "
                                "LEFT JOIN customers c ON c.region = l.region LEFT JOIN ranked r ON r.cust = c.id "
                                "AND r.r = 1 GROUP BY l.region, l.m")
    diff.step({})
    assert diff.pipeline.last_tick.path == "arranged", diff.pipeline.last_tick.why
    assert seeded and len(seeded[-1]) == 2, seeded  # late's and ranked's contents
    diff.step({"orders": [((31, 1, 99.0, 0, "open"), 1), (rows[3][0], -1)], "customers": [((0, "al", "eu"), 1)]})
    diff.add_view("again", "SELECT region, m FROM late WHERE n > 1")  # its source changes this tick: not seeded
    diff.step({"orders": [((32, 0, 1.0, 0, "open"), 1)]})
    assert not seeded[-1], seeded
    diff.close()


def test_same_rows_in_many_ticks_keep_multiplicity(spark, tmp_path):
    diff = Differential(spark, str(tmp_path), SOURCES, GROUPS["composed"])
    row = (1, 1, 10, 2, "open")
    for weight in itertools.chain([1, 1, 1], [-1, -1, 1, -1, -1]):
        diff.step({"orders": [(row, weight)], "customers": [((1, "ann", "eu"), 1)] if weight == 1 else []})
    diff.close()


def test_update_inside_a_group_in_one_tick(spark, tmp_path):
    """A group whose COUNT nets to zero in a tick while its SUM changes (an update that
    stays in the group), and double sums whose retraction must cancel exactly."""
    views = {"agg": "SELECT cust, COUNT(*) AS n, SUM(amount) AS s, AVG(qty) AS a FROM orders GROUP BY cust",
             "prices": "SELECT sku, SUM(price) AS total, COUNT(*) AS n FROM items GROUP BY sku",
             "global": "SELECT SUM(price) AS total FROM items"}
    diff = Differential(spark, str(tmp_path), SOURCES, views)
    diff.step({"orders": [((1, 1, 10, 2, "open"), 1), ((2, 1, 20, 3, "open"), 1)],
               "items": [((1, "a", 0.1), 1), ((2, "a", 0.2), 1), ((3, "a", 0.7), 1)]})
    diff.step({"orders": [((1, 1, 10, 2, "open"), -1), ((1, 1, 15, 4, "open"), 1)],
               "items": [((1, "a", 0.1), -1), ((4, "a", 0.3), 1)]})
    diff.step({"items": [((2, "a", 0.2), -1), ((5, "a", 1e-9), 1), ((6, "a", 0.1), 1)]})
    rows = diff.pipeline.snapshot("prices", weights=True).collect()
    assert [r["_w"] for r in rows] == [1], rows  # one row for the group, no stale leftovers
    diff.close()


def test_time_is_an_input(spark, tmp_path):
    """current_timestamp() / now() / current_date() read the tick's time: as it passes,
    rows leave a sliding window and calendar days roll over with no input change."""
    views = {
        "last_hour": "SELECT id, ts FROM events WHERE ts > current_timestamp() - INTERVAL 1 HOUR",
        "today": "SELECT COUNT(*) AS n, SUM(v) AS s FROM events WHERE CAST(ts AS DATE) = current_date()",
        "per_hour": "SELECT date_trunc('HOUR', ts) AS hour, COUNT(*) AS n FROM events "
                    "WHERE ts <= now() GROUP BY date_trunc('HOUR', ts)",
    }
    diff = Differential(spark, str(tmp_path), {"events": "id INT, ts TIMESTAMP, v INT"}, views)
    t0 = datetime(2026, 3, 1, 22, 0)
    try:
        diff.step({"events": [((1, t0 - timedelta(minutes=30), 1), 1), ((2, t0 - timedelta(hours=2), 2), 1),
                              ((3, t0 + timedelta(minutes=20), 3), 1)]}, now=t0)
        diff.step({}, now=t0 + timedelta(minutes=45))  # event 1 leaves the last hour, event 3 arrives
        diff.step({"events": [((4, t0 + timedelta(minutes=50), 4), 1), ((2, t0 - timedelta(hours=2), 2), -1)]},
                  now=t0 + timedelta(minutes=55))
        diff.step({}, now=t0 + timedelta(hours=3))  # a new day: today is empty
        assert diff.pipeline.snapshot("last_hour").count() == 0
    finally:
        diff.close()


def every_minute(t0: datetime, back: int, count: int, users: int, unstamped: int) -> list:
    """Inserted events (id, ts, v, u), one a minute from ``back`` minutes before ``t0``,
    ``count`` of them, and one with no time (id ``unstamped``)."""
    minute = timedelta(minutes=1)
    rows = [((i, t0 - back * minute + i * minute, i % 7, i % users), 1) for i in range(count)]
    return rows + [((unstamped, None, 1, 1), 1)]


@pytest.mark.parametrize("placement", ["auto", "tasks"])
def test_a_new_time_builds_on_arrangements(spark, tmp_path, placement):
    """A time that is new, not moved (a pipeline's first tick, a view reading the time
    added to a running pipeline) reads every row of a temporal filter's state: the first
    build and the backfill run on arrangements, in the driver or in Spark tasks, equal to batch."""
    views = {
        "last_hour": "SELECT id, v FROM events WHERE ts > current_timestamp() - INTERVAL 1 HOUR",
        "per_user": "SELECT u, COUNT(*) AS n, MAX(ts) AS last FROM events "
                    "WHERE ts <= now() - INTERVAL 10 MINUTES AND v > 1 GROUP BY u",
    }
    t0 = datetime(2026, 3, 1, 12, 0)
    minute = timedelta(minutes=1)
    events = every_minute(t0, 200, 220, users=5, unstamped=999)  # to 20 min ahead
    diff = Differential(spark, str(tmp_path), {"events": "id INT, ts TIMESTAMP, v INT, u INT"}, views,
                        placement=placement)
    arranged = ARRANGED_PATH[placement]
    try:
        diff.step({"events": events}, now=t0)
        assert diff.pipeline.last_tick.path == arranged, diff.pipeline.last_tick.why
        diff.step({"events": [(events[190][0], -1), ((1000, t0 - 30 * minute, 5, 2), 1)]}, now=t0 + 5 * minute)
        assert diff.pipeline.last_tick.path == arranged, diff.pipeline.last_tick.why
        diff.add_view("recent_users", "SELECT u, SUM(v) AS s FROM events "
                                      "WHERE ts BETWEEN now() - INTERVAL 30 MINUTES AND now() GROUP BY u")
        diff.step({"events": [((1001, t0 + 6 * minute, 4, 4), 1)]}, now=t0 + 7 * minute)  # built from history
        assert diff.pipeline.last_tick.path == arranged, diff.pipeline.last_tick.why
        diff.add_view("in_window", "SELECT COUNT(*) AS n FROM events WHERE ts > now() - INTERVAL 15 MINUTES")
        diff.step({}, now=t0 + 9 * minute)
        assert diff.pipeline.last_tick.path == arranged, diff.pipeline.last_tick.why
        diff.step({}, now=t0 + 40 * minute)
        assert diff.pipeline.last_tick.path == arranged, diff.pipeline.last_tick.why
    finally:
        diff.close()


def test_temporal_filters_read_only_rows_whose_window_opens_or_closes(spark, tmp_path):
    """As the time moves, a tick on arrangements reads the rows between the old and the new
    window edges (an index of the state by the compared column), not every row."""
    views = {
        "last_hour": "SELECT id, v FROM events WHERE ts > current_timestamp() - INTERVAL 1 HOUR",
        "recent_sum": "SELECT COUNT(*) AS n, SUM(v) AS s FROM events "
                      "WHERE ts BETWEEN now() - INTERVAL '30' MINUTE AND now() AND v > 2",
        "per_user": "SELECT u, COUNT(*) AS n FROM events WHERE ts <= current_timestamp() - INTERVAL 10 MINUTES "
                    "GROUP BY u",
    }
    t0 = datetime(2026, 3, 1, 12, 0)
    minute = timedelta(minutes=1)
    events = every_minute(t0, 600, 700, users=5, unstamped=700)
    diff = Differential(spark, str(tmp_path), {"events": "id INT, ts TIMESTAMP, v INT, u INT"}, views)
    try:
        diff.step({"events": events}, now=t0)
        diff.step({"events": [((701, t0 + 2 * minute, 3, 2), 1)]}, now=t0 + minute)
        for k, delta in ((3, []), (4, [events[650]]), (9, []), (60, [])):
            diff.step({"events": [(r, -w) for r, w in delta]}, now=t0 + k * minute)
            tick = diff.pipeline.last_tick
            assert tick.path == "arranged", tick.why
            # the rows within the moved minutes of each window edge (and the delta), not the 700
            assert tick.rows_read <= 3 * 3 * (k + 1) + 10, tick.rows_read
        with pytest.raises(StreamError, match="never goes back"):
            diff.step({}, now=t0 - 5 * minute)
    finally:
        diff.close()


@pytest.mark.parametrize("placement", ["auto", "tasks"])
def test_rows_outside_every_window_for_good_leave_the_state(spark, tmp_path, placement):
    """A row below every temporal filter's lower edge can never come back (the time only
    moves on): it leaves the state of its source, whether it was stored before or arrives
    late, while the views stay equal to batch; a view added later that would read it says
    so. In Spark tasks too: each task stores none of its delta's, the driver retracts the
    stored rows the window left."""
    views = {
        "last_hour": "SELECT id, v FROM events WHERE ts > current_timestamp() - INTERVAL 1 HOUR",
        "recent": "SELECT u, COUNT(*) AS n, SUM(v) AS s FROM events "
                  "WHERE ts BETWEEN now() - INTERVAL '30' MINUTE AND now() GROUP BY u",
    }
    t0 = datetime(2026, 3, 1, 12, 0)
    minute = timedelta(minutes=1)
    events = every_minute(t0, 300, 320, users=3, unstamped=999)  # to 20 min ahead
    diff = Differential(spark, str(tmp_path), {"events": "id INT, ts TIMESTAMP, v INT, u INT"}, views,
                        expire={"events"}, placement=placement)

    def stored() -> list[datetime | None]:
        return [r["ts"] for r in diff.pipeline.snapshot("events").collect()]

    try:
        diff.step({"events": events}, now=t0)  # the rows before the hour never get stored
        assert diff.pipeline.last_tick.path == ARRANGED_PATH[placement], diff.pipeline.last_tick.why
        assert sorted(stored()) == [t0 - 60 * minute + i * minute for i in range(80)]
        late = [((1000, t0 - 90 * minute, 1, 1), 1), ((1001, None, 2, 2), 1), ((1002, t0 + 25 * minute, 3, 0), 1)]
        gone = [(events[10][0], -1)]  # a delete of a row that already left
        for k, delta in ((1, late + gone), (2, []), (7, [(events[241][0], -1)]), (30, []), (31, [])):
            diff.step({"events": delta}, now=t0 + k * minute)
            assert diff.pipeline.last_tick.path == ARRANGED_PATH[placement], diff.pipeline.last_tick.why
            edge = t0 + (k - 60) * minute  # the last hour's lower edge, below the last 30 minutes'
            assert sorted(stored()) == sorted(r[1] for r in diff.rows("events") if r[1] is not None and r[1] >= edge)
        assert len(list((tmp_path / "_manifest").glob("tick-*.json"))) == 3  # a long run keeps the last few
        diff.add_view("last_hour_ids", "SELECT id FROM events WHERE ts >= now() - INTERVAL 50 MINUTES")
        diff.step({}, now=t0 + 32 * minute)  # sees no row that left: built from what is kept
        assert diff.pipeline.last_tick.path == ARRANGED_PATH[placement], diff.pipeline.last_tick.why
        with pytest.raises(StreamError, match=r"views \['all_events'\] would read rows of source 'events'"):
            diff.add_view("all_events", "SELECT COUNT(*) AS n FROM events")
            diff.step({}, now=t0 + 33 * minute)
    finally:
        diff.close()


def test_global_top_k_reads_the_end_of_an_ordered_arrangement(spark, tmp_path):
    """ORDER BY … LIMIT over the whole input: a tick reads the rows near the top (widening
    while deletes empty it), not every row; ties, NULLs and multiplicities as in batch."""
    views = {
        "top": "SELECT id, v FROM t ORDER BY v DESC LIMIT 5",
        "bottom": "SELECT id, d FROM t ORDER BY d ASC NULLS LAST, id LIMIT 3 OFFSET 2",
        "top_groups": "SELECT g, SUM(v) AS s FROM t GROUP BY g ORDER BY s DESC LIMIT 4",
    }
    rows = [(i, (i * 37) % 101 if i % 9 else None, i % 13, None if i % 11 == 0 else Decimal(i % 50) / 4)
            for i in range(400)]
    diff = Differential(spark, str(tmp_path), {"t": "id INT, v INT, g INT, d DECIMAL(8,2)"}, views)
    try:
        diff.step({"t": [(r, 1) for r in rows] + [(rows[5], 1)]})
        diff.step({"t": [((900, 500, 1, Decimal("-1")), 1)]})
        top = sorted((r for r in rows if r[1] is not None), key=lambda r: -r[1])
        for change in ([(top[0], -1), (top[1], -1)],  # the top rows leave
                       [(r, -1) for r in top[2:12]],  # more than k leave: the cut widens
                       [((901, 100, 2, Decimal("0.25")), 2), ((900, 500, 1, Decimal("-1")), -1)]):
            diff.step({"t": change})
            tick = diff.pipeline.last_tick
            assert tick.path == "arranged", tick.why
            assert tick.rows_read < 200, tick.rows_read
    finally:
        diff.close()


def test_keyless_min_and_max_read_the_ends_of_ordered_arrangements(spark, tmp_path):
    """MIN and MAX over the whole input: a tick reads the rows at each end (widening while
    deletes empty it), not every row; NULLs, duplicates, all rows deleted and back."""
    views = {
        "ends": "SELECT MIN(v) AS lo, MAX(v) AS hi, MAX(d) AS top_d, MIN(id) AS first FROM t",
        "filtered": "SELECT MAX(d) AS m, MIN(v) AS n FROM t WHERE g > 3",
    }
    rows = [(i, (i * 37) % 1009 if i % 9 else None, i % 13, None if i % 11 == 0 else Decimal(i % 500) / 4)
            for i in range(3000)]
    diff = Differential(spark, str(tmp_path), {"t": "id INT, v INT, g INT, d DECIMAL(8,2)"}, views)
    try:
        diff.step({"t": [(r, 1) for r in rows] + [(rows[5], 1)]})
        held = Counter(rows + [rows[5]])
        by_v = sorted((r for r in rows if r[1] is not None), key=lambda r: r[1])
        for change in ([(by_v[0], -1), (by_v[-1], -1)],  # both ends leave
                       [(r, -1) for r in by_v[1:20]] + [(r, -1) for r in by_v[-20:-1]],  # many at each end
                       [((9000, -5, 9, Decimal("99.5")), 2), ((9001, None, 5, None), 1)],  # new ends, twice
                       [((9000, -5, 9, Decimal("99.5")), -1)]):  # one of the two copies leaves
            diff.step({"t": change})
            tick = diff.pipeline.last_tick
            assert tick.path == "arranged", tick.why
            assert tick.rows_read < 1000, tick.rows_read  # both views read all 3,000 rows before
            held.update({r: w for r, w in change})
        diff.step({"t": [(r, -w) for r, w in held.items() if w]})  # no rows: one row of NULLs
        diff.step({"t": [(rows[7], 1)]})
    finally:
        diff.close()


def test_tumbling_and_hopping_windows_from_epoch_seconds(spark, tmp_path):
    """Windows written as epoch arithmetic (Nexmark's q5/q7 shape): Spark's
    timestamp_seconds() and unix_seconds() (which truncates) in DuckDB, in UTC."""
    views = {
        "per_10s": "SELECT timestamp_seconds(floor(unix_seconds(ts) / 10) * 10) AS w, COUNT(*) AS n, MAX(v) AS top "
                   "FROM events GROUP BY 1",
        "hop": "SELECT w, COUNT(*) AS n FROM (" + " UNION ALL ".join(
            f"SELECT timestamp_seconds(floor(unix_seconds(ts) / 2) * 2 - {k}) AS w FROM events" for k in (0, 2, 4)
        ) + ") GROUP BY w",
    }
    diff = Differential(spark, str(tmp_path), {"events": "id INT, ts TIMESTAMP, v INT"}, views)
    t0 = datetime(2026, 3, 1, 23, 59, 51)
    try:
        diff.step({"events": [((i, t0 + timedelta(seconds=3.7 * i), i), 1) for i in range(6)]})
        diff.step({"events": [((1, t0 + timedelta(seconds=3.7), 1), -1), ((9, t0 + timedelta(seconds=13.9), 9), 1)]})
    finally:
        diff.close()


def test_joins_on_computed_keys_probe_arrangements_by_them(spark, tmp_path):
    """``ON o.cust % 3 = c.id``, ``ON lower(o.status) = lower(c.name)``: each expression key
    is computed as a column of its side before the join (:mod:`.sql.join_keys`), so a tick
    of either side, or both, probes an arrangement by the key (a tick of customers read
    every order before); ``<=>`` between the sides is a key too, NULL matching NULL. A key
    computed over an aggregate's stored output (``t.n + 1``) is kept with those rows, in a
    state of its own, arranged by it."""
    orders = [((i, i if i % 5 else None, Decimal(i), i % 2 if i % 3 else None, ("Ann", "bob", None)[i % 3]), 1)
              for i in range(1, 9)]
    ticks = [{"orders": orders[:5], "customers": [((1, "ann", "eu"), 1), ((2, "BOB", "us"), 1)]},
             {"orders": orders[5:] + [(orders[0][0], -1)]},
             {"customers": [((0, "cy", "eu"), 1), ((1, "ann", "eu"), -1), ((3, None, "us"), 1),
                            ((None, "ANN", "us"), 1)]},
             {"orders": [((20, 3, Decimal(9), 1, "cy"), 1), (orders[1][0], -1)],
              "customers": [((4, "Ann", "eu"), 1), ((2, "BOB", "us"), -1)]}]
    diff = Differential(spark, str(tmp_path), SOURCES, {
        "mod_join": "SELECT o.id, c.name FROM orders o JOIN customers c ON o.cust % 3 = c.id",
        "both_computed": "SELECT o.id, c.id AS cid FROM orders o JOIN customers c "
                         "ON lower(o.status) = lower(c.name) AND o.qty <=> c.id % 2",
        "left_computed": "SELECT c.id, o.id AS oid FROM customers c LEFT JOIN orders o ON c.id = o.cust + 1",
        "over_totals": "SELECT c.name, t.n FROM (SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust) t "
                       "JOIN customers c ON t.n + 1 = c.id"})
    try:
        for tick in ticks:
            diff.step(tick)
            assert diff.pipeline.last_tick.path == "arranged", diff.pipeline.last_tick.why
    finally:
        diff.close()


def test_a_view_failing_on_its_input_is_set_aside_and_rebuilt_when_the_cause_goes(spark, tmp_path):
    """A division by zero or a cast overflow in one view's SQL: that view and the views
    reading it keep their last contents and are named as failed with the cause; the others
    commit the tick. A tick that changes none of a failed view's sources leaves it aside
    (it would fail the same way) and runs on arrangements. Once the bad rows are gone, the
    next tick rebuilds the failed views from retained input: every view is the batch
    answer again."""
    views = {"ratio": "SELECT id, a / b AS r FROM t",
             "ratio_count": "SELECT COUNT(*) AS n FROM ratio",
             "total": "SELECT SUM(a) AS s, COUNT(*) AS n FROM t",
             "narrow": "SELECT id, CAST(a AS TINYINT) AS a8 FROM t",
             "other": "SELECT SUM(x) AS s FROM u"}
    diff = Differential(spark, str(tmp_path), {"t": "id INT, a INT, b INT", "u": "x INT"}, views)
    try:
        diff.step({"t": [((1, 10, 2), 1), ((2, 20, 4), 1)]})
        before = {v: sorted(diff.pipeline.snapshot(v).collect()) for v in views}
        bad = [((3, 30, 0), 1), ((4, 200, 1), 1)]
        for delta in (bad, [((5, 5, 5), 1)]):  # then a tick whose own rows are fine: still failed
            diff.step({"t": delta}, check=False)
            failed = diff.pipeline.failed
            assert set(failed) == {"ratio", "ratio_count", "narrow"}, failed
            assert failed["ratio"].startswith("DIVIDE_BY_ZERO") and failed["narrow"].startswith("CAST_OVERFLOW")
            assert failed["ratio_count"] == "reads ratio, which failed"
            diff.check(["total"])
            assert {v: sorted(diff.pipeline.snapshot(v).collect()) for v in failed} == \
                {v: before[v] for v in failed}  # their last good contents
        diff.step({"u": [((7,), 1)]}, check=False)
        assert diff.pipeline.last_tick.path == "arranged", diff.pipeline.last_tick.why
        assert set(diff.pipeline.failed) == {"ratio", "ratio_count", "narrow"}
        diff.check(["total", "other"])
        again = Pipeline(spark, str(tmp_path))  # what failed is committed with the tick
        assert set(again.failed) == {"ratio", "ratio_count", "narrow"}
        again.close()
        diff.step({"t": [(r, -w) for r, w in bad]})  # the bad rows go: all views equal batch
        assert diff.pipeline.failed == {}
        diff.step({"t": [((6, 1, 1), 1)]})
        assert diff.pipeline.last_tick.path == "arranged", diff.pipeline.last_tick.why
    finally:
        diff.close()


@pytest.mark.parametrize("placement", ["auto", "tasks"])
def test_a_view_failing_on_the_first_tick_is_set_aside_on_arrangements(spark, tmp_path, placement):
    """A view whose SQL fails on the first tick's rows (a division by zero): the other
    views build their state on arrangements in that tick (in the driver, or in Spark
    tasks), the failed one is set aside with the cause; once the bad row goes, it is built
    from retained input (consolidated with the tick's deletes, so the bad row is not
    computed on) and every view is the batch answer, each tick on arrangements."""
    views = {"ratio": "SELECT id, a / b AS r FROM t", "total": "SELECT SUM(a) AS s, COUNT(*) AS n FROM t",
             "by_b": "SELECT b, COUNT(*) AS n, MAX(a) AS top FROM t GROUP BY b"}
    diff = Differential(spark, str(tmp_path), {"t": "id INT, a INT, b INT"}, views, placement=placement)
    path = "arranged" if placement == "auto" else "tasks"
    try:
        diff.step({"t": [((1, 10, 2), 1), ((2, 20, 0), 1), ((3, 30, 2), 1)]}, check=False)
        assert diff.pipeline.last_tick.path == path, diff.pipeline.last_tick.why
        assert set(diff.pipeline.failed) == {"ratio"} and diff.pipeline.failed["ratio"].startswith("DIVIDE_BY_ZERO")
        diff.check(["total", "by_b"])
        diff.step({"t": [((4, 5, 1), 1)]}, check=False)  # the failed view's source, still failing
        assert set(diff.pipeline.failed) == {"ratio"}
        diff.check(["total", "by_b"])
        diff.step({"t": [((2, 20, 0), -1), ((5, 7, 7), 1)]})  # the bad row goes: all views equal batch
        assert diff.pipeline.failed == {} and diff.pipeline.last_tick.path == path, diff.pipeline.last_tick.why
        diff.step({"t": [((6, 1, 1), 1)]})
        assert diff.pipeline.last_tick.path == path, diff.pipeline.last_tick.why
    finally:
        diff.close()


@pytest.mark.parametrize("placement, path, rehearsed, form", [
    ("auto", "arranged", 1000, "rows"), ("tasks", "tasks", 1000, "rows"), ("tasks", "tasks", 0, "rows"),
    ("auto", "arranged", 1000, "dataframe"), ("tasks", "tasks", 1000, "dataframe")])
def test_a_data_error_on_arrangements_sets_aside_the_views_computing_it(spark, tmp_path, monkeypatch, placement,
                                                                        path, rehearsed, form):
    """A data error met by a tick on arrangements (a division by zero in a Map, a cast of
    a malformed string in a join key), in the driver or in Spark tasks (met by the
    rehearsal of a job's first rows, or by the job), names its node: the views whose
    circuit holds it, and the views reading them, are set aside with Spark's error, and
    the tick runs again on arrangements for the others; later ticks run where they ran.
    The DataFrame evaluator never runs (it computed such a tick whole to find the failing
    views)."""
    from dbt_incremental_stream.runtime import on_arrangements

    monkeypatch.setattr(on_arrangements, "REHEARSAL_ROWS", rehearsed)
    views = {"ratio": "SELECT id, a / b AS r FROM t", "doubled": "SELECT id, r * 2 AS r2 FROM ratio",
             "total": "SELECT SUM(a) AS s, COUNT(*) AS n FROM t",
             "keyed": "SELECT t.id, u.w FROM t JOIN u ON t.code = u.k"}
    with spark_conf(spark, {"spark.sql.ansi.enabled": "true"}):
        diff = Differential(spark, str(tmp_path), {"t": "id INT, a INT, b INT, code STRING", "u": "k INT, w INT"},
                            views, placement=placement, form=form)
        evaluated = _evaluator_runs(diff)
        try:
            diff.step({"t": [((1, 10, 2, "1"), 1), ((2, 20, 4, "2"), 1)], "u": [((1, 5), 1), ((2, 6), 1)]})
            diff.step({"t": [((3, 30, 0, "1"), 1), ((4, 1, 1, "x"), 1)]}, check=False)
            assert diff.pipeline.failed.keys() == {"ratio", "doubled", "keyed"}, diff.pipeline.failed
            assert diff.pipeline.failed["ratio"].startswith("DIVIDE_BY_ZERO")
            assert diff.pipeline.failed["keyed"].startswith("CAST_INVALID_INPUT")
            assert diff.pipeline.last_tick.path == path, diff.pipeline.last_tick.why
            diff.check(["total"])
            diff.step({"t": [((3, 30, 0, "1"), -1), ((4, 1, 1, "x"), -1), ((5, 7, 7, "2"), 1)]})
            assert diff.pipeline.failed == {} and diff.pipeline.last_tick.path == path
            assert evaluated == [], evaluated
        finally:
            diff.close()


def test_a_data_error_in_spark_s_window_between_stages_sets_aside_its_views(spark, tmp_path):
    """A window Spark computes between two stages of a tick in tasks (a frame of months:
    no Arrow form) that meets a data error (a running BIGINT sum overflowing under ANSI)
    names its node: its view is set aside with Spark's error, the others commit in tasks,
    and once the rows go the view is built again there; no DataFrame evaluator."""
    views = {"monthly": "SELECT id, p, SUM(v) OVER (PARTITION BY p ORDER BY ts RANGE BETWEEN INTERVAL 1 MONTH "
                        "PRECEDING AND CURRENT ROW) AS s FROM t",
             "counts": "SELECT p, COUNT(*) AS n FROM t GROUP BY p"}
    big = 1 << 62
    with spark_conf(spark, {"spark.sql.ansi.enabled": "true"}):
        diff = Differential(spark, str(tmp_path), {"t": "id INT, p INT, v BIGINT, ts DATE"}, views,
                            placement="tasks")
        evaluated = _evaluator_runs(diff)
        try:
            diff.step({"t": [((1, 1, 5, date(2026, 1, 5)), 1), ((2, 2, 7, date(2026, 1, 9)), 1)]})
            bad = [((3, 1, big, date(2026, 1, 20)), 1), ((4, 1, big, date(2026, 2, 1)), 1)]
            diff.step({"t": bad}, check=False)
            assert diff.pipeline.failed.keys() == {"monthly"}, diff.pipeline.failed
            assert "ARITHMETIC_OVERFLOW" in diff.pipeline.failed["monthly"], diff.pipeline.failed
            assert diff.pipeline.last_tick.path == "tasks", diff.pipeline.last_tick.why
            diff.check(["counts"])
            diff.step({"t": [(row, -1) for row, _ in bad] + [((5, 2, 1, date(2026, 1, 30)), 1)]})
            assert diff.pipeline.failed == {} and diff.pipeline.last_tick.path == "tasks", diff.pipeline.last_tick.why
            assert evaluated == [], evaluated
        finally:
            diff.close()


@pytest.mark.parametrize("ansi", ["false", "true"])
def test_values_arrow_declines_on_a_tick_s_rows_are_spark_s_between_stages_in_tasks(spark, tmp_path, ansi):
    """A Map or Filter Arrow computes but declines on a tick's rows in a task (a division
    by zero, an integer overflow: Spark decides what they give) is computed by Spark
    between stages for that tick: its NULL (ANSI off) or its error (on, the view set
    aside) is Spark's; the tick and the later ones stay in tasks."""
    views = {"ratio": "SELECT id, a / b AS r FROM t", "picky": "SELECT id FROM t WHERE 100 / b > 1",
             "total": "SELECT SUM(a) AS s FROM t"}
    if ansi == "true":  # (DuckDB, the oracle here, has no wrapping INT)
        views["product"] = "SELECT id, a * 100000 AS p FROM t"
    with spark_conf(spark, {"spark.sql.ansi.enabled": ansi}):
        diff = Differential(spark, str(tmp_path), {"t": "id INT, a INT, b INT"}, views, placement="tasks")
        evaluated = _evaluator_runs(diff)
        try:
            diff.step({"t": [((1, 10, 2), 1), ((2, 20, 4), 1)]})
            diff.step({"t": [((3, 30, 0), 1), ((4, 40000, 1), 1)]}, check=ansi == "false")
            assert diff.pipeline.last_tick.path == "tasks", diff.pipeline.last_tick.why
            if ansi == "true":
                assert diff.pipeline.failed.keys() == {"ratio", "picky", "product"}, diff.pipeline.failed
                diff.check(["total"])
            diff.step({"t": [((3, 30, 0), -1), ((4, 40000, 1), -1), ((5, 7, 7), 1)]})
            assert diff.pipeline.failed == {} and diff.pipeline.last_tick.path == "tasks"
            assert evaluated == [], evaluated
        finally:
            diff.close()


@pytest.mark.parametrize("rehearsed", [1000, 0])
def test_a_window_declined_on_a_tick_s_rows_in_tasks_is_spark_s_between_stages(spark, tmp_path, monkeypatch,
                                                                                 rehearsed):
    """A window Arrow computes but declines on the rows a tick touches in tasks (a RANGE
    frame over an order value near BIGINT's limit: its bounds are Spark's to compute; met
    by the rehearsal of the job's first rows, or by the job) is Spark's window between two
    stages for that tick, over the touched partitions' rows: the tick stays in tasks, no
    DataFrame evaluator, and so do the later ones."""
    from dbt_incremental_stream.runtime import on_arrangements

    monkeypatch.setattr(on_arrangements, "REHEARSAL_ROWS", rehearsed)
    views = {"near": "SELECT id, p, SUM(v) OVER (PARTITION BY p ORDER BY o RANGE BETWEEN 1 PRECEDING AND "
                     "CURRENT ROW) AS s FROM t"}
    diff = Differential(spark, str(tmp_path), {"t": "id INT, p INT, o BIGINT, v INT"}, views, placement="tasks")
    evaluated = _evaluator_runs(diff)
    try:
        diff.step({"t": [((1, 1, 1, 10), 1), ((2, 1, 2, 20), 1), ((3, 2, 1, 30), 1), ((4, 2, 2, 40), 1)]})
        for tick in ([((5, 1, 1 << 62, 50), 1), ((7, 1, (1 << 63) - 1, 5), 1)], [((6, 2, 3, 60), 1)],
                     [((5, 1, 1 << 62, 50), -1), ((8, 1, 1 << 62, 1), 1)]):
            diff.step({"t": tick})
            assert diff.pipeline.last_tick.path == "tasks", diff.pipeline.last_tick.why
        assert evaluated == [], evaluated
    finally:
        diff.close()


def test_a_probe_past_what_the_driver_holds_runs_in_tasks(spark, tmp_path, monkeypatch):
    """A small tick whose probe matches more state rows than the driver holds (a join on
    a key most rows share, a cross join) runs the same operators in Spark tasks, not on
    the DataFrame evaluator; the next small tick is the driver's again."""
    from dbt_incremental_stream.runtime import arranged

    monkeypatch.setattr(arranged, "PROBE_ROWS", 5)
    views = {"pairs": "SELECT t.id, u.id AS uid FROM t JOIN u ON t.k = u.k",
             "crossed": "SELECT t.id, u.w FROM t CROSS JOIN u"}
    diff = Differential(spark, str(tmp_path), {"t": "id INT, k INT", "u": "id INT, k INT, w INT"}, views)
    evaluated = _evaluator_runs(diff)
    try:
        diff.step({"u": [((i, 1, i * 10), 1) for i in range(8)] + [((9, 2, 0), 1)], "t": [((1, 2), 1)]})
        diff.step({"t": [((2, 1), 1)]})  # matches 8 rows of u: past the bound
        assert diff.pipeline.last_tick.path == "tasks", diff.pipeline.last_tick.why
        monkeypatch.setattr(arranged, "PROBE_ROWS", 100)
        diff.step({"t": [((3, 1), 1), ((1, 2), -1)]})
        assert diff.pipeline.last_tick.path == "arranged", diff.pipeline.last_tick.why
        assert evaluated == [], evaluated
    finally:
        diff.close()


def test_rows_are_taken_as_create_dataframe_takes_them(spark, tmp_path):
    """Rows handed to ``Pipeline.step`` are read as Spark reads them: an int for a
    DOUBLE, a float for a DECIMAL, lists, a float weight; a NULL weight is refused."""
    pipe = Pipeline(spark, str(tmp_path / "state"))
    pipe.add_source("t", "d DECIMAL(10,2), x DOUBLE, s STRING")
    try:
        pipe.step({"t": [((1.5, 2, "a"), 1), ([Decimal("2.25"), 3.5, None], 2.0), ((7, 2**60, "b"), 1)]})
        assert sorted(pipe.snapshot("t").collect(), key=str) == sorted(
            [(Decimal("1.50"), 2.0, "a"), (Decimal("2.25"), 3.5, None), (Decimal("2.25"), 3.5, None),
             (Decimal("7.00"), float(2**60), "b")], key=str)
        with pytest.raises(TypeError):
            pipe.step({"t": [((1, 1, "c"), None)]})
    finally:
        pipe.close()


def test_a_dataframe_delta_is_sized_by_its_rows(spark, tmp_path, monkeypatch):
    """A DataFrame made from Python rows (Spark's size estimate of it is unbounded) or read
    from files takes the arranged path in the driver when it has few rows, as the same rows
    would; one made from pandas (local data) is read without a Spark job; past
    ``ARRANGED_ROWS`` rows the same operators run in Spark tasks, which report where their
    time went. The view is right on every tick."""
    from dbt_incremental_stream.runtime import on_arrangements

    pipe = Pipeline(spark, str(tmp_path / "state"))
    pipe.add_source("orders", "id BIGINT, cust INT, amount DOUBLE")
    pipe.add_view("by_cust", "SELECT cust, COUNT(*) AS n, SUM(amount) AS s FROM orders GROUP BY cust")
    schema = "id BIGINT, cust INT, amount DOUBLE, _w BIGINT"
    held: dict[tuple, int] = {}
    tracker = spark.sparkContext.statusTracker()
    jobs: list[int] = []  # the Spark jobs each tick ran

    def step(rows: list[tuple], df) -> str:
        for *r, w in rows:
            held[tuple(r)] = held.get(tuple(r), 0) + w
        before = set(tracker.getJobIdsForGroup())
        pipe.step({"orders": df})
        jobs.append(len(set(tracker.getJobIdsForGroup()) - before))
        want = {}
        for (_, cust, amount), w in held.items():
            n, s = want.get(cust, (0, 0.0))
            want[cust] = (n + w, s + amount * w)
        assert sorted(tuple(r) for r in pipe.snapshot("by_cust").collect()) == sorted(
            (c, n, s) for c, (n, s) in want.items() if n)
        return pipe.last_tick.path

    try:
        first = [(i, i % 3, float(i), 1) for i in range(10)]
        step(first, spark.createDataFrame(first, schema))
        rows = spark.createDataFrame(first, schema).select("id")  # its estimate is unbounded: it is collected whole
        assert rows._jdf.queryExecution().optimizedPlan().stats().sizeInBytes() > on_arrangements.ARRANGED_BYTES
        assert on_arrangements.collects_whole(rows)
        lines = spark.createDataFrame(spark.sparkContext.textFile(str(tmp_path / "state")), "s STRING")
        assert not on_arrangements.collects_whole(lines)  # an RDD over files: through a limit
        change = [(3, 0, 3.0, -1), (20, 2, 20.0, 1)]
        assert step(change, spark.createDataFrame(change, schema).select("id", "cust", "amount", "_w")) == "arranged"
        assert jobs[-1] == 0  # Python rows read as they are
        written = [(21, 1, 21.0, 1), (4, 1, 4.0, -1)]
        spark.createDataFrame(written, schema).write.parquet(str(tmp_path / "changes"))
        assert step(written, spark.read.parquet(str(tmp_path / "changes"))) == "arranged"
        assert jobs[-1] > 0  # the files' scan
        local = [(22, 0, 22.0, 1), (5, 2, 5.0, -1)]
        frame = spark.createDataFrame(pd.DataFrame(local, columns=["id", "cust", "amount", "w"]))
        assert step(local, frame.select("id", "cust", "amount", F.col("w").alias("_w"))) == "arranged"
        assert jobs[-1] == 0
        monkeypatch.setattr(on_arrangements, "ARRANGED_ROWS", 2)
        many = [(30 + i, i % 3, 0.5, 1) for i in range(3)]
        assert step(many, spark.createDataFrame(many, schema)) == "tasks"
        spent = pipe.last_tick.in_tasks  # where the tasks' time went, summed over them
        assert set(spent) == set(PHASES) and all(t >= 0 for t in spent.values()) and spent["compute"] > 0
        gone = [(30, 0, 0.5, -1)]
        assert step(gone, spark.createDataFrame(gone, schema)) == "arranged"
        monkeypatch.setattr(on_arrangements, "ARRANGED_ROWS", 100)
        monkeypatch.setattr(on_arrangements, "ARRANGED_BYTES", 0)  # files estimated too large: to tasks,
        monkeypatch.setattr(on_arrangements, "FETCH_BYTES", 0)  # without a fetch through a limit first
        read = [(40, 2, 1.5, 1), (31, 1, 0.5, -1)]
        spark.createDataFrame(read, schema).write.parquet(str(tmp_path / "large"))
        assert step(read, spark.read.parquet(str(tmp_path / "large"))) == "tasks"
    finally:
        pipe.close()


@pytest.mark.parametrize("rehearsed", [1000, 0])
def test_an_aggregate_declined_on_a_tick_s_rows_in_tasks_is_spark_s_between_stages(spark, tmp_path, monkeypatch,
                                                                                    rehearsed):
    """An aggregate Arrow declines on the groups a tick touches in tasks (with ANSI on, a
    BIGINT sum past its type, a DECIMAL(38, 0) one past 38 digits: Spark decides, with its
    error; met by the rehearsal of the job's first rows, or by the job) is Spark's between
    two stages for that tick, over the touched groups' partial sums (a linear aggregate,
    keyless too) or rows (another): its views are set aside with Spark's error, the
    others commit in tasks, and once the rows go the views are built again there; no
    DataFrame evaluator."""
    from dbt_incremental_stream.runtime import on_arrangements

    monkeypatch.setattr(on_arrangements, "REHEARSAL_ROWS", rehearsed)
    views = {"sums": "SELECT g, SUM(v) AS s, COUNT(*) AS n FROM t GROUP BY g",
             "mixed": "SELECT g, MAX(v) AS m, SUM(v) AS s FROM t GROUP BY g",
             "distinct": "SELECT g, MIN(v) AS lo, SUM(DISTINCT v) AS s FROM t GROUP BY g",
             "averages": "SELECT g, AVG(d) AS a, SUM(d) AS sd FROM t GROUP BY g",
             "total": "SELECT COUNT(*) AS n, SUM(v) AS s, AVG(d) AS a FROM t",
             "counts": "SELECT g, COUNT(*) AS n, MAX(d) AS top FROM t GROUP BY g"}
    big, wide = 1 << 62, Decimal(9 * 10 ** 37)
    with spark_conf(spark, {"spark.sql.ansi.enabled": "true"}):
        diff = Differential(spark, str(tmp_path), {"t": "id INT, g INT, v BIGINT, d DECIMAL(38,0)"}, views,
                            placement="tasks")
        evaluated = _evaluator_runs(diff)
        try:
            diff.step({"t": [((1, 1, 5, Decimal(1)), 1), ((2, 2, 7, Decimal(2)), 1), ((3, 1, 9, Decimal(3)), 1)]})
            bad = [((4, 1, big, wide), 1), ((5, 1, big + 1, wide), 1)]
            diff.step({"t": bad}, check=False)
            assert diff.pipeline.failed.keys() == {"sums", "mixed", "distinct", "averages", "total"}, \
                diff.pipeline.failed
            assert all(why.split(":")[0].split(".")[0] in ("ARITHMETIC_OVERFLOW", "NUMERIC_VALUE_OUT_OF_RANGE",
                                                            "CAST_OVERFLOW")
                       for why in diff.pipeline.failed.values()), diff.pipeline.failed
            assert diff.pipeline.last_tick.path == "tasks", diff.pipeline.last_tick.why
            diff.check(["counts"])
            diff.step({"t": [(row, -1) for row, _ in bad] + [((6, 2, 1, Decimal(4)), 1)]})
            assert diff.pipeline.failed == {} and diff.pipeline.last_tick.path == "tasks", diff.pipeline.last_tick.why
            assert evaluated == [], evaluated
        finally:
            diff.close()


def _evaluator_runs(diff: Differential) -> list[str | None]:
    """The reasons of the ticks ``diff``'s pipeline runs on the DataFrame evaluator from now on."""
    evaluated: list[str | None] = []
    run = diff.pipeline._dataframes.run
    diff.pipeline._dataframes.run = lambda *a: evaluated.append(a[-1]) or run(*a)  # type: ignore[method-assign]
    return evaluated
