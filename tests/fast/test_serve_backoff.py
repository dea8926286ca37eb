"""serve without Spark (the project is a stand-in): its wait before reopening its project
after a failed tick doubles while reopening fails and starts again from ``retry`` once a
tick commits; its HTTP endpoint's errors."""
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


def test_a_client_gone_before_its_answer_leaves_no_traceback(capsys, caplog):
    """/status polled with a short timeout: the client may close before the answer is
    written; that is not serve's error (no traceback in its log), other failures are one line."""
    server = Server(_Project, port=0)  # type: ignore[arg-type]
    assert server._http is not None
    try:
        for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "Connection reset by peer")):
            try:
                raise gone
            except ConnectionError:
                server._http.handle_error(None, ("127.0.0.1", 50000))
        assert capsys.readouterr().err == "" and not caplog.records
        try:
            raise ValueError("no such thing")
        except ValueError:
            server._http.handle_error(None, ("127.0.0.1", 50000))
        assert "ValueError: no such thing" in caplog.text and "Traceback" not in capsys.readouterr().err
    finally:
        server._http.server_close()
