"""The twin harness's workloads: random ticks of adversarial values (tests/adversarial.py)
through a :class:`~dbt_incremental_stream.differential.Twin`, every view checked after each
tick on both placements against Spark's batch answer.

Each test runs ``TWIN_EXAMPLES`` examples (1 by default, derandomized: ``make test`` runs
the same example every time); ``TWIN_EXAMPLES=10`` searches deeper, with a new seed each
run. Hypothesis does not shrink (each example costs several Spark ticks): a failure
prints its first example.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence

import pytest
from hypothesis import HealthCheck, Phase, assume, settings
from hypothesis import strategies as st

from dbt_incremental_stream.differential import ARRANGED_PATH, TWIN_PLACEMENTS, Twin
from tests.adversarial import changes

SETTINGS = settings(max_examples=int(os.environ.get("TWIN_EXAMPLES", "1")), deadline=None,
                    derandomize=os.environ.get("TWIN_EXAMPLES") is None, database=None,
                    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
TICKS = 3


def checked_placements(conf: Mapping[str, str], evaluator: bool = True) -> tuple[str, ...]:
    """The placements a twin checks under the session settings ``conf``: "auto", and the
    DataFrame evaluator on every tick ("dataframe") where ``evaluator`` and ANSI mode is on.

    The evaluator computes every value with Spark's own expressions and aggregates, so
    what a twin can find in it is its bookkeeping (which rows a change touches), not its
    values; its ticks are also the costliest of the suite (a Spark job per few state
    nodes). It is checked with ANSI mode on, where a data error sends the arranged path's
    ticks to it, and on the groups that name it (one per twin file: the joins, where keys of
    two types meet, and the calendar); the "auto" pipeline is checked on every tick it sends
    there itself (a data error, a view rebuilt)."""
    ansi = conf.get("spark.sql.ansi.enabled", "true") == "true"
    return TWIN_PLACEMENTS if ansi and evaluator else ("auto",)


TIME_ZONE = "America/New_York"
ANSI = pytest.mark.parametrize("ansi", [True, False], ids=["ansi", "legacy"])

@contextmanager
def spark_conf(spark, conf: Mapping[str, str]) -> Iterator[None]:
    """Session settings for the block, restored after."""
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


@contextmanager
def local_time(zone: str) -> Iterator[None]:
    """This process's local time is ``zone``'s (TZ + tzset) for the block, restored after:
    nothing on the way from a row to Spark and back may read it."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def not_the_simplest(data: st.DataObject) -> int:
    """Hypothesis tries the simplest example first (every draw minimal: no rows at all);
    with one example by default, that one is skipped (it costs no tick) for a random one.
    Returns a number drawn for the example."""
    drawn = data.draw(st.integers(0, 1 << 30), label="not the simplest example")
    assume(drawn != 0)
    return drawn


class Seen:
    """What :func:`changes` read of a twin for one tick (each source's schema and rows):
    enough to make the same draws again without running anything."""

    def __init__(self, twin: Twin, sources: list[str]):
        self.seen = {s: (twin.schema(s), twin.rows(s)) for s in sources}

    def schema(self, source: str):
        return self.seen[source][0]

    def rows(self, source: str) -> list:
        return self.seen[source][1]


#: a test example's failure and what its ticks read, for Hypothesis's replay of the
#: example (which would run every tick again only to print it): the replay draws the same
#: workload and raises the failure as it was
_FAILED: dict[tuple[str, int], tuple[BaseException, list[Seen]]] = {}


def run(data: st.DataObject, spark, directories: pytest.TempPathFactory, sources: Mapping[str, str],
        views: Mapping[str, str], conf: Mapping[str, str], ticks: int = TICKS,
        placements: Sequence[str] | None = None, evaluator: bool = True) -> None:
    """``views`` over ``sources`` as one twin of ``placements`` (by default
    :func:`checked_placements` of ``conf`` and ``evaluator``), with the session settings
    ``conf``: ``ticks`` random ticks, every view checked after each; then every tick, the
    first (which builds the state) included, must have run on arrangements in the
    placement under test ("auto": in the driver, "tasks": in Spark tasks; else that path
    was not tested), a tick meeting a data error (it names the failing node) and one
    rebuilding a view set aside on one included."""
    names = list(sources)
    key = (os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0], not_the_simplest(data))
    if key in _FAILED:
        error, seen = _FAILED.pop(key)
        for tick in seen:
            changes(data, tick, names)
        raise error
    with spark_conf(spark, conf):
        twin = Twin(spark, str(directories.mktemp("twin")), sources, views,
                    placements=checked_placements(conf, evaluator) if placements is None else placements)
        read: list[Seen] = []
        try:
            for _ in range(ticks):
                read.append(Seen(twin, names))
                twin.step(changes(data, read[-1], names))
            assert twin.ticks == ticks and twin.checks == ticks * len(twin.pipelines) * len(twin.views)
            assert twin.arranged == ticks, f"{twin.fast}'s paths: {twin.paths}"
            last = twin.pipelines[twin.fast].last_tick
            assert last is not None and last.path == ARRANGED_PATH[twin.fast]
        except AssertionError as e:  # Mismatch included
            _FAILED[key] = (e, read)
            raise
        finally:
            twin.close()
