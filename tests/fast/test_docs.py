"""The manual documents what the code accepts: every profile key, model config, ``sink``
and ``meta.kafka`` key, CLI flag, metric and ``/status`` field has an entry in the
reference pages, as MkDocs renders them (``docs/hooks.py`` fills the generated tables).
The README stays a front door: at most 12 KB."""
from __future__ import annotations

import importlib.util
import re
from dataclasses import fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ENTRY = re.compile(r"^\| *`([^`]+)`[^|]*\|(.*)\|", re.M)


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = _hooks()


def entries(page: str) -> dict[str, str]:
    """A rendered reference page's table rows: the first cell's code span → the rest of the
    row. A row may name several keys in its first cell (`` `topic`, `partition` ``)."""
    text = HOOKS.render((DOCS / page).read_text())
    out: dict[str, str] = {}
    for row in text.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")] if row.startswith("|") else []
        if len(cells) < 2:
            continue
        rest = " ".join(cells[1:]).strip(" -")
        for name in re.findall(r"`([^`]+)`", cells[0]):
            out.setdefault(name.split(" {")[0], rest)
    return out


def _missing(names, page: str) -> list[str]:
    documented = entries(page)
    return [n for n in names if not documented.get(n)]


def test_every_profile_key_is_documented_with_its_default() -> None:
    from dbt.adapters.incremental_stream.connections import IncrementalStreamCredentials as creds

    own = [f.name for f in fields(creds) if f.name in creds.__annotations__]
    assert own and _missing(own, "reference/profile.md") == []
    assert [k for k, _, doc in HOOKS.profile_keys() if not doc] == [], "a credentials field without a #: comment"


def test_every_model_config_and_sink_key_is_documented() -> None:
    from dbt_incremental_stream.connectors.sinks import SINK_KEYS

    macros = "".join(p.read_text() for p in (ROOT / "dbt/include/incremental_stream/macros").rglob("*.sql"))
    configs = {"materialized", *re.findall(r"config\.get\('(\w+)'", macros)}
    assert "sink" in configs
    assert _missing(sorted(configs), "reference/model-configs.md") == []
    assert _missing(SINK_KEYS, "reference/model-configs.md") == []
    assert _missing(["streaming_view", "changelog_table", "insert_delete", "upsert", "debezium", "append"],
                    "reference/model-configs.md") == []


def test_every_source_key_format_and_envelope_is_documented() -> None:
    from dbt_incremental_stream.connectors.envelopes import ENVELOPES_OF
    from dbt_incremental_stream.connectors.formats import FORMATS
    from dbt_incremental_stream.connectors.kafka import SOURCE_KEYS

    envelopes = sorted({e for es in ENVELOPES_OF.values() for e in es})
    assert _missing([*SOURCE_KEYS, *FORMATS, *envelopes], "reference/sources.md") == []


def test_every_command_and_flag_is_documented() -> None:
    documented = entries("reference/cli.md")
    commands = [f"dbt-stream {name}" for name, _ in HOOKS.commands()]
    assert "dbt-stream serve" in commands and [c for c in commands if not documented.get(c)] == []
    flags = {flag for key, rest in documented.items() if rest for flag in key.split(", ")}
    for _, parser in HOOKS.parsers():
        for action in parser._actions:
            for flag in action.option_strings or [action.dest]:
                assert flag in ("-h", "--help") or flag in flags, flag
    assert [name for _, parser in HOOKS.parsers() for name, _, help_ in HOOKS.flags(parser) if not help_] == []


def test_every_metric_and_status_field_is_documented() -> None:
    from dbt_incremental_stream.project.report import TickReport
    from dbt_incremental_stream.server import Server

    names = [name for name, _, _, _ in HOOKS.metrics()]
    assert "dbt_stream_ticks_total" in names and _missing(names, "reference/serve-http.md") == []
    server = Server(lambda: None, port=None, info={"connect": None})  # type: ignore[arg-type,return-value]
    assert _missing(sorted(server.status()), "reference/serve-http.md") == []
    assert _missing([f.name for f in fields(TickReport)], "reference/serve-http.md") == []


@pytest.mark.parametrize("page, removed", [("reference/sources.md", "| `expire` |"),
                                           ("reference/cli.md", "<!-- generated: cli -->")])
def test_a_missing_entry_is_found(tmp_path, monkeypatch, page: str, removed: str) -> None:
    """The checks above fail when an entry leaves a page."""
    copy = tmp_path / "docs"
    for path in DOCS.rglob("*.md"):
        (copy / path.relative_to(DOCS)).parent.mkdir(parents=True, exist_ok=True)
        (copy / path.relative_to(DOCS)).write_text(path.read_text())
    text = (copy / page).read_text()
    assert removed in text
    (copy / page).write_text("\n".join(line for line in text.splitlines() if not line.startswith(removed)))
    monkeypatch.setattr(f"{__name__}.DOCS", copy)
    check = (test_every_source_key_format_and_envelope_is_documented if "sources" in page
             else test_every_command_and_flag_is_documented)
    with pytest.raises(AssertionError):
        check()


def test_the_readme_is_a_front_door() -> None:
    assert (ROOT / "README.md").stat().st_size <= 12_000
    assert (ROOT / "bench/README.md").stat().st_size <= 25_000


def test_an_unknown_source_or_sink_key_is_named() -> None:
    """A misspelt key fails, listing the keys, where it was ignored before."""
    from dbt_incremental_stream.connectors.kafka import KafkaSource
    from dbt_incremental_stream.connectors.sinks import KafkaSink
    from dbt_incremental_stream.errors import StreamError

    with pytest.raises(StreamError, match=r"Kafka source 'raw.e': unknown `meta.kafka` keys \['envlope'\]"):
        KafkaSource.from_config("raw.e", {"topic": "t", "envlope": "upsert"}, {"id": "bigint"})
    with pytest.raises(StreamError, match=r"sink: unknown keys \['keys'\]: the keys are \['topic'"):
        KafkaSink.from_config({"topic": "t", "envelope": "upsert", "keys": ["id"]})
