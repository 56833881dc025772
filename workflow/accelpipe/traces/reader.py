"""Streaming reader for chrome-trace JSON: a byte window over the (decompressed) file, the
walk over the top-level object, and the chunked scan of its ``traceEvents`` array.

Nothing here holds a whole file or its event list: the array is read in ``CHUNK_BYTES``
blocks, numpy finds the event objects in each block (``jsonscan``), and the block is handed
to a ``Sink`` that picks and decodes the few events it needs. Events the sink does not
decode are checked for balanced structure and for the ``,`` between them, nothing more.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np
import orjson

from accelpipe.traces import locate
from accelpipe.traces.jsonscan import Scratch, check_tail, first_bad_gap, locate_objects
from accelpipe.traces.problems import Malformed

CHUNK_BYTES = 4 << 20  # read size; module-level so tests can shrink it to hit chunk edges
MAX_EVENT_BYTES = 256 << 20  # bounds memory when a stray '{' or '"' hides every event end

_WS_RE = re.compile(rb"[ \t\n\r]*")
_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


class Sink(Protocol):
    """What the reader feeds: blocks of located events and the other top-level members."""

    events: int  # complete events read so far (the reader counts them here)

    def take_block(
        self, seg: bytes, clean: bytes, starts: np.ndarray, ends: np.ndarray, base: int
    ) -> None:
        """``seg[starts[i]:ends[i] + 1]`` are complete events; ``clean`` is ``seg`` with
        escapes neutralised (same length); ``seg`` starts at stream byte ``base``."""

    def top_level(self, key: str, value: Any) -> None:
        """A top-level member other than ``traceEvents`` (small: decoded whole)."""


class ByteWindow:
    """A window over the decompressed byte stream; ``buf[pos:]`` is unread."""

    def __init__(self, stream: locate.ByteSource) -> None:
        self.stream = stream
        self.buf = b""
        self.pos = 0
        self.eof = False
        self.nbytes = 0

    def fill(self, size: int = 0) -> bool:
        """Drop consumed bytes and append up to ``size`` more; False at end of stream."""
        if self.eof:
            return False
        data = self.stream.read(max(size, CHUNK_BYTES))
        if not data:
            self.eof = True
            return False
        self.nbytes += len(data)
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def compact(self) -> bytes:
        if self.pos:
            self.buf = self.buf[self.pos :]
            self.pos = 0
        return self.buf

    def peek(self) -> int | None:
        """Skip whitespace; the next byte (not consumed) or None at end of stream."""
        while True:
            space = _WS_RE.match(self.buf, self.pos)
            assert space is not None  # a run of zero or more spaces matches anywhere
            self.pos = space.end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return None

    def expect(self, char: bytes) -> None:
        got = self.peek()
        if got != char[0]:
            found = "end of file" if got is None else repr(chr(got))
            raise Malformed(f"expected {char.decode()!r} but found {found}", self.offset)
        self.pos += 1

    def offset_of(self, index: int) -> int:
        """Stream offset of ``buf[index]``."""
        return self.nbytes - len(self.buf) + index

    @property
    def offset(self) -> int:
        return self.offset_of(self.pos)

    def read_key(self) -> str:
        if self.peek() != ord('"'):
            raise Malformed("expected an object key", self.offset)
        while (m := _STRING_RE.match(self.buf, self.pos)) is None:
            if not self.fill(len(self.buf)):
                raise Malformed("truncated inside an object key", self.offset)
        self.pos = m.end()
        return json.loads(m.group())

    def read_value(self) -> Any:
        """Decode one top-level value other than traceEvents, e.g. ``deviceProperties``.
        Such values are small in kineto traces and are decoded whole."""
        self.peek()
        decoder = json.JSONDecoder()
        while True:
            # latin-1 keeps char offsets equal to byte offsets; values are only inspected for ASCII.
            text = self.buf[self.pos :].decode("latin-1")
            try:
                value, end = decoder.raw_decode(text)
            except json.JSONDecodeError as err:
                if self.eof:
                    raise Malformed(f"invalid JSON ({err.msg})", self.offset + err.pos) from None
            else:
                if end < len(text) or self.eof:  # a number may continue in the next block
                    self.pos += end
                    return value
            self.fill(len(self.buf))


# --------------------------------------------------------------------------- document


def parse(r: ByteWindow, sink: Sink) -> bool:
    """Walk a chrome trace: a top-level object with ``traceEvents``, or a bare event array.
    Returns True for the bare array form."""
    head = r.peek()
    if head == ord("["):
        r.pos += 1
        stream_events(r, sink)
        bare = True
    elif head == ord("{"):
        r.pos += 1
        if not _parse_members(r, sink):
            raise Malformed('no "traceEvents" array: not a chrome trace')
        bare = False
    else:
        raise Malformed("empty file" if head is None else "not a JSON object or array", r.offset)
    if r.peek() is not None:
        raise Malformed("unexpected data after the trace", r.offset)
    return bare


def _parse_members(r: ByteWindow, sink: Sink) -> bool:
    """Members of the top-level object; True if a traceEvents array was read."""
    found = False
    if r.peek() == ord("}"):
        r.pos += 1
        return found
    while True:
        key = r.read_key()
        r.expect(b":")
        if key == "traceEvents":
            r.expect(b"[")
            stream_events(r, sink)
            found = True
        else:
            sink.top_level(key, r.read_value())
        if r.peek() == ord("}"):
            r.pos += 1
            return found
        r.expect(b",")


def _neutralise_escapes(seg: bytes) -> bytes:
    """Same length, no escapes: every '"' left delimits a string."""
    return seg.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b"\\" in seg else seg


def stream_events(r: ByteWindow, sink: Sink) -> None:
    """Consume a ``[...]`` of events; ``r.pos`` is just past ``[`` and ends past ``]``."""
    first = True
    grow = CHUNK_BYTES
    scratch = Scratch()
    while True:
        seg = r.compact()
        clean = _neutralise_escapes(seg)
        a = np.frombuffer(clean, np.uint8)
        starts, ends, partial, cut = locate_objects(a, scratch)
        n = len(starts)
        good = first_bad_gap(seg, a, starts, ends, first) if n else 0
        if good:
            sink.take_block(seg, clean, starts[:good], ends[:good], r.offset_of(0))
            sink.events += good
            first = False
        tail = int(ends[good - 1]) + 1 if good else 0
        if good < n:  # the array ends here, or the gap is malformed
            end = check_tail(seg[tail : starts[good]], first, r.offset_of(tail))
            if end is None:
                raise Malformed("expected ',' between events", r.offset_of(tail))
            r.pos = tail + end
            return
        stop = partial if partial >= 0 else cut
        end = check_tail(seg[tail:stop], first, r.offset_of(tail))
        if end is not None:
            r.pos = tail + end
            return
        if partial < 0 and cut < len(seg):
            raise Malformed("unbalanced '}' in traceEvents", r.offset_of(cut))
        if partial >= 0 and len(seg) - partial > MAX_EVENT_BYTES:
            raise locate.unclosed_event(seg[partial:], r.offset_of(partial), sink.events)
        r.pos = tail
        grow = CHUNK_BYTES if n else grow * 2  # one huge event: read geometrically more
        if not r.fill(grow):
            if partial >= 0:
                raise locate.unclosed_event(seg[partial:], r.offset_of(partial), sink.events)
            raise Malformed("truncated: the traceEvents array is never closed", r.offset)


def loads_matching(
    pattern: re.Pattern[bytes],
    seg: bytes,
    clean: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    base: int,
    first: int,
) -> list:
    """The block's events (objects ``seg[starts[i]:ends[i] + 1]``) in which ``pattern``
    matches ``clean`` (the block with string contents blanked), decoded in one batch; the
    rest are never decoded."""
    hits = [m.start() for m in pattern.finditer(clean, 0, int(ends[-1]) + 1)]
    return loads_holding(np.asarray(hits, np.int64), seg, starts, ends, base, first)


def loads_holding(
    hits: np.ndarray, seg: bytes, starts: np.ndarray, ends: np.ndarray, base: int, first: int
) -> list:
    """The block's events that hold a position of ``hits`` (ascending, none past the last
    event's end), decoded in one batch."""
    if not len(hits):
        return []
    # hits ascend, so the objects holding them do: drop repeats without np.unique's sort
    idx = np.searchsorted(starts, hits, side="right") - 1
    idx = idx[np.flatnonzero((idx >= 0) & np.diff(idx, prepend=-1).astype(bool))]
    return loads_batch(seg, starts[idx].tolist(), (ends[idx] + 1).tolist(), base, first)


