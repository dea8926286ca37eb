"""Every test of this tier starts from Spark's default ANSI mode."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _ansi_as_spark_sets_it(request: pytest.FixtureRequest) -> None:
    """A dbt invocation earlier in this process sets the shared session's ANSI mode
    (dbt-spark turns it off), and a class-scoped dbt project's teardown runs one after the
    functional tier's per-test reset: a test here that expects an ANSI error would not get it."""
    if "spark" in request.fixturenames:
        request.getfixturevalue("spark").conf.unset("spark.sql.ansi.enabled")
