"""Saying where a malformed trace goes wrong: byte offset, event number, line and column,
and a short excerpt. Only runs on the error path, so it may re-read and re-decode."""

from __future__ import annotations

import json
from typing import Protocol

import numpy as np

from accelpipe.traces.jsonscan import Scratch, locate_objects
from accelpipe.traces.problems import Malformed

_PROBE_BYTES = 1 << 20  # decode at most this much of an unclosed event to find the fault
_QUOTE_HINT = "an unescaped '\"' inside a string (e.g. an op name) does this"


class ByteSource(Protocol):
    """The decompressed bytes of a trace, read from the start: a file, a zip member, gzip."""

    def read(self, size: int = -1, /) -> bytes: ...


def excerpt(text: bytes, pos: int, before: int = 40, after: int = 20) -> str:
    """A short, printable piece of ``text`` around ``pos``."""
    return repr(text[max(0, pos - before) : pos + after].decode("utf-8", "replace"))


def unclosed_event(text: bytes, start: int, index: int) -> Malformed:
    """The error for event ``index`` (0-based), starting at stream byte ``start`` with
    ``text``, whose closing brace the structural scan never found.

    The scan counts quotes, so one stray '"' hides every later brace and the array seems
    never to close. Decoding the event with the stdlib finds the first byte that is not
    JSON, which is where the stray quote's string ended.
    """
    probe = text[:_PROBE_BYTES].decode("latin-1")  # latin-1: char offsets == byte offsets
    number = f"event #{index + 1} (from byte {start})"
    try:
        json.JSONDecoder().raw_decode(probe)
    except json.JSONDecodeError as err:
        if err.pos >= len(probe) - 1 and len(text) <= _PROBE_BYTES:
            return Malformed(f"truncated: the file ends inside {number}", start + len(text))
        if err.pos < len(probe) - 1:
            at = start + err.pos
            return Malformed(
                f"{number} is not valid JSON ({err.msg}) near {excerpt(text, err.pos)}; "
                f"{_QUOTE_HINT}",
                at,
            )
    return Malformed(f"{number} never ends (or is > 256 MiB); {_QUOTE_HINT}", start)


def events_before(seg: bytes, start: int) -> int:
    """How many events of a block end before ``start`` (the error path only: it re-scans)."""
    clean = seg[:start].replace(b"\\\\", b"__").replace(b'\\"', b"__")
    starts, _ends, _partial, _cut = locate_objects(np.frombuffer(clean, np.uint8), Scratch())
    return len(starts)


def invalid_event(piece: bytes, start: int, index: int, err: ValueError) -> Malformed:
    """The error for event ``index`` (0-based; at stream byte ``start``) that the decoder
    rejects."""
    pos = getattr(err, "pos", 0) or 0
    reason = getattr(err, "msg", str(err))
    return Malformed(
        f"event #{index + 1} is not valid JSON ({reason}) near {excerpt(piece, pos)}; "
        f"{_QUOTE_HINT}",
        start + pos,
    )


def line_and_column(stream: ByteSource, offset: int) -> tuple[int, int]:
    """1-based line and column of byte ``offset`` of ``stream`` (read from its start)."""
    line, last_newline, seen = 1, -1, 0
    while seen < offset:
        block = stream.read(min(1 << 20, offset - seen))
        if not block:
            break
        count = block.count(b"\n")
        if count:
            line += count
            last_newline = seen + block.rindex(b"\n")
        seen += len(block)
    return line, offset - last_newline
