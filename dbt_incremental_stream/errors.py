"""One error hierarchy for the engine; the dbt plugin converts these at its boundary."""
from __future__ import annotations

import copy


class StreamError(Exception):
    """Root of every error the engine raises on purpose."""


class CompileError(StreamError):
    """The SQL of a view cannot be turned into a circuit."""

    def __init__(self, message: str, *, view: str | None = None, line: int | None = None, col: int | None = None):
        self.message, self.view, self.line, self.col = message, view, line, col
        super().__init__(self._text())

    def _text(self) -> str:
        where = []
        if self.view:
            where.append(f"view {self.view!r}")
        if self.line is not None:
            where.append(f"line {self.line}, col {self.col}")
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def naming(self, view: str) -> CompileError:
        """The same error, naming the view as its user knows it (a dbt model's relation
        rather than the engine's name for it)."""
        out = copy.copy(self)
        out.view = view
        out.args = (out._text(),)
        return out


class UnsupportedSqlError(CompileError):
    """Valid SQL that the incremental engine cannot maintain (yet); names the construct."""

    def __init__(self, construct: str, **where: object):
        self.construct = construct
        super().__init__(f"unsupported in a streaming view: {construct}", **where)  # type: ignore[arg-type]


class StateError(StreamError):
    """Persisted state does not fit the pipeline being opened."""


class ConnectorError(StreamError):
    """A source or sink cannot be read or written."""


class ModelFailed(StreamError):
    """A model's SQL failed on its input (a division by zero, an overflow, ...): the tick
    committed for the other models, and this one keeps its last good contents."""
