"""Which ticks of the suite the DataFrame evaluator runs, outside its own placement.

A pytest plugin (``make evaluator-report``): every tick :class:`.on_dataframes.DataFrameTicks`
runs is recorded with the test and the reason the tick was not on arrangements (each
process appends to its own file under ``EVALUATOR_REPORT``, a directory, as xdist's workers
are processes), and the session's end prints the ticks of every placement other than
"dataframe" (the evaluator's own, the twin's second witness), by reason and test file. It
measures the evaluator's remaining part in the engine: what still falls back to it.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from dbt_incremental_stream.runtime import on_dataframes

DIRECTORY = Path(os.environ.get("EVALUATOR_REPORT", "evaluator-report"))
_current: dict[str, str | None] = {"test": None}
_run = on_dataframes.DataFrameTicks.run


def _recorded(self: on_dataframes.DataFrameTicks, *args, **kwargs):  # type: ignore[no-untyped-def]
    why = args[-1] if args else kwargs.get("why")
    with open(DIRECTORY / f"ticks-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps({"test": _current["test"], "placement": self.pipe.placement, "why": why}) + "\n")
    return _run(self, *args, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) starts afresh
        DIRECTORY.mkdir(parents=True, exist_ok=True)
        for old in DIRECTORY.glob("ticks-*.jsonl"):
            old.unlink()
    on_dataframes.DataFrameTicks.run = _recorded  # type: ignore[method-assign]


def pytest_runtest_setup(item: pytest.Item) -> None:
    _current["test"] = item.nodeid


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    ticks = [json.loads(line) for f in sorted(DIRECTORY.glob("ticks-*.jsonl")) for line in f.read_text().splitlines()]
    others = Counter(((t["why"] or "")[:100], (t["test"] or "").split("::")[0], t["placement"])
                     for t in ticks if t["placement"] != "dataframe")
    own = sum(t["placement"] == "dataframe" for t in ticks)
    terminalreporter.write_sep("=", f"DataFrame evaluator: {own} ticks of placement 'dataframe', "
                                    f"{sum(others.values())} of the others")
    for (why, test, placement), n in others.most_common():
        terminalreporter.write_line(f"{n:5d}  {placement:9s}  {test}  {why}")
