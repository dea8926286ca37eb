"""`dbt-stream` on a dbt project: which models can stream (and why not), a model's circuit,
and the batch-vs-incremental equivalence check."""
from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

from dbt_incremental_stream.cli import main

SEED = "id,customer,amount\n1,a,10.5\n2,b,3\n3,a,4\n4,c,\n5,b,7.25\n"
REVENUE = "{{ config(materialized='streaming_view') }}\n" \
          "select customer, sum(amount) as total, count(*) as n from {{ ref('orders') }} group by customer"
RANKED = "{{ config(materialized='table') }}\n" \
         "select customer, total, dense_rank() over (order by total desc) as r from {{ ref('revenue') }}"
ROLLUP = "{{ config(materialized='table') }}\n" \
         "select customer, sum(amount) as s from {{ ref('orders') }} group by rollup (customer)"
SAMPLED = "{{ config(materialized='view') }}\nselect * from {{ ref('orders') }} limit 2"
RANDOM = "{{ config(materialized='table') }}\nselect * from {{ ref('orders') }} tablesample (50 percent)"


class TestDbtStreamCli:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"orders.csv": SEED}

    @pytest.fixture(scope="class")
    def models(self):
        return {"revenue.sql": REVENUE, "ranked.sql": RANKED, "rollup.sql": ROLLUP, "sampled.sql": SAMPLED,
                "random.sql": RANDOM}

    def test_models_explain_equivalence(self, project, capsys):
        run_dbt(["seed"])
        run_dbt(["compile"])
        root = str(project.project_root)
        capsys.readouterr()  # dbt's own output
        assert main(["models", "--project-dir", root]) == 0  # every streaming model can stream
        lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
        assert " yes " in lines["revenue"] and " yes " in lines["ranked"] and " yes " in lines["rollup"]
        assert "unsupported in a streaming view: TABLESAMPLE" in lines["random"]
        assert "LIMIT / OFFSET without ORDER BY" in lines["sampled"]

        assert main(["explain", "ranked", "--project-dir", root]) == 0
        out = capsys.readouterr().out
        assert "WindowDiff" in out and "Input " in out
        assert main(["explain", "rollup", "--project-dir", root]) == 0
        assert "Plus" in capsys.readouterr().out  # a union of aggregates, one per grouping set
        assert main(["explain", "random", "--project-dir", root]) == 1
        assert "TABLESAMPLE" in capsys.readouterr().err

        assert main(["equivalence", "revenue", "--project-dir", root, "--ticks", "3"]) == 0
        assert "equal to batch after each of 3 ticks" in capsys.readouterr().out
