"""A local HTTP file server for tests: 127.0.0.1 only, ephemeral port, injectable faults.

Serves files under `root` with single-range HTTP Range support (206 + Content-Range,
416 past the end). `Faults` makes it misbehave for the first K requests (cut the body
after N bytes, answer an error status) or ignore Range altogether. Every request is
recorded in `server.log`, so tests can assert that a resume happened.

    with FileServer(tmp_path) as server:
        server.faults = Faults(cut_after_bytes=1000, cut_first=1)
        download(server.url("data.bin"), dest)
        assert server.log[1].range == "bytes=1000-"

Extend with `server.routes["/path"] = fn`, where `fn(handler)` writes a full response
using the standard `BaseHTTPRequestHandler` API (`handler.send_response`, ...) or the helpers
`handler.send_bytes` and `handler.send_data` (bytes served like a file, with Range support).
Routes match the path only; `handler.query` holds the query string's parameters.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


@dataclass
class Faults:
    """Misbehaviour applied to the first requests; request numbers count from 0."""

    cut_after_bytes: int | None = None  # close the connection after this many body bytes...
    cut_first: int = 0  # ...on the first `cut_first` requests
    error_status: int = 500  # answer this status...
    error_first: int = 0  # ...to the first `error_first` requests
    ignore_range: bool = False  # always answer 200 with the whole file


@dataclass
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    range: str | None
    status: int = 0
    body_bytes: int = 0  # body bytes actually written to the socket
    query: dict[str, str] = field(default_factory=dict)  # query-string parameters


@dataclass
class FileServer:
    """ThreadingHTTPServer on 127.0.0.1 in a daemon thread; use as a context manager."""

    root: Path
    faults: Faults = field(default_factory=Faults)
    routes: dict[str, Callable[[Handler], None]] = field(default_factory=dict)
    log: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    @property
    def bytes_sent(self) -> int:
        """Body bytes sent over all requests."""
        with self._lock:
            return sum(r.body_bytes for r in self.log)

    def _record(self, request: Request) -> int:
        """Append a request to the log and return its number (0-based)."""
        with self._lock:
            self.log.append(request)
            return len(self.log) - 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FileServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (e.g. after an error status, unread body) is not a server bug.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    """Serves `owner.root` (or a route), applying `owner.faults`."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do; needs Content-Length
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean; the request log is in FileServer.log

    def do_HEAD(self) -> None:
        self._handle(send_body=False)

    def do_GET(self) -> None:
        self._handle(send_body=True)

    def _handle(self, send_body: bool) -> None:
        owner = self.server.owner
        url = urlsplit(self.path)
        path = unquote(url.path)
        self.query: dict[str, str] = dict(parse_qsl(url.query))
        self.record = Request(self.command, path, self.headers.get("Range"), query=self.query)
        number = owner._record(self.record)
        faults = owner.faults
        if number < faults.error_first:
            return self.send_bytes(faults.error_status, b"injected error\n")
        if path in owner.routes:
            return owner.routes[path](self)
        file = (owner.root / path.lstrip("/")).resolve()
        if not file.is_file() or not file.is_relative_to(owner.root.resolve()):
            return self.send_bytes(404, b"not found\n")
        cut = faults.cut_after_bytes if number < faults.cut_first else None
        self._send_file(file.read_bytes(), send_body, cut, faults.ignore_range)

    def send_data(self, data: bytes, *, cut: int | None = None) -> None:
        """Answer with `data` as if it were a file: Range support, optional cut after N bytes."""
        self._send_file(data, self.command != "HEAD", cut, ignore_range=False)

    def _send_file(self, data: bytes, send_body: bool, cut: int | None, ignore_range: bool) -> None:
        size = len(data)
        span = None if ignore_range else _parse_range(self.headers.get("Range"), size)
        if span == "unsatisfiable":
            return self.send_bytes(416, b"", {"Content-Range": f"bytes */{size}"})
        if span is None:
            status, start, end, extra = 200, 0, size, {}
        else:
            start, end = span
            status, extra = 206, {"Content-Range": f"bytes {start}-{end - 1}/{size}"}
        body = data[start:end] if send_body else b""
        self.send_bytes(
            status, body, {"Accept-Ranges": "bytes", **extra}, length=end - start, cut=cut
        )

    def send_bytes(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        length: int | None = None,
        cut: int | None = None,
    ) -> None:
        """Send a response announcing `length` (default len(body)) bytes.

        With `cut`, only the first `cut` bytes are written and the connection is closed,
        like a server or proxy dropping mid-transfer.
        """
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if cut is not None:
            self.send_header("Connection", "close")
            self.close_connection = True
            body = body[:cut]
        # Record before writing: the client may finish reading, and the test assert on the
        # log, before this thread runs another line after the write.
        self.record.status = status
        self.record.body_bytes = len(body)
        self.end_headers()
        self.wfile.write(body)


def _parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """Return (start, end-exclusive), "unsatisfiable", or None to serve the whole file."""
    match = _RANGE.fullmatch(header.strip()) if header else None
    if not match or match.groups() == ("", ""):
        return None  # absent or unsupported (e.g. multi-range): a 200 is a valid answer
    first, last = match.groups()
    if not first:  # suffix range: the last N bytes
        return (max(size - int(last), 0), size) if int(last) else "unsatisfiable"
    start = int(first)
    end = min(int(last) + 1, size) if last else size
    return (start, end) if start < size and start < end else "unsatisfiable"