def loads_batch(seg: bytes, starts: list[int], ends: list[int], base: int, first: int) -> list:
    """Decode the events ``seg[s:e]`` in one call (C speed, no per-event call). For the
    error message: ``base`` is the stream offset of ``seg``, ``first`` the 0-based number of
    the block's first event (the pieces' own numbers are counted from their offsets).

    orjson is ~2x faster than the stdlib here; the stdlib decoder is the fallback for
    what orjson rejects but chrome traces may hold (NaN, Infinity) and names the culprit.
    """
    pieces = [seg[s:e] for s, e in zip(starts, ends, strict=True)]
    batch = b"[" + b",".join(pieces) + b"]"
    was_enabled = gc.isenabled()
    gc.disable()  # thousands of fresh dicts would trigger useless collections
    try:
        return _loads(batch, seg, starts, pieces, base, first)
    finally:  # on every way out: orjson's return too
        if was_enabled:
            gc.enable()


def _loads(
    batch: bytes, seg: bytes, starts: list[int], pieces: list[bytes], base: int, first: int
) -> list:
    try:
        return orjson.loads(batch)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(batch)
    except (json.JSONDecodeError, UnicodeDecodeError):
        for start, piece in zip(starts, pieces, strict=True):  # find the culprit
            try:
                json.loads(piece)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                number = first + locate.events_before(seg, start)
                raise locate.invalid_event(piece, base + start, number, err) from None
        raise


