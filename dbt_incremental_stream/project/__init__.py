"""Streaming models deployed at one state location, the way a dbt project deploys them.

A model is one SELECT over relations of the Spark catalog, published as a relation of its
own. It reads other models of the project (their changes flow through the circuit) and any
other table or view — a dbt seed, a batch model, an external table — as a *table source*.

    project = Project(spark, "/data/stream_state")
    project.deploy(Model("shop.revenue", "SELECT c, SUM(v) AS v FROM shop.orders GROUP BY c"))
    project.advance()
    spark.table("shop.revenue").show()

``models`` (a model, and the pipeline of a set of them), ``inputs`` (sources and how far
they were read), ``outputs`` (changelogs, sinks, dead letters), ``project`` (a tick of all).
"""
from .models import CHANGELOG_TABLE, KINDS, STREAMING_VIEW, Model
from .outputs import CHANGELOG_COLUMNS
from .project import Project
from .report import TickReport

__all__ = ["CHANGELOG_COLUMNS", "CHANGELOG_TABLE", "KINDS", "STREAMING_VIEW", "Model", "Project", "TickReport"]
