"""``dbt-stream``: the engine from the command line.

    dbt-stream explain --source "orders=id INT, cust INT, amount DOUBLE" view.sql
    dbt-stream check   --source "orders=id INT, cust INT, amount DOUBLE" view.sql   # exit 1 if unsupported

``explain`` prints the logical plan and the incremental circuit of a SQL file (no Spark
needed); ``check`` only says whether it can run incrementally and, if not, why.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from .circuit.incremental import Incrementalizer
from .circuit.operators import Input, Integral, Operator, explain
from .errors import StreamError
from .sql.planner import plan


def _sources(specs: list[str]) -> dict[str, Operator]:
    """``name=col TYPE, col TYPE`` → Input operators (types only matter to Spark)."""
    catalog: dict[str, Operator] = {}
    for spec in specs:
        name, _, ddl = spec.partition("=")
        name = name.strip().lower()
        try:
            table = sqlglot.parse_one(f"CREATE TABLE t ({ddl})", read="spark")
        except ParseError as e:
            raise StreamError(f"--source wants name=columns, got {spec!r}: {e}") from e
        columns = tuple(c.name.lower() for c in table.find_all(exp.ColumnDef))
        if not columns:
            raise StreamError(f"--source wants name=columns, got {spec!r}")
        catalog[name] = Input(name, columns)
    return catalog


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dbt-stream", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["explain", "check"])
    parser.add_argument("sql", type=Path, help="a file with one SELECT query")
    parser.add_argument("--source", action="append", default=[], metavar="NAME=COLUMNS",
                        help='a relation the query reads, e.g. "orders=id INT, amount DOUBLE" (repeatable)')
    args = parser.parse_args(argv)
    view = args.sql.stem
    try:
        logical = plan(args.sql.read_text(), _sources(args.source), view=view)
    except StreamError as e:
        print(f"{args.sql}: {e}", file=sys.stderr)
        return 1
    if args.command == "check":
        print(f"{args.sql}: can run incrementally")
        return 0
    print(f"-- {view}: plan\n{explain(logical)}\n-- {view}: incremental circuit")
    print(explain(Integral(Incrementalizer()(logical))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
