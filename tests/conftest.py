from __future__ import annotations

import os

import pytest
from hypothesis import settings

from dbt_incremental_stream.runtime.spark.session import session
from tests import jvm_classes

# no test passes or fails on a wall-clock time: hypothesis's 200 ms deadline is off
settings.register_profile("no_deadline", deadline=None)
settings.load_profile("no_deadline")

# Spark's JVMs (this process's, and those of the dbt and serve processes tests start) compile
# with the client compiler only: a test's JVM lives seconds to minutes, too short for the
# server compiler's work to pay off on two cores (10-13% faster per test, measured on
# test_twin and test_serve_redo). Semantics are the JVM's either way. They also map their
# classes from one archive (tests/jvm_classes.py), made by the first process (xdist's
# controller, before its workers start) unless the options are set from outside.
_OPTIONS_GIVEN = "SPARK_SUBMIT_OPTS" in os.environ
os.environ.setdefault("SPARK_SUBMIT_OPTS", jvm_classes.OPTIONS)


def pytest_configure(config: pytest.Config) -> None:
    spark_free = config.args and all(a.replace(os.sep, "/").startswith("tests/fast") for a in config.args)
    if not _OPTIONS_GIVEN and not hasattr(config, "workerinput") and not spark_free:
        os.environ["SPARK_SUBMIT_OPTS"] = jvm_classes.archive_options()


# dbt's functional-test fixtures (project, adapter, run_dbt's profile) for tests/functional
pytest_plugins = ["dbt.tests.fixtures.project"]

#: the files that take minutes (`make test` prints the slowest), longest first. `make test`
#: hands whole files to its two workers in collection order (``--dist loadfile
#: --no-loadscope-reorder``): these start first and the short files fill in at the end,
#: so that the workers finish together (by default xdist sorts files by how many tests
#: they hold, which left the one-test files that take ten minutes for last)
LONGEST_FIRST = ("unit/test_twin.py", "functional/test_cluster.py", "unit/test_differential.py",
                 "functional/test_serve_crash.py", "functional/test_serve_clients.py", "unit/test_twin_time.py",
                 "unit/test_kafka_sources.py", "functional/test_streaming.py", "unit/test_kernels_spark.py",
                 "functional/test_integration_project.py", "unit/test_tpch.py", "functional/test_serve_redo.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {f"tests/{name}": i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest as collected


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One SparkSession per test process, its catalog in memory and its warehouse in a
    temporary directory; dbt invocations in the same process reuse it."""
    s = session("local[2]", {"spark.sql.shuffle.partitions": "1", "spark.sql.codegen.wholeStage": "false",
                             "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse"))})
    yield s
    s.stop()


@pytest.fixture(scope="session")
def kafka():
    """A Kafka-protocol broker for the test process: its bootstrap address."""
    from dbt_incremental_stream.connectors.broker import LocalBroker

    with LocalBroker() as bootstrap:
        yield bootstrap


@pytest.fixture
def local_new_york():
    """This process's local time is New York's for the test (tests/twin.py)."""
    from tests.twin import TIME_ZONE, local_time

    with local_time(TIME_ZONE):
        yield
