"""``dbt-stream``: the engine from the command line.

On a dbt project (after ``dbt compile`` / ``run`` / ``build``; run from the project directory
or pass ``--project-dir``)::

    dbt-stream models                 # every model: can it be a streaming_view? if not, why
    dbt-stream explain revenue        # a model's plan and incremental circuit
    dbt-stream equivalence revenue    # run it in batch and incrementally over the same changes

A local Kafka-protocol broker (Tansu, in memory; needs the ``broker`` extra) to try things on::

    dbt-stream broker --port 9092     # until Ctrl-C

On a SQL file::

    dbt-stream explain view.sql --source "orders=id INT, cust INT, amount DOUBLE"
    dbt-stream check   view.sql --source "orders=id INT, cust INT, amount DOUBLE"   # exit 1 if unsupported
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from .circuit.incremental import Incrementalizer
from .circuit.operators import Input, Integral, Operator, explain
from .errors import StreamError
from .sql.compile import compile

if TYPE_CHECKING:
    from .dbt_manifest import Verdict


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


def _print_circuit(name: str, logical: Operator) -> None:
    print(f"-- {name}: plan\n{explain(logical)}\n-- {name}: incremental circuit")
    print(explain(Integral(Incrementalizer()(logical))))


def _is_file(target: str) -> bool:
    return target.endswith(".sql") and Path(target).is_file()


def _file(args: argparse.Namespace) -> int:
    path = Path(args.target)
    try:
        logical = compile(path.read_text(), _sources(args.source), view=path.stem)
    except StreamError as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    if args.command == "check":
        print(f"{path}: can run incrementally")
    else:
        _print_circuit(path.stem, logical)
    return 0


def _models(args: argparse.Namespace) -> int:
    from .dbt_manifest import DbtProject

    project = DbtProject(args.project_dir, args.target_path)
    if project.stale:
        print(f"{len(project.stale)} model or seed files changed since {args.target_path}/manifest.json was written "
              f"(first: {project.stale[0].relative_to(project.root)}): run `dbt compile` with your --profiles-dir "
              f"and --target, or give them to this command (`dbt-stream models --profiles-dir … --target …` "
              f"compiles first)", file=sys.stderr)
    width = max((len(n) for n in project.models), default=5)
    print(f"{'model':<{width}}  {'materialized':<16} {'incremental':<11} why not")
    blocked = 0
    for name in sorted(project.models):
        v = project.verdict(name)
        blocked += v.model.streaming and not v.ok
        print(f"{name:<{width}}  {v.model.materialized:<16} {'yes' if v.ok else 'no':<11} {v.reason or ''}")
    return 1 if blocked else 0  # a streaming model that cannot run is an error


def _streamable(args: argparse.Namespace) -> Verdict:
    """The target model's verdict, if it can run incrementally."""
    from .dbt_manifest import DbtProject

    v = DbtProject(args.project_dir, args.target_path).verdict(args.target)
    if not v.ok:
        raise StreamError(f"{args.target}: {v.reason}")
    return v


def _explain_model(args: argparse.Namespace) -> int:
    v = _streamable(args)
    _print_circuit(args.target, v.plan)  # type: ignore[arg-type]
    return 0


def _equivalence(args: argparse.Namespace) -> int:
    from .differential import Mismatch, replay
    from .catalog import quote_relation
    from .runtime.spark.session import session
    from .sql.relations import engine_name, parse_one, referenced, rename

    v = _streamable(args)
    spark = session(args.master, dict(c.split("=", 1) for c in args.conf), hive=True)
    sql = v.model.sql or ""
    tree = parse_one(sql)
    reads = referenced(tree)
    inputs = {engine_name(r): spark.table(quote_relation(r)) for r in reads}
    with tempfile.TemporaryDirectory() as state:
        try:
            renamed = rename(sql, {r: engine_name(r) for r in reads}, tree=tree)
            ticks = replay(spark, state, inputs, args.target, renamed,
                           ticks=args.ticks, seed=args.seed)
        except Mismatch as e:
            print(f"{args.target}: incremental and batch results differ: {e}", file=sys.stderr)
            return 1
    print(f"{args.target}: equal to batch after each of {ticks} ticks (inserts, deletes and updates of its "
          f"inputs' current rows: {', '.join(reads)})")
    return 0


def _broker(args: argparse.Namespace) -> int:
    import signal
    import threading

    from .connectors.broker import LocalBroker

    stop = threading.Event()
    before = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with LocalBroker(port=args.port) as bootstrap:
            print(f"a Kafka-protocol broker (Tansu, in memory) at {bootstrap}; Ctrl-C stops it", flush=True)
            stop.wait()
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    return 0


#: the engine's commands, each with what it does (its --help and the docs' CLI reference)
COMMANDS = {
    "models": "every model of the compiled project: can it be a streaming_view, and if not, the construct",
    "explain": "a model's (or a .sql file's) plan and incremental circuit",
    "check": "a .sql file: exit 0 if it can run incrementally, else 1 with the construct named",
    "equivalence": "run a model incrementally over its inputs' current rows in ticks of inserts, deletes and "
                   "updates, and compare it with DuckDB in batch after each tick",
    "broker": "a local Kafka-protocol broker on 127.0.0.1 to try a project on, until Ctrl-C",
}


def command_parser(extra: Iterable[str] = (), epilog: str = "") -> argparse.ArgumentParser:
    """The engine's commands and flags, plus ``extra`` command names (the docs' CLI reference
    is generated from this parser)."""
    parser = argparse.ArgumentParser(prog="dbt-stream", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__ + epilog)
    parser.add_argument("command", choices=[*COMMANDS, *extra], help="what to do; the commands are below")
    parser.add_argument("target", nargs="?", help="a model name, or a .sql file with one SELECT query")
    parser.add_argument("--source", action="append", default=[], metavar="NAME=COLUMNS",
                        help='for a .sql file: a relation it reads, e.g. "orders=id INT, amount DOUBLE" (repeatable)')
    parser.add_argument("--project-dir", default=".", help="the dbt project (default: the current directory)")
    parser.add_argument("--target-path", default="target", help="dbt's target directory within the project")
    parser.add_argument("--ticks", type=int, default=4, help="equivalence: ticks to split the input into")
    parser.add_argument("--seed", type=int, default=0, help="equivalence: random seed for the changes")
    parser.add_argument("--master", default="local[2]", help="equivalence: Spark master")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="equivalence: Spark setting")
    parser.add_argument("--port", type=int, default=9092, help="broker: port to listen on (default 9092)")
    return parser


def main(argv: list[str] | None = None, extra: Mapping[str, Callable[[list[str]], int]] | None = None,
         epilog: str = "") -> int:
    """``extra``: more commands (the dbt plugin's ``serve``), each given the arguments after it."""
    argv = sys.argv[1:] if argv is None else argv
    extra = extra or {}
    if argv and argv[0] in extra:
        try:
            return extra[argv[0]](argv[1:])
        except StreamError as e:
            print(f"dbt-stream: {e}", file=sys.stderr)
            return 1
    parser = command_parser(extra, epilog)
    args = parser.parse_args(argv)
    if args.command not in ("models", "broker") and not args.target:
        parser.error(f"{args.command} needs a model name or a .sql file")
    try:
        if args.command in ("explain", "check") and _is_file(args.target):
            return _file(args)
        if args.command == "check":
            parser.error("check takes a .sql file; for a project's models use `dbt-stream models`")
        return {"models": _models, "explain": _explain_model, "equivalence": _equivalence,
                "broker": _broker}[args.command](args)
    except StreamError as e:
        print(f"dbt-stream: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
