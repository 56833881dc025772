"""Two processes made to overlap for certain, without sleeps: a route of the test HTTP server
that holds the rest of its answer until the test opens a gate, Python processes started with
the package on their path and their stderr in a file, and a poll that fails if one ends
before the awaited state."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers.http_server import Handler
from tests.workflow.project import REPO


def gated_route(data: bytes, gate: threading.Event) -> Callable[[Handler], None]:
    """A FileServer route serving `data`: the first half at once, the rest once `gate` is
    set (so the client is mid-transfer for as long as the test needs)."""

    def route(handler: Handler) -> None:
        half = len(data) // 2
        handler.record.status = 200
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data[:half])
        handler.wfile.flush()
        gate.wait()
        handler.wfile.write(data[half:])
        handler.record.body_bytes = len(data)

    return route


def start_python(argv: list[str], *, log: Path, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """`python <argv>` with the package importable, its stderr into `log`."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, *argv], stderr=out, env=env, cwd=cwd)


def await_state(what: Callable[[], bool], *procs: subprocess.Popen[bytes]) -> None:
    """Poll until `what` holds; fail if one of `procs` ends first (no time limit)."""
    while not what():
        ended = [p.args for p in procs if p.poll() is not None]
        assert not ended, f"ended before the awaited state: {ended}"
        time.sleep(0.05)
