"""One error hierarchy for the engine; the dbt plugin converts these at its boundary."""
from __future__ import annotations

import copy


class StreamError(Exception):
    """Root of every error the engine raises on purpose."""


class CompileError(StreamError):
    """The SQL of a view cannot be turned into a circuit."""

    def __init__(self, message: str, *, view: str | None = None, line: int | None = None, col: int | None = None,
                 file: str | None = None):
        self.message, self.view, self.line, self.col, self.file = message, view, line, col, file
        super().__init__(self._text())

    def _text(self) -> str:
        where = []
        if self.view:
            where.append(f"view {self.view!r}")
        if self.line is not None:
            at = f"line {self.line}" if self.col is None else f"line {self.line}, col {self.col}"
            where.append(f"{at} of {self.file}" if self.file else at)
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def naming(self, view: str) -> CompileError:
        """The same error, naming the view as its user knows it (a dbt model's relation
        rather than the engine's name for it)."""
        return self._with(view=view)

    def at(self, file: str, col: int | None) -> CompileError:
        """The same error placed in a file its user can open (the SQL the engine read came
        from it, line for line); ``col`` None where the file's line is not the SQL's."""
        return self._with(file=file, col=col)

    def _with(self, **changes: object) -> CompileError:
        out = copy.copy(self)
        out.__dict__.update(changes)
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
