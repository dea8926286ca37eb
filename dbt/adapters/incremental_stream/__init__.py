"""The dbt plugin: dbt-spark's in-process session plus the streaming materializations."""
from dbt.adapters.base import AdapterPlugin

from dbt.adapters.incremental_stream.connections import (  # noqa: F401
    IncrementalStreamConnectionManager,
    IncrementalStreamCredentials,
)
from dbt.adapters.incremental_stream.impl import IncrementalStreamAdapter
from dbt.include import incremental_stream

Plugin = AdapterPlugin(
    adapter=IncrementalStreamAdapter,  # type: ignore[arg-type]
    credentials=IncrementalStreamCredentials,
    include_path=incremental_stream.PACKAGE_PATH,
    dependencies=["spark"],
)
