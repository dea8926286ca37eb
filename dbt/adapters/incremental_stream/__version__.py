"""The adapter's version, as dbt looks it up: the engine's."""
from dbt_incremental_stream import __version__ as version

__all__ = ["version"]
