"""dbt-incremental-stream: SQL views maintained incrementally (DBSP) on Apache Spark."""
from __future__ import annotations

from .errors import CompileError, ConnectorError, StateError, StreamError, UnsupportedSqlError
from .process import use_system_allocator
from .runtime.pipeline import Pipeline

__all__ = ["Pipeline", "StreamError", "CompileError", "UnsupportedSqlError", "StateError", "ConnectorError"]
__version__ = "0.1.0"

use_system_allocator()  # before the engine allocates: see process.py
