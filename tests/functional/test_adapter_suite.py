"""dbt's standard adapter test suite (dbt-tests-adapter): what works on dbt-spark's session
method keeps working with this adapter."""
from __future__ import annotations

import pytest
from dbt.tests.adapter.basic import expected_catalog
from dbt.tests.adapter.basic.test_adapter_methods import BaseAdapterMethod
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_docs_generate import BaseDocsGenerate
from dbt.tests.adapter.basic.test_empty import BaseEmpty
from dbt.tests.adapter.basic.test_ephemeral import BaseEphemeral
from dbt.tests.adapter.basic.test_generic_tests import BaseGenericTests
from dbt.tests.adapter.basic.test_incremental import BaseIncremental
from dbt.tests.adapter.basic.test_singular_tests import BaseSingularTests
from dbt.tests.adapter.basic.test_singular_tests_ephemeral import BaseSingularTestsEphemeral
from dbt.tests.adapter.basic.test_table_materialization import BaseTableMaterialization
from dbt.tests.adapter.basic.test_validate_connection import BaseValidateConnection


class TestSimpleMaterializations(BaseSimpleMaterializations):
    pass


class TestSingularTests(BaseSingularTests):
    pass


class TestSingularTestsEphemeral(BaseSingularTestsEphemeral):
    pass


class TestEmpty(BaseEmpty):
    pass


class TestEphemeral(BaseEphemeral):
    pass


class TestIncremental(BaseIncremental):
    pass


class TestGenericTests(BaseGenericTests):
    pass


class TestTableMaterialization(BaseTableMaterialization):
    pass


class TestValidateConnection(BaseValidateConnection):
    pass


class TestAdapterMethod(BaseAdapterMethod):
    pass


class TestDocsGenerate(BaseDocsGenerate):
    @pytest.fixture(scope="class")
    def expected_catalog(self, project):
        # Spark's own type names and relation types; Spark has no owner (role) or stats here
        catalog = expected_catalog.base_expected_catalog(
            project, role=None, id_type="bigint", text_type="string", time_type="timestamp",
            view_type="view", table_type="table", model_stats=expected_catalog.no_stats())
        # dbt-spark reads a view's columns from its schema tree, where BIGINT is "long"
        for node in catalog["nodes"].values():
            if node["metadata"]["type"] == "view":
                node["columns"]["id"]["type"] = "long"
        return catalog


SEED = """id,name,note,amount,big,seen_at
1,O'Brien,back\\slash,1.10,12345678901234567,2024-02-29 12:34:56.123456
2,,'quoted',,-9007199254740993,
3,plain,%s and %%,0,0,1999-12-31 23:59:59.000001
"""


class TestSeedValuesAsTheyAre:
    """A seed's values land exactly: quotes and backslashes in strings, empty cells as NULL
    (not the string 'None'), integers past 2^53 and microseconds (dbt-spark's session method
    broke the statement on a quote and went through floats and milliseconds)."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"people.csv": SEED}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"+column_types": {"big": "bigint", "amount": "decimal(10,2)", "seen_at": "timestamp"}}}

    def test_seed_rows_equal_the_csv(self, project, spark):
        import datetime as dt
        from decimal import Decimal

        from dbt.tests.util import run_dbt

        run_dbt(["seed"])
        rows = sorted(tuple(r) for r in spark.table(f"{project.test_schema}.people").collect())
        assert rows == [
            (1, "O'Brien", "back\\slash", Decimal("1.10"), 12345678901234567,
             dt.datetime(2024, 2, 29, 12, 34, 56, 123456)),
            (2, None, "'quoted'", None, -9007199254740993, None),
            (3, "plain", "%s and %%", Decimal("0.00"), 0, dt.datetime(1999, 12, 31, 23, 59, 59, 1)),
        ]
