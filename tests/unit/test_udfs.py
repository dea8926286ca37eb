"""Functions the user registers in the session resolve in views: a Python UDF, a pandas
UDF and a SQL function. Spark runs each over the tick's delta only. A UDF declared
non-deterministic is refused with the view's name."""
from __future__ import annotations

import pandas as pd
import pytest
from pyspark.sql.functions import pandas_udf, udf

from dbt_incremental_stream import Pipeline
from dbt_incremental_stream.differential import Twin
from dbt_incremental_stream.errors import UnsupportedSqlError


@pytest.fixture(scope="module")
def functions(spark):
    spark.udf.register("udf_label", lambda s, n: None if s is None else f"{s}:{n}", "string")

    @pandas_udf("double")
    def udf_scaled(v: pd.Series) -> pd.Series:
        return v * 2.5

    spark.udf.register("udf_scaled", udf_scaled)
    spark.udf.register("udf_noisy", udf(lambda x: x, "int").asNondeterministic())
    spark.sql("CREATE OR REPLACE TEMPORARY FUNCTION udf_square(x INT) RETURNS INT RETURN x * x")
    yield
    for name in ("udf_label", "udf_scaled", "udf_noisy", "udf_square"):
        spark.sql(f"DROP TEMPORARY FUNCTION IF EXISTS {name}")


def test_session_functions_resolve_in_views_equal_to_batch(spark, tmp_path, functions):
    """Each view calls a function of the session, in a projection, a filter, a group key
    and an aggregate's argument, and equals Spark batch after each of three ticks, in
    the driver and in tasks."""
    twin = Twin(spark, str(tmp_path), {"t": "id INT, s STRING, v DOUBLE, n INT"}, {
        "labelled": "SELECT id, udf_label(s, n) AS l FROM t WHERE udf_square(n) > 1",
        "scaled": "SELECT udf_label(s, 0) AS k, SUM(udf_scaled(v)) AS total, COUNT(*) AS c FROM t GROUP BY 1",
        "squares": "SELECT udf_square(n) AS sq, MAX(id) AS top FROM t GROUP BY udf_square(n)",
    }, placements=("auto", "tasks", "dataframe"))
    try:
        twin.step({"t": [((1, "a", 1.5, 2), 1), ((2, "b", None, -3), 1), ((3, None, 0.0, 1), 1),
                         ((4, "a", -2.0, None), 1)]})
        twin.step({"t": [((1, "a", 1.5, 2), -1), ((5, "b", 4.0, 2), 1), ((6, "é", float("nan"), 0), 1)]})
        twin.step({"t": [((2, "b", None, -3), -1), ((7, "a", 1e300, 3), 2)]})
        assert twin.arranged == 3, twin.paths  # on arrangements: Spark runs the functions over each delta
    finally:
        twin.close()


def test_a_udf_declared_non_deterministic_is_refused(spark, tmp_path, functions):
    pipe = Pipeline(spark, str(tmp_path / "state"))
    try:
        pipe.add_source("t", "id INT, n INT")
        with pytest.raises(UnsupportedSqlError, match=r"non-deterministic function udf_noisy\(\).*'noisy'"):
            pipe.add_view("noisy", "SELECT id, udf_noisy(n) AS m FROM t")
        pipe.add_view("fine", "SELECT id, udf_square(n) AS m FROM t")  # the others still resolve
    finally:
        pipe.close()
