"""Running a project's streaming models continuously (``dbt-stream serve``).

Every ``interval`` seconds a tick reads what arrived on every source (at most
``max_records`` offsets per source and tick: while a source is behind, ticks follow each
other without waiting), updates all models and commits. SIGTERM or SIGINT lets the
current tick finish and commit, then stops; a second one stops at once. A tick that fails
(a broker hiccup) is retried on a freshly opened project, which redoes exactly the failed
tick (:class:`~dbt_incremental_stream.project.Project` replays its recorded offset ranges).

Progress goes to the log, one line per tick (``--log-format json``: one JSON object per
event); ``/metrics`` serves the same as Prometheus metrics and ``/status`` as JSON.

While it runs, the server is the one writer of its state location: ``dbt run`` hands it
the models to deploy (``POST /deploy``, :class:`ServeClient`) instead of opening the state
itself, and finds it through ``_serve.json`` in a local state location.
"""
from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import AbstractSet, Any, Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .connectors.kafka import KafkaSource
from .errors import CompileError, StreamError
from .process import leave_signals_to_main, threads
from .project import Model, Project, TickReport
from .runtime.storage.state import announce, announced

log = logging.getLogger("dbt_stream.serve")
#: tick latencies the histogram tells apart (seconds)
BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)


class Metrics:
    """The server's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ticks = Counter("dbt_stream_ticks", "Committed ticks", registry=r)
        self.tick = Gauge("dbt_stream_tick", "The last committed tick", registry=r)
        self.seconds = Histogram("dbt_stream_tick_seconds", "Tick latency: read, update, write, commit",
                                 buckets=BUCKETS, registry=r)
        self.failures = Counter("dbt_stream_tick_failures", "Ticks that failed and were retried", registry=r)
        self.offsets = Counter("dbt_stream_source_offsets", "Kafka offsets read", ["source"], registry=r)
        self.rows_in = Counter("dbt_stream_source_records", "Records read as changes", ["source"], registry=r)
        self.dead = Counter("dbt_stream_source_dead_letters", "Records sent to the dead letters", ["source"],
                            registry=r)
        self.lag = Gauge("dbt_stream_source_lag", "Offsets left to read after the tick in flight (or the last one)",
                         ["source"], registry=r)
        self.rows_out = Counter("dbt_stream_sink_messages", "Messages written to sinks", ["model"], registry=r)
        self.last_commit = Gauge("dbt_stream_last_commit_timestamp_seconds", "When the last tick committed",
                                 registry=r)
        self.failed = Gauge("dbt_stream_failed_models", "Models whose SQL failed on their input (or that read "
                            "one), kept at their last good contents", registry=r)

    def record(self, report: TickReport) -> None:
        self.ticks.inc()
        self.tick.set(report.tick)
        self.seconds.observe(report.seconds)
        self.last_commit.set(time.time())
        for metric, values in ((self.offsets, report.offsets), (self.rows_in, report.rows_in),
                               (self.dead, report.dead), (self.rows_out, report.rows_out)):
            for label, n in values.items():
                metric.labels(label).inc(n)
        self.read(report)
        self.failed.set(len(report.failed))

    def read(self, report: TickReport) -> None:
        """A tick's lag, known once it has fixed its offset ranges."""
        for source, n in report.lag.items():
            self.lag.labels(source).set(n)


