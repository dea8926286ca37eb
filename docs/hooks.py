"""MkDocs hooks: the reference's tables that the code is the source of.

A page asks for a table with a marker line, for example ``<!-- generated: profile -->``.
The tables:

- ``profile``: the profile keys, from the fields of ``IncrementalStreamCredentials``. Each
  field's ``#:`` comment is its entry, as Sphinx's autodoc reads attribute docs.
- ``cli``: every ``dbt-stream`` command's flags, from the argparse parsers.
- ``spark``: the settings of the session the engine starts, from ``TICK_CONF``.
- ``metrics``: serve's Prometheus metrics, from their registry.

``tests/fast/test_docs.py`` renders the pages with these hooks and checks that every key,
flag and metric of the code, and every model config and ``meta.kafka`` key, has an entry.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
from typing import Any, Iterator

MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.M)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: each marker replaced by its table."""
    return render(markdown)


def render(markdown: str) -> str:
    return MARKER.sub(lambda m: TABLES[m.group(1)](), markdown)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def profile_keys() -> list[tuple[str, str, str]]:
    """(key, default, entry) of each field the adapter's credentials declare."""
    from dbt.adapters.incremental_stream.connections import IncrementalStreamCredentials as creds

    lines, _ = inspect.getsourcelines(creds)
    tree = ast.parse(inspect.cleandoc("".join(lines)))
    docs: dict[str, str] = {}
    for node in tree.body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above = []
            for line in reversed(lines[:node.lineno - 1]):
                if not line.strip().startswith("#:"):
                    break
                above.insert(0, line.strip()[2:].strip())
            docs[node.target.id] = " ".join(above)
    fields = {f.name: f for f in dataclasses.fields(creds)}
    out = []
    for name, doc in docs.items():
        f = fields[name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        shown = getattr(default, "value", default)  # an enum's value
        out.append((name, "" if shown is None else repr(shown).strip("'"), doc))
    return out


def _profile() -> str:
    rows = [f"| `{key}` | {f'`{default}`' if default else 'none'} | {_cell(doc)} |"
            for key, default, doc in profile_keys()]
    return "\n".join(["| key | default | meaning |", "| --- | --- | --- |", *rows])


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command, parser) of every ``dbt-stream`` command line."""
    from dbt.adapters.incremental_stream.command import compile_parser
    from dbt.adapters.incremental_stream.serve import parser as serve_parser

    from dbt_incremental_stream.cli import command_parser

    yield "dbt-stream", command_parser(["serve"])
    yield "dbt-stream models | explain | equivalence", compile_parser()
    yield "dbt-stream serve", serve_parser()


def flags(parser: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    """(flag, default, help) of each option and positional argument but ``--help``."""
    out = []
    for action in parser._actions:  # argparse has no public list of a parser's actions
        if isinstance(action, argparse._HelpAction):
            continue
        name = ", ".join(action.option_strings) or action.dest
        if action.choices:
            name += " {" + ",".join(map(str, action.choices)) + "}"
        default = action.default if action.default not in (None, [], argparse.SUPPRESS) else ""
        out.append((name, str(default), action.help or ""))
    return out


def commands() -> list[tuple[str, str]]:
    """(command, what it does) of each ``dbt-stream`` command."""
    from dbt.adapters.incremental_stream.serve import parser as serve_parser

    from dbt_incremental_stream.cli import COMMANDS

    return [*COMMANDS.items(), ("serve", serve_parser().description or "")]


def _cli() -> str:
    parts = ["| command | what it does |", "| --- | --- |"]
    parts += [f"| `dbt-stream {name}` | {_cell(doc)} |" for name, doc in commands()]
    engine: set[str] = set()  # the compile flags' parser repeats two of the engine's flags
    for command, parser in parsers():
        rows = [(name, default, help_) for name, default, help_ in flags(parser)
                if command == "dbt-stream serve" or name not in engine]
        engine = engine or {name for name, _, _ in rows}
        parts += ["", f"### Flags of `{command}`", "", "| flag | default | meaning |", "| --- | --- | --- |"]
        parts += [f"| `{name}` | {f'`{default}`' if default else ''} | {_cell(help_)} |"
                  for name, default, help_ in rows]
    return "\n".join(parts)


def metrics() -> list[tuple[str, str, str, str]]:
    """(name as exported, type, labels, help) of each metric serve exports."""
    from prometheus_client.metrics import MetricWrapperBase

    from dbt_incremental_stream.server import Metrics

    out = []
    for metric in vars(Metrics()).values():
        if isinstance(metric, MetricWrapperBase):
            name = metric._name + ("_total" if metric._type == "counter" else "")
            out.append((name, metric._type, ", ".join(metric._labelnames), metric._documentation))
    return out


def _metrics() -> str:
    from dbt_incremental_stream.server import BUCKETS

    rows = [f"| `{name}` | {kind} | {', '.join(f'`{x}`' for x in labels.split(', ') if x)} | {_cell(doc)} |"
            for name, kind, labels, doc in metrics()]
    buckets = ", ".join(map(str, BUCKETS))
    return "\n".join(["| metric | type | labels | meaning |", "| --- | --- | --- | --- |", *rows, "",
                      f"The histogram's buckets end at {buckets} seconds."])


def _spark() -> str:
    from dbt_incremental_stream.runtime.spark.session import TICK_CONF

    rows = [f"| `{key}` | `{value}` |" for key, value in TICK_CONF.items()]
    return "\n".join(["| setting | value |", "| --- | --- |", *rows])


TABLES = {"profile": _profile, "spark": _spark, "cli": _cli, "metrics": _metrics}
