from setuptools import find_namespace_packages, setup

setup(
    name="dbt-incremental-stream",
    version="0.1.0",
    description="dbt models maintained incrementally (DBSP) on Apache Spark, with Kafka sources and sinks",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_namespace_packages(include=["dbt_incremental_stream", "dbt_incremental_stream.*"]),
    install_requires=[
        "pyspark==4.3.0",
        "sqlglot==30.30.0",
        "pandas==2.3.3",  # PySpark 4.3 warns that pandas 3 is not yet supported
        "pyarrow==26.0.1",
        "duckdb==1.5.5",  # the batch oracle of dbt_incremental_stream.differential
    ],
    extras_require={
        "dev": [
            "pytest==9.2.0",
            "pytest-xdist==3.8.0",
            "hypothesis==6.170.15",
            "duckdb-extension-tpch==1.5.5",
            "matplotlib==3.11.2",
        ],
    },
    entry_points={"console_scripts": ["dbt-stream=dbt_incremental_stream.cli:main"]},
)