# --------------------------------------------------------------------------- files


@contextlib.contextmanager
def open_trace(path: Path) -> Iterator[locate.ByteSource]:
    """Decompressed bytes of a .json, .json.gz or single-trace .zip (sniffed by magic)."""
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open(path, "rb"))
        magic = raw.read(4)
        raw.seek(0)
        source: IO[bytes] = raw
        if magic.startswith(b"PK"):
            source = stack.enter_context(_zip_member(stack.enter_context(zipfile.ZipFile(raw))))
            magic = source.peek(2)[:2] if hasattr(source, "peek") else b""
        stream: locate.ByteSource = source
        if magic.startswith(b"\x1f\x8b"):
            stream = stack.enter_context(gzip.GzipFile(fileobj=source, mode="rb"))
        yield stream


def _zip_member(zf: zipfile.ZipFile) -> IO[bytes]:
    files = [i for i in zf.infolist() if not i.is_dir()]
    traces = [i for i in files if i.filename.endswith((".json", ".json.gz"))] or files
    if len(traces) != 1:
        names = ", ".join(i.filename for i in traces) or "nothing"
        raise Malformed(f"zip must hold exactly one .json trace, found {names}")
    return zf.open(traces[0])


def read_trace(path: Path, sink: Sink) -> tuple[int, bool]:
    """Stream ``path`` into ``sink``; returns (decompressed bytes, bare-array form)."""
    with open_trace(path) as stream:
        window = ByteWindow(stream)
        bare = parse(window, sink)
    return window.nbytes, bare
