"""serve's wait before reopening its project after a failed tick: it doubles while
reopening fails, and starts again from ``retry`` once a tick commits (no Spark here: the
project is a stand-in)."""
from __future__ import annotations

from dbt_incremental_stream.project import TickReport
from dbt_incremental_stream.server import Server


class _Project:
    on_commit = on_read = None

    def close(self) -> None:
        pass


def test_the_reopen_back_off_doubles_while_failing_and_resets_at_a_commit():
    attempts = iter([ConnectionError("broker down"), ConnectionError("broker down"), None,
                     ConnectionError("broker down"), None])
    opened: list[_Project] = []

    def open_project() -> _Project:
        failure = next(attempts)
        if failure is not None:
            raise failure
        opened.append(_Project())
        return opened[-1]

    server = Server(open_project, retry=0.001)  # type: ignore[arg-type]
    server._reopen()
    assert server.project is opened[0] and server.delay == 0.004
    server._committed(TickReport(1))
    assert server.delay == 0.001
    server._reopen()  # the next outage waits from the start again
    assert server.project is opened[1] and server.delay == 0.002
