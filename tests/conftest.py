from __future__ import annotations

import pytest

from dbt_incremental_stream.runtime.session import session


@pytest.fixture(scope="session")
def spark():
    """One SparkSession per test process."""
    s = session("local[2]", {"spark.sql.shuffle.partitions": "1", "spark.sql.codegen.wholeStage": "false"})
    yield s
    s.stop()
