"""The compiler without Spark: plans, incremental circuits and compile-time errors."""
from __future__ import annotations

import pytest

from dbt_incremental_stream.circuit.incremental import Incrementalizer
from dbt_incremental_stream.circuit.operators import (
    Filter, GroupDiff, Input, Integral, Join, Map, Pad, Partials, Window, explain, walk,
)
from dbt_incremental_stream.errors import CompileError, UnsupportedSqlError
from dbt_incremental_stream.sql.compile import compile
from dbt_incremental_stream.sql.join_keys import key_columns

CATALOG = {
    "orders": Input("orders", ("id", "cust", "amount", "status")),
    "customers": Input("customers", ("id", "name", "region")),
    "items": Input("items", ("order_id", "sku", "price")),
}


@pytest.mark.parametrize("sql, construct", [
    ("SELECT id FROM orders LIMIT 3", "LIMIT / OFFSET without ORDER BY"),
    ("SELECT id, rand() FROM orders", "rand()"),
    ("SELECT cust, collect_list(DISTINCT id) FROM orders GROUP BY cust", "DISTINCT in aggregate function"),
    ("SELECT cust, (SELECT collect_list(id) FROM orders) AS l FROM orders", "collect_list() in a scalar subquery"),
    ("SELECT cust, grouping(cust) FROM orders GROUP BY cust", "without GROUPING SETS, ROLLUP or CUBE"),
    ("SELECT size(explode(array(1, 2))) FROM orders", "explode() inside an expression"),
    ("SELECT o.id FROM orders o JOIN customers c ON o.cust IN (SELECT id FROM items)", "JOIN condition"),
    ("SELECT cust FROM orders GROUP BY cust ORDER BY (SELECT MAX(id) FROM customers)", "subquery outside"),
    ("SELECT id FROM orders o WHERE amount > (SELECT price FROM items i WHERE i.order_id = o.id)",
     "scalar subquery that is not a single aggregate"),
    ("SELECT id FROM orders o WHERE cust IN (SELECT id FROM customers c ORDER BY id LIMIT 2)",
     "LIMIT in a subquery"),
    ("SELECT o.id FROM orders o, LATERAL (SELECT c.id FROM customers c WHERE c.id = o.cust ORDER BY c.id LIMIT 1) t",
     "LIMIT in a LATERAL subquery"),
    ("SELECT o.id FROM orders o RIGHT JOIN LATERAL (SELECT o.amount AS x) t ON TRUE", "RIGHT JOIN LATERAL"),
    ("SELECT * FROM VALUES (1, 2) AS t(a, b)", "VALUES"),
    ("WITH RECURSIVE chain AS (SELECT id FROM orders UNION SELECT o.id FROM orders o JOIN chain c "
     "ON o.cust = c.id) SELECT * FROM chain", "WITH RECURSIVE other than anchor UNION ALL"),
    ("SELECT window(id, '10 minutes') AS w, COUNT(*) FROM orders GROUP BY 1", "window()"),
])
def test_unsupported_constructs_are_named_with_position(sql, construct):
    with pytest.raises(UnsupportedSqlError) as err:
        compile(sql, CATALOG, view="my_model")
    assert construct in str(err.value)
    assert "my_model" in str(err.value)
    assert err.value.line is not None and err.value.col is not None


def test_position_points_at_the_construct():
    sql = "SELECT id,\n       cust\nFROM orders\nTABLESAMPLE (10 PERCENT)"
    with pytest.raises(UnsupportedSqlError) as err:
        compile(sql, CATALOG, view="v")
    assert err.value.line == 4


def test_unknown_relation_and_bad_sql():
    with pytest.raises(CompileError, match="nope"):
        compile("SELECT * FROM nope", CATALOG, view="v")
    with pytest.raises(CompileError, match="parse"):
        compile("SELECT FROM WHERE", CATALOG, view="v")
    with pytest.raises(CompileError, match="one SELECT"):
        compile("SELECT 1 FROM orders; SELECT 2 FROM orders", CATALOG, view="v")


def test_single_relation_predicates_go_below_the_join_and_joins_follow_equalities():
    p = compile("SELECT c.name FROM orders o, items i, customers c "
             "WHERE o.id = i.order_id AND c.id = o.cust AND i.price < 5 AND c.region = 'eu'", CATALOG)
    joins = [op for op in walk(p) if isinstance(op, Join)]
    assert len(joins) == 2 and all(j.keys for j in joins), "no cross product"
    filters = [op for op in walk(p) if isinstance(op, Filter)]
    assert {f.predicate for f in filters} == {"`i__price` < 5", "`c__region` = 'eu'"}
    assert all(not isinstance(f.input, Join) for f in filters)


def test_join_state_shares_the_source_integral():
    p = compile("SELECT o.id, c.name FROM orders o JOIN customers c ON o.cust = c.id", CATALOG)
    circuit = Integral(Incrementalizer()(p))
    integrals = {op.input for op in walk(circuit) if isinstance(op, Integral)}
    assert CATALOG["orders"] in integrals and CATALOG["customers"] in integrals


def test_linear_aggregates_keep_partial_sums_and_others_keep_rows():
    linear = Incrementalizer()(compile("SELECT cust, SUM(amount), COUNT(*) FROM orders GROUP BY cust", CATALOG))
    assert any(isinstance(op, Partials) for op in walk(linear))
    general = Incrementalizer()(compile("SELECT cust, MAX(amount) FROM orders GROUP BY cust", CATALOG))
    diff = next(op for op in walk(general) if isinstance(op, GroupDiff))
    assert not diff.linear
    text = explain(general)
    assert "GroupDiff" in text and "z⁻¹" in text


