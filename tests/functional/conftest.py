from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _spark_first(spark):
    """The test SparkSession exists before dbt opens a connection, so dbt reuses it."""
    return spark


@pytest.fixture(scope="class")
def dbt_profile_target():
    # state_location is relative: dbt's project fixture runs each test class in its own directory
    return {"type": "incremental_stream", "threads": 1, "master": "local[2]", "state_location": "stream_state"}


@pytest.fixture(autouse=True)
def _ansi_as_it_was(spark):
    """A dbt invocation in this process sets the shared session's ANSI mode (dbt-spark turns
    it off, a profile's `spark_conf` may turn it on); tests after it see Spark's default."""
    yield
    spark.conf.unset("spark.sql.ansi.enabled")


@pytest.fixture(autouse=True)
def _no_serve_left():
    """A failing test leaves no `dbt-stream serve` behind (it would hold ports and the catalog)."""
    from tests.functional.serving import STARTED

    yield
    while STARTED:
        serve = STARTED.pop()
        if serve.proc.poll() is None:
            serve.kill()
