"""TPC-H as a changing workload: DuckDB's dbgen data, the 22 queries in Spark SQL, and
refresh ticks in the manner of the spec's RF1/RF2 (new orders with their lineitems,
deleted orders with theirs) plus updates of prices, statuses, discounts and balances.
DuckDB holds the current data, so a tick at any scale fetches only the changed rows.
Shared by ``bench/tpch.py`` and the TPC-H test.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import sqlglot

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
Row = tuple[Any, ...]
Changes = dict[str, list[tuple[Row, int]]]

#: updates per tick: (table, key columns, column, new values to pick from)
UPDATES = (
    ("orders", ("o_orderkey",), "o_orderstatus", ("'F'", "'O'", "'P'")),
    ("orders", ("o_orderkey",), "o_orderpriority", ("'1-URGENT'", "'2-HIGH'", "'5-LOW'")),
    ("lineitem", ("l_orderkey", "l_linenumber"), "l_discount", ("0.00", "0.05", "0.06", "0.10")),
    ("customer", ("c_custkey",), "c_acctbal", ("-100.00", "0.00", "2500.50", "9000.00")),
    ("partsupp", ("ps_partkey", "ps_suppkey"), "ps_supplycost", ("1.00", "250.00", "999.99")),
)


def with_extension(benchmark: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the ``tpch`` or ``tpcds`` extension its pip package ships."""
    import importlib

    package = importlib.import_module(f"duckdb_extension_{benchmark}")
    path = (Path(package.__file__).parent / "extensions" / f"v{duckdb.__version__}"  # type: ignore[arg-type]
            / f"{benchmark}.duckdb_extension")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{path}'")
    return con


def connect(sf: float) -> duckdb.DuckDBPyConnection:
    """A DuckDB database holding TPC-H at scale factor ``sf``."""
    con = with_extension("tpch")
    con.execute(f"CALL dbgen(sf={sf})")
    return con


def queries(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """The 22 queries as shipped with the extension, in Spark SQL."""
    return {n: sqlglot.transpile(q, read="duckdb", write="spark")[0]
            for n, q in con.execute("SELECT query_nr, query FROM tpch_queries()").fetchall()}


def schemas(con: duckdb.DuckDBPyConnection, tables: tuple[str, ...] | list[str] = TABLES) -> dict[str, str]:
    """Spark DDL for each of ``tables``."""
    out = {}
    for t in tables:
        cols = con.execute(f"DESCRIBE {t}").fetchall()
        out[t] = ", ".join(f"{c[0]} {sqlglot.exp.DataType.build(c[1], dialect='duckdb').sql('spark')}" for c in cols)
    return out


@dataclass
class Refresh:
    """Holds back ``held_back`` of the orders (with their lineitems) to insert in later
    ticks; each tick inserts some, deletes as many current orders, and updates rows."""

    con: duckdb.DuckDBPyConnection
    held_back: float = 0.05
    ticks: int = 0

    def __post_init__(self) -> None:
        every = max(2, round(1 / self.held_back))
        self.con.execute(f"CREATE TABLE pool_orders AS SELECT * FROM orders WHERE hash(o_orderkey) % {every} = 0")
        self.con.execute("CREATE TABLE pool_lineitem AS SELECT * FROM lineitem "
                         "WHERE l_orderkey IN (SELECT o_orderkey FROM pool_orders)")
        self.con.execute("DELETE FROM lineitem WHERE l_orderkey IN (SELECT o_orderkey FROM pool_orders)")
        self.con.execute("DELETE FROM orders WHERE o_orderkey IN (SELECT o_orderkey FROM pool_orders)")

    def rows(self, table: str) -> list[Row]:
        return self.con.execute(f"SELECT * FROM {table}").fetchall()

    def tick(self, orders: int, updates: int) -> Changes:
        """``orders`` new orders and as many deleted ones (each with its lineitems), and
        ``updates`` updated rows of each kind in :data:`UPDATES`."""
        self.ticks += 1
        out: Changes = {t: [] for t in TABLES}
        c = self.con
        c.execute(f"CREATE OR REPLACE TEMP TABLE new_keys AS SELECT o_orderkey FROM pool_orders "
                  f"ORDER BY hash(o_orderkey, {self.ticks}) LIMIT {orders}")
        c.execute(f"CREATE OR REPLACE TEMP TABLE old_keys AS SELECT o_orderkey FROM orders "
                  f"ORDER BY hash(o_orderkey, {self.ticks}) LIMIT {orders}")
        for table, key in (("orders", "o_orderkey"), ("lineitem", "l_orderkey")):
            gone = f"{key} IN (SELECT o_orderkey FROM old_keys)"
            out[table] += [(r, -1) for r in c.execute(f"SELECT * FROM {table} WHERE {gone}").fetchall()]
            c.execute(f"DELETE FROM {table} WHERE {gone}")
            added = f"{key} IN (SELECT o_orderkey FROM new_keys)"
            out[table] += [(r, 1) for r in c.execute(f"SELECT * FROM pool_{table} WHERE {added}").fetchall()]
            c.execute(f"INSERT INTO {table} SELECT * FROM pool_{table} WHERE {added}")
            c.execute(f"DELETE FROM pool_{table} WHERE {added}")
        for i, (table, keys, column, values) in enumerate(UPDATES):
            key = ", ".join(keys)
            c.execute(f"CREATE OR REPLACE TEMP TABLE upd AS SELECT {key} FROM {table} "
                      f"ORDER BY hash({key}, {self.ticks}, {i}) LIMIT {updates}")
            match = f"({key}) IN (SELECT ({key}) FROM upd)"
            out[table] += [(r, -1) for r in c.execute(f"SELECT * FROM {table} WHERE {match}").fetchall()]
            pick = f"[{', '.join(values)}][1 + (hash({key}, {self.ticks}) % {len(values)})::BIGINT]"
            c.execute(f"UPDATE {table} SET {column} = {pick} WHERE {match}")
            out[table] += [(r, 1) for r in c.execute(f"SELECT * FROM {table} WHERE {match}").fetchall()]
        return out