def test_ungrouped_column_is_an_error():
    with pytest.raises(CompileError, match="neither grouped nor aggregated"):
        compile("SELECT cust, id, COUNT(*) FROM orders GROUP BY cust", CATALOG, view="v")


def test_node_ids_are_stable_and_structural():
    a = compile("SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust", CATALOG)
    b = compile("select CUST, count(*) as n from ORDERS group by cust", CATALOG)
    c = compile("SELECT cust, COUNT(*) AS n FROM orders WHERE id > 0 GROUP BY cust", CATALOG)
    assert a.id == b.id and a.id != c.id


def test_a_join_key_repeated_in_every_or_branch_is_a_join_key():
    p = compile("SELECT o.id FROM orders o, customers c WHERE (o.cust = c.id AND c.region = 'eu') "
             "OR (o.cust = c.id AND o.amount > 5)", CATALOG)
    joins = [op for op in walk(p) if isinstance(op, Join)]
    assert len(joins) == 1 and joins[0].keys


def test_correlated_subqueries_become_keyed_joins_not_cross_products():
    p = compile("SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM items i WHERE i.order_id = o.id) "
             "AND o.amount > (SELECT AVG(price) FROM items i WHERE i.order_id = o.id) "
             "AND o.cust NOT IN (SELECT c.id FROM customers c WHERE c.name = o.status)", CATALOG)
    joins = [op for op in walk(p) if isinstance(op, Join)]
    assert len(joins) >= 3 and all(j.keys for j in joins)


def test_outer_join_pads_the_unmatched_rows():
    p = compile("SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON o.cust = c.id", CATALOG)
    pads = [op for op in walk(p) if isinstance(op, Pad)]
    assert len(pads) == 1 and pads[0].like.columns == ("c__id", "c__name")


def test_per_group_top_k_keeps_only_the_kept_rows():
    for sql in ["SELECT * FROM (SELECT cust, id, ROW_NUMBER() OVER (PARTITION BY cust ORDER BY id) AS rn "
                "FROM orders) t WHERE rn <= 2",
                "SELECT cust, id FROM orders QUALIFY RANK() OVER (PARTITION BY cust ORDER BY id DESC) = 1"]:
        p = compile(sql, CATALOG)
        windows = [op for op in walk(p) if isinstance(op, Window)]
        assert len(windows) == 1 and windows[0].keep, sql
        assert not any(isinstance(op, Filter) for op in walk(p)), sql


def test_a_select_list_subquery_ordered_by_position_compiles():
    """sqlglot's qualify asserted on ``ORDER BY 2`` naming an unaliased subquery; the view
    compiles as it does without the ORDER BY, the column named as qualify names it."""
    catalog = {"t1": Input("t1", ("a", "c"))}
    ordered = compile("SELECT a, (SELECT max(c) FROM t1) FROM t1 ORDER BY 2", catalog)
    assert explain(ordered) == explain(compile("SELECT a, (SELECT max(c) FROM t1) FROM t1", catalog))
    assert ordered.columns == ("a", "_col_1")


def test_renamed_relations_keep_the_model_s_lines():
    """The engine's names replace a model's relations in its own text: an error points at
    the line the user wrote, and the old names stay usable as qualifiers."""
    from dbt_incremental_stream.sql.relations import engine_name, referenced, rename

    sql = ("select o.id,\n       shop.customers.region\nfrom shop.orders as o\n"
           "join `shop`.customers on customers.id = o.cust\nlimit 5")
    renamed = rename(sql, {r: engine_name(r) for r in referenced(sql)})
    assert renamed.split("\n")[1:4] == ["       customers.region", "from shop__orders as o",
                                         "join shop__customers AS customers on customers.id = o.cust"]
    catalog = {"shop__orders": Input("shop__orders", ("id", "cust")),
               "shop__customers": Input("shop__customers", ("id", "region"))}
    with pytest.raises(UnsupportedSqlError) as err:
        compile(renamed, catalog, view="m")
    assert err.value.line == 5  # LIMIT where the model has it
    assert "Join" in explain(compile(renamed.rsplit("\n", 1)[0], catalog, view="m"))


def test_keys_spark_casts_to_compare_join_on_their_casts():
    """The casts Spark's analysis makes of two keys' types (given by the runtime: the
    front end has no types) become each side's computed key column, and ON follows; a
    pair given no casts keeps its key, and a plan already keyed so is left as it is."""
    plan = compile("SELECT o.id, c.name FROM orders o JOIN customers c ON o.status = c.id AND o.cust = c.region",
                   CATALOG, view="v")
    join = next(op for op in walk(plan) if type(op) is Join)
    asked: list[tuple[tuple[str, str], ...]] = []

    def casts(j: Join) -> list[tuple[str | None, str | None]]:
        asked.append(j.keys)
        return [("BIGINT", "BIGINT") if "status" in a else (None, None) for a, _ in j.keys]

    cast = key_columns(plan, casts)
    joined = next(op for op in walk(cast) if type(op) is Join)
    sides = [op for op in joined.inputs if isinstance(op, Map)]
    assert asked == [join.keys] and len(sides) == 2
    texts = [dict((n, e) for n, e in side.exprs) for side in sides]
    assert any("CAST(`o__status` AS BIGINT)" in e for e in texts[0].values())
    assert any("CAST(`c__id` AS BIGINT)" in e for e in texts[1].values())
    assert len(joined.keys) == 2 and ("`o__cust`", "`c__region`") in joined.keys
    assert "`o__status`" not in joined.on and "`o__cust` = `c__region`" in joined.on
    assert cast.columns == plan.columns
    assert explain(key_columns(cast, lambda j: [(None, None)] * len(j.keys))) == explain(cast)
