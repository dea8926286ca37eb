"""TPC-DS as a changing workload: DuckDB's dsdgen data, the 99 queries in Spark SQL, and
refresh ticks on the fact tables (sales, returns and inventory rows held back and inserted
later, as many current rows deleted). DuckDB holds the current data, so a tick fetches
only the changed rows. Shared by ``bench/tpcds.py`` and the TPC-DS test.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import duckdb
import sqlglot

from . import tpch

#: the tables a refresh changes (TPC-DS's data maintenance inserts and deletes these)
FACTS = ("store_sales", "store_returns", "catalog_sales", "catalog_returns", "web_sales", "web_returns", "inventory")
Row = tuple[Any, ...]
Changes = dict[str, list[tuple[Row, int]]]


def connect(sf: float) -> duckdb.DuckDBPyConnection:
    """A DuckDB database holding TPC-DS at scale factor ``sf``."""
    con = tpch.with_extension("tpcds")
    con.execute(f"CALL dsdgen(sf={sf})")
    return con


def tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [name for (name,) in con.execute("SHOW TABLES").fetchall()]


def queries(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """The 99 queries as shipped with the extension, in Spark SQL."""
    return {n: sqlglot.transpile(q, read="duckdb", write="spark")[0]
            for n, q in con.execute("SELECT query_nr, query FROM tpcds_queries()").fetchall()}


def schemas(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Spark DDL for each table."""
    return tpch.schemas(con, tables(con))


@dataclass
class Refresh:
    """Holds back ``held_back`` of each fact table's rows to insert in later ticks; each
    tick inserts ``per_tick`` of them per table and deletes as many current rows."""

    con: duckdb.DuckDBPyConnection
    held_back: float = 0.02
    seed: int = 11
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        for t in FACTS:
            self.con.execute(f"ALTER TABLE {t} ADD COLUMN _rid BIGINT")
            self.con.execute(f"UPDATE {t} SET _rid = rowid")
            every = round(1 / self.held_back)
            self.con.execute(f"CREATE TABLE {t}_later AS SELECT * FROM {t} WHERE _rid % {every} = 0")
            self.con.execute(f"DELETE FROM {t} WHERE _rid % {every} = 0")

    def rows(self, table: str) -> tuple[list[str], list[Row]]:
        """A table's current rows (without the row id)."""
        cur = self.con.execute(f"SELECT * EXCLUDE (_rid) FROM {table}" if table in FACTS else f"SELECT * FROM {table}")
        return [d[0] for d in cur.description], cur.fetchall()

    def arrow(self, table: str):
        """A table's current rows as Arrow (without the row id)."""
        sql = f"SELECT * EXCLUDE (_rid) FROM {table}" if table in FACTS else f"SELECT * FROM {table}"
        return self.con.execute(sql).fetch_arrow_table()

    def tick(self, per_tick: int) -> Changes:
        """Insert ``per_tick`` held-back rows of each fact table and delete as many current ones."""
        out: Changes = {}
        for t in FACTS:
            later = self.con.execute(f"SELECT _rid FROM {t}_later ORDER BY _rid LIMIT {per_tick}").fetchall()
            current = [r for (r,) in self.con.execute(f"SELECT _rid FROM {t} USING SAMPLE {per_tick} ROWS "
                                                      f"(reservoir, {self._rng.randrange(1 << 30)})").fetchall()]
            ins = ", ".join(str(r) for (r,) in later) or "NULL"
            dels = ", ".join(map(str, current)) or "NULL"
            added = self.con.execute(f"SELECT * EXCLUDE (_rid) FROM {t}_later WHERE _rid IN ({ins})").fetchall()
            gone = self.con.execute(f"SELECT * EXCLUDE (_rid) FROM {t} WHERE _rid IN ({dels})").fetchall()
            self.con.execute(f"INSERT INTO {t} SELECT * FROM {t}_later WHERE _rid IN ({ins})")
            self.con.execute(f"DELETE FROM {t}_later WHERE _rid IN ({ins})")
            self.con.execute(f"DELETE FROM {t} WHERE _rid IN ({dels})")
            out[t] = [(r, 1) for r in added] + [(r, -1) for r in gone]
        return out
