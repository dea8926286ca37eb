"""dbt-incremental-stream: SQL views maintained incrementally (DBSP) on Apache Spark."""
from __future__ import annotations

from .errors import CompileError, ConnectorError, StateError, StreamError, UnsupportedSqlError
from .runtime.pipeline import Pipeline

__all__ = ["Pipeline", "StreamError", "CompileError", "UnsupportedSqlError", "StateError", "ConnectorError"]
__version__ = "0.1.0"