class Server:
    """Ticks a project until stopped, serving its progress over HTTP."""

    def __init__(self, open_project: Callable[[], Project], *, interval: float = 1.0, port: int | None = None,
                 host: str = "127.0.0.1", max_ticks: int | None = None, retry: float = 1.0,
                 info: dict[str, Any] | None = None):
        """``info``: more to say in ``/status`` (the Spark Connect endpoint clients use)."""
        self.open_project, self.interval, self.max_ticks, self.retry = open_project, interval, max_ticks, retry
        self.delay = retry  # before the next reopen: doubles while reopening fails, back to ``retry`` at a commit
        self.info = info or {}
        self.metrics = Metrics()
        self.project: Project | None = None
        self._stop = threading.Event()
        self._state = "starting"
        self._started = datetime.now(timezone.utc)
        self._last: TickReport | None = None
        self._reading: TickReport | None = None  # the tick in flight, once its offset ranges are fixed
        self._error: str | None = None
        self._http = _http(self, host, port) if port is not None else None
        self._handlers: dict[int, Any] | None = None
        #: deploys run on one thread for the process's life, not on each request's: every
        #: JVM thread that touches the Hive metastore keeps a connection there for good
        self._deployer = threads(1, "dbt-stream-deploy")

    @property
    def address(self) -> tuple[str, int] | None:
        return None if self._http is None else self._http.server_address[:2]  # type: ignore[return-value]

    def stop(self) -> None:
        self._stop.set()

    def _serve_http(self) -> None:
        leave_signals_to_main()  # and each request's thread, started from this one
        self._http.serve_forever()  # type: ignore[union-attr]

    def catch_signals(self) -> None:
        """From now on SIGTERM and SIGINT stop the server once the tick in flight commits;
        call it before a slow start (Spark's), which a signal would otherwise cut short."""
        if self._handlers is None:
            self._handlers = _on_signals(self)

    def status(self) -> dict[str, Any]:
        """``lag`` is the latest known: that of the tick in flight once it has read its
        offset ranges, else that of the last committed tick."""
        p, reading = self.project, self._reading
        latest = reading or self._last
        return {**self.info, "state": self._state, "started_at": self._started.isoformat(),
                "tick": None if p is None else p.tick,
                "models": [] if p is None else sorted(p.models),
                "sources": [] if p is None else p.stream_sources,
                "failed_models": {} if self._last is None else self._last.failed,
                "lag": {} if latest is None else latest.lag,
                "in_flight": None if reading is None else {"tick": reading.tick, "redone": reading.redone,
                                                           "offsets": reading.offsets},
                "last_tick": None if self._last is None else asdict(self._last),
                "last_error": self._error}

    def run(self) -> int:
        """Tick until stopped (or ``max_ticks`` ticks committed); the exit status: 0, or 1
        when the last tick failed (it is redone at the next start)."""
        self.catch_signals()
        if self._http is not None:
            threading.Thread(target=self._serve_http, daemon=True, name="dbt-stream-http").start()
            log.info("serving", extra={"event": "http", "url": "http://%s:%d/" % self.address})  # type: ignore
        committed = 0
        try:
            self.project = self._open()
            self._state = "running"
            self._announce()
            log.info("started", extra={"event": "start", "tick": self.project.tick,
                                       "models": sorted(self.project.models), "sources": self.project.stream_sources})
            while not self._stop.is_set() and (self.max_ticks is None or committed < self.max_ticks):
                started = time.monotonic()
                if self._tick():
                    committed += 1
                if self._stop.is_set() or (self.project is not None and self.project.behind):
                    continue  # catching up: no wait
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            self._state = "stopping"
            self._announce(gone=True)
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
            self._deployer.shutdown(wait=True)  # a deploy in flight finishes before the project closes
            if self.project is not None:
                self.project.close()
            _restore(self._handlers or {})
            self._handlers = None
            self._state = "stopped"
            log.info("stopped" if self._error is None else "stopped with the last tick not committed (the next "
                     "start redoes it)", extra={"event": "stop", "error": self._error,
                                                "tick": None if self.project is None else self.project.tick})
        return 0 if self._error is None else 1

    def _announce(self, gone: bool = False) -> None:
        """Write (or remove) ``_serve.json`` in a local state location, for ``dbt run`` to find."""
        address = self.address
        if self.project is not None and address is not None:
            announce(self.project.location, None if gone else "http://%s:%d/" % address)

    def deploy(self, doc: dict[str, Any]) -> dict[str, Any]:
        """A ``dbt run``'s model, run here (``POST /deploy``)."""
        project = self.project
        if project is None:
            raise StreamError("dbt-stream serve is starting or reopening its project; try again")
        keep = doc.get("keep")
        return self._deployer.submit(
            project.run_model, Model.from_json(doc["model"]), [KafkaSource.from_json(s) for s in doc["streams"]],
            full_refresh=bool(doc.get("full_refresh")), keep=None if keep is None else set(keep)).result()

    def _tick(self) -> bool:
        assert self.project is not None
        try:
            self.project.new_frontier()
            if not self.project.advance():
                return False
        except Exception as e:  # a broker hiccup, a lost executor: retry the same tick afresh
            self._reading = None
            self.metrics.failures.inc()
            self._error = f"{type(e).__name__}: {e}"
            log.error("tick failed", extra={"event": "error", "tick": self.project.tick + 1, "error": self._error})
            self._reopen()
            return False
        return True

    def _read(self, report: TickReport) -> None:
        """A tick that knows what it reads: its lag is the one to show (a redone tick is said)."""
        self._reading = report
        self.metrics.read(report)
        if report.redone:
            log.info(f"redoing tick {report.tick}, which a stop cut short", extra={
                "event": "redo", "tick": report.tick, "offsets": report.offsets, "lag": report.lag})

    def _committed(self, report: TickReport) -> None:
        """A tick's log line and metrics, as soon as its manifest commits."""
        self._last, self._reading, self._error, self.delay = report, None, None, self.retry
        self.metrics.record(report)
        log.info(_progress(report), extra={"event": "tick", **asdict(report)})

    def _open(self) -> Project:
        project = self.open_project()
        project.on_commit, project.on_read = self._committed, self._read
        return project

    def _reopen(self) -> None:
        """Wait, then a fresh project from the committed state (it redoes the failed tick)."""
        if self.project is not None:
            try:
                self.project.close()
            except Exception:  # closing clients of a broken connection may fail too
                pass
            self.project = None
        while not self._stop.wait(self.delay):
            try:
                self.project = self._open()
                return
            except Exception as e:
                self._error = f"{type(e).__name__}: {e}"
                log.error("reopen failed", extra={"event": "error", "error": self._error})
                self.delay = min(self.delay * 2, 30.0)


