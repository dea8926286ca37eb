"""A schema registry for tests: the subset of the Confluent Schema Registry REST API that
Avro sources and sinks use (register a subject's schema, fetch a schema by id). The real
registry is a JVM service that cannot be installed here."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


class _Handler(BaseHTTPRequestHandler):
    server: _Registry

    def _send(self, status: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and int(parts[2]) in self.server.schemas:
            return self._send(200, {"schema": self.server.schemas[int(parts[2])]})
        self._send(404, {"error_code": 40403, "message": "Schema not found"})

    def do_POST(self) -> None:  # noqa: N802
        parts = self.path.split("?")[0].strip("/").split("/")
        if self.server.password and self.headers.get("Authorization") != self.server.password:
            return self._send(401, {"error_code": 401, "message": "Unauthorized"})
        if len(parts) != 3 or parts[0] != "subjects" or parts[2] != "versions":
            return self._send(404, {"error_code": 404, "message": "not found"})
        schema = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["schema"]
        with self.server.lock:
            ids = {s: i for i, s in self.server.schemas.items()}
            if schema not in ids:
                ids[schema] = len(self.server.schemas) + 1
                self.server.schemas[ids[schema]] = schema
            self.server.subjects.setdefault(parts[1], set()).add(ids[schema])
        self._send(200, {"id": ids[schema]})

    def log_message(self, *args: object) -> None:
        pass


class _Registry(ThreadingHTTPServer):
    def __init__(self, password: str | None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, set[int]] = {}
        self.lock = threading.Lock()
        self.password = password


def serve(password: str | None = None) -> Iterator[_Registry]:
    """A running registry (``url`` attribute); ``password``: the Authorization header it wants."""
    server = _Registry(password)
    server.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
