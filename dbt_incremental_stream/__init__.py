"""dbt-incremental-stream: SQL views maintained incrementally (DBSP) on Apache Spark."""
from __future__ import annotations

from .process import bound_free_memory, use_system_allocator

use_system_allocator()  # before anything loads Arrow: see process.py
bound_free_memory()

from .errors import CompileError, ConnectorError, StateError, StreamError, UnsupportedSqlError  # noqa: E402
from .runtime.pipeline import Pipeline  # noqa: E402

__all__ = ["Pipeline", "StreamError", "CompileError", "UnsupportedSqlError", "StateError", "ConnectorError"]
__version__ = "0.1.0"