def _progress(r: TickReport) -> str:
    """One tick as a line a person reads."""
    sources = " ".join(f"{s}={r.rows_in.get(s, 0)}" + (f"(dead {r.dead[s]})" if r.dead.get(s) else "")
                       + (f"(lag {r.lag[s]})" if r.lag.get(s) else "") for s in r.offsets)
    sinks = " ".join(f"{m}={n}" for m, n in r.rows_out.items())
    failed = " ".join(f"{m} ({e})" for m, e in r.failed.items())
    return (f"tick {r.tick} committed in {r.seconds:.2f}s" + (f" | in: {sources}" if sources else "")
            + (f" | out: {sinks}" if sinks else "") + (f" | failed: {failed}" if failed else ""))


def _on_signals(server: Server) -> dict[int, Any]:
    """SIGTERM/SIGINT: finish the tick, then stop; a second one: stop now."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum: int, frame: Any) -> None:
        if server._stop.is_set():
            raise KeyboardInterrupt
        log.info("stopping after the current tick", extra={"event": "signal", "signal": signal.Signals(signum).name})
        server.stop()

    return {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}


def _restore(handlers: dict[int, Any]) -> None:
    for s, h in handlers.items():
        signal.signal(s, h)


def _http(server: Server, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?")[0].rstrip("/")
            if path == "/metrics":
                self._send(200, generate_latest(server.metrics.registry), CONTENT_TYPE_LATEST)
            elif path in ("/status", ""):
                self._send(200, json.dumps(server.status(), default=str).encode())
            else:
                self.send_error(404, "try /status or /metrics")

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/deploy":
                self.send_error(404, "POST /deploy")
                return
            try:
                doc = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                result, status = server.deploy(doc), 200
                log.info(f"deployed {doc['model']['relation']}: {result['message']}", extra={"event": "deploy"})
            except CompileError as e:  # its position too: the dbt run that asked places it in the model's file
                result, status = {"error": str(e), "compile": {"message": e.message, "view": e.view, "line": e.line,
                                                               "col": e.col}}, 400
            except StreamError as e:
                result, status = {"error": str(e)}, 400
            except Exception as e:  # reported to the dbt run that asked
                result, status = {"error": f"{type(e).__name__}: {e}"}, 500
            self._send(status, json.dumps(result, default=str).encode())

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Http(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            """A client gone before its answer (a poller's timeout) is not the server's
            error: no traceback in the log; anything else is logged as one line."""
            error = sys.exc_info()[1]
            if isinstance(error, ConnectionError):
                return
            log.warning(f"HTTP request from {client_address[0]} failed: {type(error).__name__}: {error}",
                        extra={"event": "warning"})

    return Http((host, port), Handler)


class JsonFormatter(logging.Formatter):
    """Structured logs: one JSON object per line with the record's fields."""

    FIELDS = ("event", "tick", "seconds", "offsets", "rows_in", "dead", "lag", "rows_out", "failed", "redone", "error",
              "models", "sources", "signal", "url", "path", "why", "split")

    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(), "level": record.levelname,
               "message": record.getMessage()}
        doc.update({k: getattr(record, k) for k in self.FIELDS if hasattr(record, k)})
        return json.dumps(doc, default=str)


def configure_logging(fmt: str = "text") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


@dataclass(frozen=True)
class ServeClient:
    """A running ``dbt-stream serve``, seen from ``dbt run``."""

    url: str  # its HTTP address, with a trailing slash
    status: dict[str, Any]

    @staticmethod
    def find(state_location: str, url: str | None = None, timeout: float = 3.0) -> ServeClient | None:
        """The server at ``url``, or the one ``_serve.json`` in a local state location names,
        if it answers and runs; else None (a file left by a crash is ignored)."""
        url = url or announced(state_location)
        if url is None:
            return None
        url = url if url.endswith("/") else url + "/"
        try:
            with urllib.request.urlopen(url + "status", timeout=timeout) as r:
                status = json.loads(r.read())
        except (OSError, ValueError):
            return None
        return ServeClient(url, status) if status.get("state") == "running" else None

    def run_model(self, model: Model, streams: Sequence[KafkaSource], *, full_refresh: bool = False,
                  keep: AbstractSet[str] | None = None, timeout: float = 3600.0) -> dict[str, Any]:
        """:meth:`Project.run_model`, done by the server."""
        body = json.dumps({"model": model.to_json(), "streams": [s.to_json() for s in streams],
                           "full_refresh": full_refresh, "keep": None if keep is None else sorted(keep)}).encode()
        request = urllib.request.Request(self.url + "deploy", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            answer = json.loads(e.read())
            if "compile" in answer:
                raise CompileError(**answer["compile"]) from None
            raise StreamError(f"dbt-stream serve at {self.url}: {answer.get('error')}") from None
        except OSError as e:
            raise StreamError(f"dbt-stream serve at {self.url} did not answer ({e}); is it still running?") from e
