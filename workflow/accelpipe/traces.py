"""Streaming summaries of PyTorch profiler (kineto) chrome traces.

Traces written by ``torch.profiler`` (``export_chrome_trace`` or ``tensorboard_trace_handler``)
reach gigabytes, so nothing here loads a whole file or its event list. The file is read in
``CHUNK_BYTES`` blocks; numpy finds the top-level event objects in each block (braces outside
strings, with string escapes neutralised first); a regex finds the few events worth decoding by
their ``"cat"`` value; only those are passed to ``json.loads``. The bulk (``cpu_op``,
``python_function``, flow events) is counted and skipped: it is checked for balanced structure
and for the ``,`` between events, but its insides are not validated.

What is kept per file is compact (``array`` columns): section intervals, step durations, runtime
launches and device kernels. They are joined at the end of each file with numpy:

* A *section* is a CPU ``user_annotation`` ``X`` event (``record_function``) other than
  ``ProfilerStep#N``, counted once per instance. Device mirrors of annotations
  (``gpu_user_annotation``, or any other ``*_user_annotation`` category) are never sections, and
  neither is a ``user_annotation`` on a device row (a pid/tid with kernels and no runtime
  events; a defensive rule, no known producer writes such mirrors).
* *Steps* are the ``ProfilerStep#N`` annotations.
* ``kernel_ms`` / ``kernel_span_ms``: a kernel joins to the runtime event with the same
  ``args.correlation`` (the launch); a launch belongs to every section instance on the same
  pid/tid whose interval contains its ``ts``, so nested sections each count the kernel. All
  kernels carrying one launch's correlation (a CUDA graph's kernels share their
  ``cudaGraphLaunch``'s) count for that launch. Only ``kernel`` events are summed;
  ``gpu_memcpy`` / ``gpu_memset`` are reported in ``device_activity`` only.
* ``device_busy_ms``: the wall time inside each section instance's interval during which at
  least one device kernel ran (union of all ``kernel`` intervals of that trace file, every device
  and stream). It needs no correlation, so it is the per-section device figure for traces whose
  kernels cannot be joined to launches (Gaudi). It measures overlap in time, not causation: with
  asynchronous or lazy execution, kernels of one section may run inside another's interval.

Event names and categories recognised, per producer (kineto's category is its ActivityType):

* CUDA (CUPTI): runtime ``cuda_runtime`` and driver ``cuda_driver`` events; any of them with an
  ``args.correlation`` can be a launch (``cudaLaunchKernel``, ``cudaLaunchKernelExC``,
  ``cudaLaunchCooperativeKernel``, ``cudaGraphLaunch``, ``cuLaunchKernel``, ``cuLaunchKernelEx``,
  their ``_ptsz`` forms, ...). Device rows: ``kernel``, ``gpu_memcpy``, ``gpu_memset``,
  ``gpu_user_annotation``; ``cuda_sync`` / ``cuda_event`` rows are device hints, not activity.
* ROCm (roctracer / rocprofiler-sdk in kineto): the same categories (runtime events are
  ``cuda_runtime``; a ``hip_runtime``-style category is accepted too) with HIP names such as
  ``hipLaunchKernel``, ``hipExtLaunchKernel``, ``hipModuleLaunchKernel``,
  ``hipExtModuleLaunchKernel``, ``hipLaunchCooperativeKernel``, ``hipGraphLaunch``.
* Gaudi (``ProfilerActivity.HPU``, the habana_frameworks bridge's kineto plugin): device ops
  are ``kernel`` events (pid = device, tid = engine) whose args hold ``device`` and recipe
  metadata but no ``correlation``; DMA may be ``gpu_memcpy`` / ``gpu_memset``; bridge and
  runtime rows are ``hpu_op`` and ``privateuse1_runtime`` (treated as runtime events: launches
  when they carry a correlation). This is read from the bridge's source; no Gaudi trace was
  available. So on Gaudi, kernel stats are normally None, the kernels count in
  ``device_activity`` and ``kernels_without_launch``, and ``device_busy_ms`` gives the
  per-section device time. Should a future bridge write correlations, the join applies.
* Other categories (``cpu_op``, ``python_function``, flows, instant events, ...) are skipped;
  an unknown category is treated as a runtime event when its name looks like a launch
  (``cu*``/``cuda*``/``hip*``/``syn*`` containing ``Launch``).

``device`` is inferred from, in order: runtime names (``hip*``/``hsa_*`` → rocm, ``syn*`` → hpu,
``cu*``/``cuda*`` → cuda) and categories (``hpu``/``synapse``/``habana`` → hpu, ``hip`` → rocm),
Gaudi recipe args on kernels (hpu); then, when there is device activity, ``deviceProperties``
(AMD/gfx → rocm, Gaudi/Habana → hpu), a ``privateuse1_*`` category (hpu: the only such
backend here), else cuda; with no device events at all, cpu.

Timestamps in chrome traces are microseconds; every reported duration is milliseconds.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import re
import zipfile
import zlib
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from accelpipe.errors import DataError
from accelpipe.io import atomic_path, write_json, write_text

CHUNK_BYTES = 4 << 20  # read size; module-level so tests can shrink it to hit chunk edges

_STEP_RE = re.compile(r"ProfilerStep#\d+")
# Categories that make up the bulk of a trace and carry nothing we report.
_BULK_CATS = (
    "cpu_op",
    "python_function",
    "fwdbwd",
    "ac2g",
    "Trace",
    "cpu_instant_event",
    "Operator",  # cpu_op in traces from torch < 1.10
)
# Events whose "cat" is anything but a bulk category get decoded. Run on escape-free bytes, so
# a match is a real "cat" key (possibly nested; the decoded event decides).
_INTEREST_RE = re.compile(
    rb'"cat"\s*:\s*"(?!(?:' + b"|".join(c.encode() for c in _BULK_CATS) + rb')")'
)
_WS = b" \t\n\r"
_WS_RE = re.compile(rb"[ \t\n\r]*")
_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_GAP_WIDTH = 16  # gaps between events up to this long are checked vectorised
_MAX_EVENT_BYTES = 256 << 20  # bounds memory when a stray '{' or '"' hides every event end

# An event of an unknown category whose name looks like a kernel launch is a runtime event.
_LAUNCH_RE = re.compile(r"(?:cuda|cu|hip|syn)(?:[A-Z_]\w*)?Launch\w*")
# Runtime call names that tell the vendor (looked at once per distinct name).
_NAME_HINTS = (
    (re.compile(r"hip[A-Z_]|hsa_"), "rocm"),
    (re.compile(r"syn[A-Z]"), "hpu"),
    (re.compile(r"cu(?:da)?[A-Z_]"), "cuda"),
)
_KERNEL_CATS = frozenset({"kernel"})
_MEMCPY_CATS = frozenset({"gpu_memcpy", "memcpy"})
_MEMSET_CATS = frozenset({"gpu_memset", "memset"})
_HOST_RUNTIME_CATS = frozenset({"hpu_op"})  # kineto: "HPU host side runtime event"
_GPU_HINT_CATS = frozenset(
    {"gpu_user_annotation", "cuda_runtime", "cuda_driver", "cuda_sync", "cuda_event"}
)
_HPU_KERNEL_ARGS = ("recipeId", "recipeName")  # Gaudi bridge metadata on device ops
_NUM = (int, float)  # compared with type(), so bools are not numbers here


class _Malformed(Exception):
    """Internal: the trace is not what we can read; converted to DataError naming the file."""


# --------------------------------------------------------------------------- per-file state


class _Scan:
    """What one trace file contributes, kept in compact columns."""

    def __init__(self) -> None:
        self.events = 0
        self.names: dict[str, int] = {}
        self.threads: dict[tuple[Any, Any], int] = {}
        self.sec_name = array("i")
        self.sec_thread = array("i")
        self.sec_ts = array("d")
        self.sec_dur = array("d")
        self.step_dur = array("d")
        self.launch_corr = array("q")
        self.launch_thread = array("i")
        self.launch_ts = array("d")
        self.kern_corr = array("q")
        self.kern_ts = array("d")
        self.kern_dur = array("d")
        self.kern_rows: set[tuple[Any, Any]] = set()  # (pid, tid) of rows carrying kernels
        self.activity = {k: [0, 0.0] for k in ("kernel", "gpu_memcpy", "gpu_memset")}
        self.hints: set[str] = set()
        self.kinds: dict[str, str] = {}
        self.launch_names: set[str] = set()

    def thread(self, ev: dict) -> int:
        """Small integer id of the event's (pid, tid)."""
        key = (ev.get("pid"), ev.get("tid"))
        try:
            return self.threads.setdefault(key, len(self.threads))
        except TypeError:  # a list or object as pid/tid: key it by its text
            return self.threads.setdefault(repr(key), len(self.threads))

    def classify(self, cat: str) -> str:
        """Role of an event category (cached: a trace has only a handful of them)."""
        low = cat.lower()
        if "hpu" in low or "synapse" in low or "habana" in low:
            self.hints.add("hpu")
        if low.startswith("privateuse1"):
            self.hints.add("privateuse1")
        if low == "user_annotation":
            kind = "annotation"
        elif low.endswith("user_annotation"):  # gpu_user_annotation & co: device mirrors
            kind = "mirror"
        elif low in _KERNEL_CATS:
            kind = "kernel"
        elif low in _MEMCPY_CATS:
            kind = "gpu_memcpy"
        elif low in _MEMSET_CATS:
            kind = "gpu_memset"
        elif "runtime" in low or "driver" in low or low in _HOST_RUNTIME_CATS:
            kind = "runtime"
        else:
            kind = "other"
        if kind in self.activity or low in _GPU_HINT_CATS:
            self.hints.add("gpu")
        if "hip" in low:
            self.hints.add("rocm")
        self.kinds[cat] = kind
        return kind

    def add_many(self, events: list) -> None:
        """Record decoded (non-bulk) events. Kernels and launches, the hot paths, are inline."""
        kinds, names, kern_rows = self.kinds, self.launch_names, self.kern_rows
        for ev in events:
            cat = ev.get("cat")
            if type(cat) is not str:
                continue
            kind = kinds.get(cat) or self.classify(cat)
            ts = ev.get("ts")
            if kind == "runtime" or (kind == "other" and self._looks_like_launch(ev)):
                name = ev.get("name")
                if name not in names:
                    self._launch_name(name)
                corr = _correlation(ev)
                if corr >= 0 and type(ts) in _NUM:
                    self.launch_corr.append(corr)
                    self.launch_thread.append(self.thread(ev))
                    self.launch_ts.append(ts)
                continue
            if kind == "other" or kind == "mirror" or ev.get("ph") != "X":
                continue
            dur = ev.get("dur")
            if type(ts) not in _NUM or type(dur) not in _NUM:
                continue
            if kind == "kernel":
                corr = _correlation(ev)
                if corr < 0:
                    self._uncorrelated_kernel(ev)
                self.kern_corr.append(corr)
                self.kern_ts.append(ts)
                self.kern_dur.append(dur)
                try:  # noqa: SIM105 (a hot path: contextlib.suppress costs more)
                    kern_rows.add((ev.get("pid"), ev.get("tid")))
                except TypeError:  # a list or object as pid/tid: not a device row we know
                    pass
            if kind == "annotation":
                self._annotation(ev, ts, dur)
            else:
                totals = self.activity[kind]
                totals[0] += 1
                totals[1] += dur

    @staticmethod
    def _looks_like_launch(ev: dict) -> bool:
        name = ev.get("name")
        return type(name) is str and _LAUNCH_RE.fullmatch(name) is not None

    def _uncorrelated_kernel(self, ev: dict) -> None:
        """Gaudi's device ops carry recipe metadata and no correlation."""
        args = ev.get("args")
        if "hpu" in self.hints or type(args) is not dict:
            return
        if any(k in args for k in _HPU_KERNEL_ARGS):
            self.hints.add("hpu")

    def device_rows(self) -> np.ndarray:
        """Thread ids of rows with kernels and no runtime events: device rows. (A host row
        that shares a device row's pid/tid, say pid 1 in a container, has launches.)"""
        rows = {self.threads[k] for k in self.kern_rows if k in self.threads}
        rows -= set(np.unique(np.frombuffer(self.launch_thread, np.int32)).tolist())
        return np.fromiter(rows, np.int32, len(rows))

    def _annotation(self, ev: dict, ts: float, dur: float) -> None:
        name = ev.get("name")
        name = name if type(name) is str else str(name)
        if _STEP_RE.fullmatch(name):
            self.step_dur.append(dur)
            return
        self.sec_name.append(self.names.setdefault(name, len(self.names)))
        self.sec_thread.append(self.thread(ev))
        self.sec_ts.append(ts)
        self.sec_dur.append(dur)

    def _launch_name(self, name: Any) -> None:
        """Device hint from a runtime call name, looked at once per distinct name."""
        if isinstance(name, str):
            self.launch_names.add(name)
            for pattern, device in _NAME_HINTS:
                if pattern.match(name):
                    self.hints.add(device)
                    break

    def device_properties(self, value: Any) -> None:
        """Vendor hints from the top-level ``deviceProperties`` kineto writes. Used only to
        tell which device ran device events: the list is present in CPU-only profiles too.
        Every string value is looked at (CUDA and ROCm write ``name``; ROCm ``gcnArchName``;
        what the Gaudi bridge writes is not known here)."""
        if not isinstance(value, list):
            return
        for dev in value:
            if not isinstance(dev, dict):
                continue
            text = " ".join(v for v in dev.values() if isinstance(v, str)).lower()
            if any(k in text for k in ("amd", "radeon", "instinct", "gfx")):
                self.hints.add("props:rocm")
            elif any(k in text for k in ("gaudi", "hpu", "habana")):
                self.hints.add("props:hpu")


def _correlation(ev: dict) -> int:
    """``args.correlation`` as a non-negative int, or -1 when absent."""
    args = ev.get("args")
    corr = args.get("correlation") if type(args) is dict else None
    return corr if type(corr) is int and 0 <= corr < 1 << 63 else -1  # fits array("q")


# --------------------------------------------------------------------------- byte reader


class _Reader:
    """A window over the decompressed byte stream; ``buf[pos:]`` is unread."""

    def __init__(self, stream: BinaryIO) -> None:
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
            self.pos = _WS_RE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return None

    def expect(self, char: bytes) -> None:
        got = self.peek()
        if got != char[0]:
            found = "end of file" if got is None else repr(chr(got))
            raise _Malformed(f"expected {char.decode()!r} but found {found} at byte {self.offset}")
        self.pos += 1

    @property
    def offset(self) -> int:
        return self.nbytes - len(self.buf) + self.pos

    def read_key(self) -> str:
        if self.peek() != ord('"'):
            raise _Malformed(f"expected an object key at byte {self.offset}")
        while (m := _STRING_RE.match(self.buf, self.pos)) is None:
            if not self.fill(len(self.buf)):
                raise _Malformed("truncated inside an object key")
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
                    raise _Malformed(f"invalid JSON at byte {self.offset + err.pos}") from None
            else:
                if end < len(text) or self.eof:  # a number may continue in the next block
                    self.pos += end
                    return value
            self.fill(len(self.buf))


# --------------------------------------------------------------------------- event array


def _parity64(words: np.ndarray) -> np.ndarray:
    """Parity (0/1) of the set bits of each uint64."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        return np.bitwise_count(words) & np.uint8(1)
    for shift in (32, 16, 8, 4, 2, 1):
        words = words ^ (words >> np.uint64(shift))
    return (words & np.uint64(1)).astype(np.uint8)


class _Scratch:
    """Reused per-block boolean buffers: fresh multi-MB arrays for every block cost more in
    page faults than the comparisons that fill them."""

    def __init__(self) -> None:
        self.flags = np.empty(0, np.bool_)
        self.other = np.empty(0, np.bool_)

    def equal(self, a: np.ndarray, byte: int, other: bool = False) -> np.ndarray:
        if len(self.flags) < len(a):
            self.flags = np.empty(len(a), np.bool_)
            self.other = np.empty(len(a), np.bool_)
        return np.equal(a, byte, out=(self.other if other else self.flags)[: len(a)])


def _outside_strings(a: np.ndarray, pos: np.ndarray, scratch: _Scratch) -> np.ndarray:
    """Mask of ``pos`` preceded by an even number of '"' in ``a`` (escape-free bytes).

    Quote flags are packed 64 to a word: per-word parities give a cheap prefix parity and
    each position only needs the bits below it in its own word.
    """
    packed = np.packbits(scratch.equal(a, 34), bitorder="little")
    packed = np.concatenate((packed, np.zeros(-len(packed) % 8, np.uint8)))
    words = packed.view("<u8")
    word_par = _parity64(words)
    before = np.cumsum(word_par, dtype=np.uint8) - word_par  # mod 256 keeps the parity
    w = pos >> 6
    below = (np.uint64(1) << (pos & 63).astype(np.uint64)) - np.uint64(1)
    return ((before[w] + _parity64(words[w] & below)) & 1) == 0


def _locate_objects(a: np.ndarray, scratch: _Scratch) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Top-level ``{...}`` objects in ``a`` (escape-free bytes starting outside any string).

    Returns (starts, ends, partial, cut): complete objects' first/last byte, the start of a
    trailing incomplete object (-1 if none) and where braces first close below depth 0.
    """
    is_brace = scratch.equal(a, 123)
    is_brace |= scratch.equal(a, 125, other=True)
    braces = np.flatnonzero(is_brace)
    code = a[braces]
    keep = _outside_strings(a, braces, scratch)
    braces, code = braces[keep], code[keep]
    step = np.where(code == 123, 1, -1).astype(np.int32)
    depth = np.cumsum(step)
    cut = len(a)
    below = np.flatnonzero(depth < 0)
    if below.size:
        cut = int(braces[below[0]])
        braces, step, depth = braces[: below[0]], step[: below[0]], depth[: below[0]]
    starts = braces[(step == 1) & (depth == 1)]
    ends = braces[(step == -1) & (depth == 0)]
    partial = int(starts[len(ends)]) if len(starts) > len(ends) else -1
    return starts[: len(ends)], ends, partial, cut


def _first_bad_gap(
    seg: bytes, a: np.ndarray, starts: np.ndarray, ends: np.ndarray, first: bool
) -> int:
    """Index of the first object not preceded by exactly ``\\s*,\\s*`` (``\\s*`` for the
    first object of the array); ``len(starts)`` when all gaps are fine."""
    n = len(starts)
    gap_start = np.empty(n, np.int64)
    gap_start[0] = 0
    gap_start[1:] = ends[:-1] + 1
    gap_len = starts - gap_start
    want = np.ones(n, np.int64)
    if first:
        want[0] = 0
    cols = np.arange(min(_GAP_WIDTH, max(int(gap_len.max()), 1)))  # kineto: 4, compact: 1
    block = a[np.minimum(gap_start[:, None] + cols, len(a) - 1)]
    valid = cols < gap_len[:, None]
    comma = (block == 44) & valid
    space = (block == 32) | (block == 10) | (block == 13) | (block == 9)
    ok = (space | comma | ~valid).all(axis=1) & (comma.sum(axis=1) == want)
    ok &= gap_len <= _GAP_WIDTH
    for i in np.flatnonzero(~ok):
        text = seg[gap_start[i] : starts[i]]
        if len(text) <= _GAP_WIDTH or text.translate(None, _WS) != b"," * int(want[i]):
            return int(i)
    return n


def _decode_events(
    seg: bytes, clean: bytes, starts: np.ndarray, ends: np.ndarray, scan: _Scan
) -> None:
    """Decode only the objects holding a non-bulk ``"cat"`` and hand them to ``scan``."""
    hits = [m.start() for m in _INTEREST_RE.finditer(clean, 0, int(ends[-1]) + 1)]
    if not hits:
        return
    idx = np.unique(np.searchsorted(starts, hits, side="right") - 1)
    idx = idx[idx >= 0]
    bounds = zip(starts[idx].tolist(), (ends[idx] + 1).tolist(), strict=True)
    pieces = [seg[s:e] for s, e in bounds]
    scan.add_many(_loads_batch(pieces))


def _loads_batch(pieces: list[bytes]) -> list:
    """Decode many event objects in one call (C speed, no per-event call).

    orjson is ~2x faster than the stdlib here; the stdlib decoder is the fallback for
    what orjson rejects but chrome traces may hold (NaN, Infinity) and names the culprit.
    """
    was_enabled = gc.isenabled()
    gc.disable()  # thousands of fresh dicts would trigger useless collections
    batch = b"[" + b",".join(pieces) + b"]"
    try:
        return orjson.loads(batch)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(batch)
    except (json.JSONDecodeError, UnicodeDecodeError):
        for piece in pieces:  # find the culprit for the message
            try:
                json.loads(piece)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise _Malformed(f"invalid trace event ({err}): {piece[:120]!r}") from None
        raise
    finally:
        if was_enabled:
            gc.enable()


def _stream_events(r: _Reader, scan: _Scan) -> None:
    """Consume a ``[...]`` of events; ``r.pos`` is just past ``[`` and ends past ``]``."""
    first = True
    grow = CHUNK_BYTES
    scratch = _Scratch()
    while True:
        seg = r.compact()
        # Neutralise escapes (length-preserving) so every '"' left delimits a string.
        clean = seg.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b"\\" in seg else seg
        a = np.frombuffer(clean, np.uint8)
        starts, ends, partial, cut = _locate_objects(a, scratch)
        n = len(starts)
        good = _first_bad_gap(seg, a, starts, ends, first) if n else 0
        if good:
            _decode_events(seg, clean, starts[:good], ends[:good], scan)
            scan.events += good
            first = False
        tail = int(ends[good - 1]) + 1 if good else 0
        if good < n:  # the array ends here, or the gap is malformed
            end = _check_tail(seg[tail : starts[good]], first)
            if end is None:
                raise _Malformed(f"expected ',' between events at byte {r.offset + tail}")
            r.pos = tail + end
            return
        stop = partial if partial >= 0 else cut
        end = _check_tail(seg[tail:stop], first)
        if end is not None:
            r.pos = tail + end
            return
        if partial < 0 and cut < len(seg):
            raise _Malformed(f"unbalanced '}}' in traceEvents near byte {r.offset + cut}")
        if partial >= 0 and len(seg) - partial > _MAX_EVENT_BYTES:
            raise _Malformed(f"an event at byte {r.offset + partial} never ends (or is > 256 MiB)")
        r.pos = tail
        grow = CHUNK_BYTES if n else grow * 2  # one huge event: read geometrically more
        if not r.fill(grow):
            raise _Malformed("truncated: the traceEvents array is never closed")


def _check_tail(text: bytes, first: bool) -> int | None:
    """Look past the last complete event: offset just after a closing ``]``, or None when
    more events may follow (only whitespace and at most one comma so far)."""
    body = text.lstrip(_WS)
    if body.startswith(b"]"):
        return len(text) - len(body) + 1
    rest = body[1:].lstrip(_WS) if body.startswith(b",") and not first else body
    if rest:
        raise _Malformed(f"expected an event object, found {rest[:40]!r}")
    return None


def _parse(r: _Reader, scan: _Scan) -> None:
    """Walk the top-level JSON object (or bare event array) of a chrome trace."""
    head = r.peek()
    if head == ord("["):
        r.pos += 1
        _stream_events(r, scan)
    elif head == ord("{"):
        r.pos += 1
        if not _parse_members(r, scan):
            raise _Malformed('no "traceEvents" array in the trace')
    else:
        raise _Malformed("empty file" if head is None else "not a JSON object or array")
    if r.peek() is not None:
        raise _Malformed(f"unexpected data after the trace at byte {r.offset}")


def _parse_members(r: _Reader, scan: _Scan) -> bool:
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
            _stream_events(r, scan)
            found = True
        else:
            value = r.read_value()
            if key == "deviceProperties":
                scan.device_properties(value)
        nxt = r.peek()
        if nxt == ord("}"):
            r.pos += 1
            return found
        r.expect(b",")


# --------------------------------------------------------------------------- file access


@contextlib.contextmanager
def _open_trace(path: Path) -> Iterator[BinaryIO]:
    """Decompressed bytes of a .json, .json.gz or single-trace .zip (sniffed by magic)."""
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open(path, "rb"))
        magic = raw.read(4)
        raw.seek(0)
        stream: BinaryIO = raw
        if magic.startswith(b"PK"):
            stream = stack.enter_context(_zip_member(stack.enter_context(zipfile.ZipFile(raw))))
            magic = stream.peek(2)[:2] if hasattr(stream, "peek") else b""
        if magic.startswith(b"\x1f\x8b"):
            stream = stack.enter_context(gzip.GzipFile(fileobj=stream, mode="rb"))
        yield stream


def _zip_member(zf: zipfile.ZipFile) -> BinaryIO:
    files = [i for i in zf.infolist() if not i.is_dir()]
    traces = [i for i in files if i.filename.endswith((".json", ".json.gz"))] or files
    if len(traces) != 1:
        names = ", ".join(i.filename for i in traces) or "nothing"
        raise _Malformed(f"zip must hold exactly one .json trace, found {names}")
    return zf.open(traces[0])


def _scan_file(path: Path) -> tuple[_Scan, int]:
    scan = _Scan()
    try:
        with _open_trace(path) as stream:
            reader = _Reader(stream)
            _parse(reader, scan)
    except FileNotFoundError:
        raise DataError(f"{path}: trace file not found") from None
    except _Malformed as err:
        raise DataError(f"{path}: malformed trace: {err}") from None
    except (EOFError, zlib.error, zipfile.BadZipFile, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: truncated or corrupt compressed trace ({err})") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read trace ({err})") from None
    return scan, reader.nbytes


# --------------------------------------------------------------------------- join and stats


class _Sections:
    """Per-instance durations (µs) per section name, accumulated across files."""

    def __init__(self) -> None:
        self.cpu: dict[str, array] = {}
        self.kernel: dict[str, array] = {}
        self.span: dict[str, array] = {}
        self.busy: dict[str, array] = {}
        self.with_kernels: set[str] = set()
        self.with_busy: set[str] = set()

    def extend(self, name: str, columns: dict[str, np.ndarray], has: np.ndarray) -> None:
        for key in ("cpu", "kernel", "span", "busy"):
            getattr(self, key).setdefault(name, array("d")).extend(columns[key].tolist())
        if has.any():
            self.with_kernels.add(name)
        if (columns["busy"] > 0).any():
            self.with_busy.add(name)


def _kernels_by_correlation(scan: _Scan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unique correlation ids with their kernels' summed duration, first start and last end."""
    corr = np.frombuffer(scan.kern_corr, np.int64)
    ts = np.frombuffer(scan.kern_ts, np.float64)
    dur = np.frombuffer(scan.kern_dur, np.float64)
    order = np.argsort(corr, kind="stable")
    corr, ts, dur = corr[order], ts[order], dur[order]
    uniq, first = np.unique(corr, return_index=True)
    return (
        uniq,
        np.add.reduceat(dur, first),
        np.minimum.reduceat(ts, first),
        np.maximum.reduceat(ts + dur, first),
    )


def _range_reduce(
    ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray, empty: float
) -> np.ndarray:
    """``ufunc`` over ``values[lo:hi]`` for each pair (``empty`` where lo == hi)."""
    out = np.full(len(lo), empty)
    live = hi > lo
    if live.any():
        padded = np.append(values, empty)  # so every ``hi`` is a valid reduceat index
        idx = np.column_stack((lo[live], hi[live])).ravel()
        out[live] = ufunc.reduceat(padded, idx)[::2]
    return out


def _busy_within(scan: _Scan, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Time in each ``[start, end]`` covered by at least one kernel (any device or stream)."""
    if not len(scan.kern_ts) or not len(start):
        return np.zeros(len(start))
    ts = np.frombuffer(scan.kern_ts, np.float64)
    order = np.argsort(ts, kind="stable")
    k_start = ts[order]
    k_end = np.frombuffer(scan.kern_dur, np.float64)[order]
    del order  # a few arrays the size of the kernel columns at a time: they can be large
    np.maximum(k_end, 0.0, out=k_end)
    k_end += k_start
    # Merge overlapping kernels into disjoint busy intervals.
    reach = np.maximum.accumulate(k_end)
    opens = np.flatnonzero(k_start[1:] > reach[:-1])
    del reach
    opens += 1
    opens = np.concatenate(([0], opens))
    b_start = k_start[opens]
    b_end = np.maximum.reduceat(k_end, opens)
    del k_start, k_end, opens
    before = np.concatenate(([0.0], np.cumsum(b_end - b_start)))

    def covered(t: np.ndarray) -> np.ndarray:  # busy time in (-inf, t]
        k = np.searchsorted(b_start, t, side="right")  # intervals starting at or before t
        over = np.where(k > 0, b_end[np.maximum(k - 1, 0)] - t, 0.0)
        return before[k] - np.maximum(over, 0.0)

    return np.maximum(covered(end) - covered(start), 0.0)


def _join(scan: _Scan, sections: _Sections) -> int:
    """Attach kernels to section instances; returns the number of kernels with no launch."""
    sec_thread = np.frombuffer(scan.sec_thread, np.int32)
    # An annotation on a device row is a device mirror, whatever its category.
    keep = ~np.isin(sec_thread, scan.device_rows())
    sec_thread = sec_thread[keep]
    sec_ts = np.frombuffer(scan.sec_ts, np.float64)[keep]
    sec_dur = np.frombuffer(scan.sec_dur, np.float64)[keep]
    names = np.frombuffer(scan.sec_name, np.int32)[keep]
    n = len(sec_ts)
    kern, first, last = np.zeros(n), np.full(n, np.inf), np.full(n, -np.inf)
    orphans = len(scan.kern_corr)
    if len(scan.kern_corr) and len(scan.launch_corr):
        uniq, k_sum, k_first, k_last = _kernels_by_correlation(scan)
        l_corr = np.frombuffer(scan.launch_corr, np.int64)
        # One launch per correlation id (the first), and only launches that ran kernels.
        l_corr, l_pick = np.unique(l_corr, return_index=True)
        pos = np.minimum(np.searchsorted(uniq, l_corr), len(uniq) - 1)
        hit = uniq[pos] == l_corr
        l_pick, pos = l_pick[hit], pos[hit]
        kern_corr = np.frombuffer(scan.kern_corr, np.int64)
        orphans = int(np.count_nonzero(~np.isin(kern_corr, l_corr)))
        l_thread = np.frombuffer(scan.launch_thread, np.int32)[l_pick]
        l_ts = np.frombuffer(scan.launch_ts, np.float64)[l_pick]
        for t in np.unique(sec_thread):
            rows = np.flatnonzero(sec_thread == t)
            mine = np.flatnonzero(l_thread == t)
            order = mine[np.argsort(l_ts[mine], kind="stable")]
            times, sel = l_ts[order], pos[order]
            lo = np.searchsorted(times, sec_ts[rows], side="left")
            hi = np.searchsorted(times, sec_ts[rows] + sec_dur[rows], side="right")
            csum = np.concatenate(([0.0], np.cumsum(k_sum[sel])))
            kern[rows] = csum[hi] - csum[lo]
            first[rows] = _range_reduce(np.minimum, k_first[sel], lo, hi, np.inf)
            last[rows] = _range_reduce(np.maximum, k_last[sel], lo, hi, -np.inf)
    has = last >= first
    span = np.where(has, last - first, 0.0)
    busy = _busy_within(scan, sec_ts, sec_ts + sec_dur)
    for name, idx in scan.names.items():
        rows = names == idx
        if rows.any():
            columns = {"cpu": sec_dur[rows], "kernel": kern[rows], "span": span[rows]}
            sections.extend(name, columns | {"busy": busy[rows]}, has[rows])
    return orphans


def _stats_ms(values_us: Sequence[float]) -> dict[str, float]:
    v = np.asarray(values_us, dtype=np.float64) / 1000.0
    return {
        "min": round(float(v.min()), 6),
        "mean": round(float(v.mean()), 6),
        "median": round(float(np.median(v)), 6),
        "max": round(float(v.max()), 6),
        "total": round(float(v.sum()), 6),
    }


def _device(hints: set[str]) -> str:
    """cpu/cuda/rocm/hpu from what the events showed: runtime names and categories first,
    then, for device events with no telling name or category, ``deviceProperties`` and a
    ``privateuse1`` category (see the module docstring)."""
    for device in ("rocm", "hpu", "cuda"):
        if device in hints:
            return device
    if "gpu" not in hints:
        return "cpu"
    for device in ("rocm", "hpu"):
        if f"props:{device}" in hints:
            return device
    return "hpu" if "privateuse1" in hints else "cuda"


# --------------------------------------------------------------------------- public API


def summarize_traces(paths: Sequence[str | Path]) -> dict:
    """Summarize one or more chrome traces (e.g. successive profiler cycles) together.

    Returns a JSON-serializable dict: ``traces``, ``bytes`` (uncompressed), ``events``,
    ``device`` (cpu/cuda/rocm/hpu, inferred), ``steps`` (``ProfilerStep#N`` durations, or None),
    ``sections`` (per ``record_function`` name: ``count``, ``cpu_ms``, ``kernel_ms``,
    ``kernel_span_ms`` and ``device_busy_ms`` stats over instances; the kernel stats are None
    for a section that never launched a kernel, ``device_busy_ms`` None for one that never
    overlapped a kernel; otherwise instances without count as 0) and ``device_activity``
    (count and total ms of kernels, memcpys and memsets; ``kernels_without_launch``: kernels
    with no runtime event of the same correlation, e.g. all kernels of a Gaudi trace).
    Stats are ``{"min", "mean", "median", "max", "total"}`` in milliseconds.

    Raises DataError naming the file if a trace is missing, truncated or malformed.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise ValueError("summarize_traces needs at least one trace file")
    totals = _Totals()
    for path in map(Path, paths):
        totals.add(*_scan_file(path))
    return totals.summary(paths)


class _Totals:
    """Everything pooled across the trace files of one summary."""

    def __init__(self) -> None:
        self.sections = _Sections()
        self.steps = array("d")
        self.hints: set[str] = set()
        self.activity = {k: [0, 0.0] for k in ("kernel", "gpu_memcpy", "gpu_memset")}
        self.bytes = self.events = self.orphans = 0

    def add(self, scan: _Scan, nbytes: int) -> None:
        self.bytes += nbytes
        self.events += scan.events
        self.steps.extend(scan.step_dur)
        self.hints |= scan.hints
        for kind, (count, dur) in scan.activity.items():
            self.activity[kind][0] += count
            self.activity[kind][1] += dur
        self.orphans += _join(scan, self.sections)

    def summary(self, paths: Sequence[str | Path]) -> dict:
        sec = self.sections
        out: dict[str, dict] = {}
        # Most expensive sections first: the order readers scan the table and plot in.
        for name in sorted(sec.cpu, key=lambda k: (-sum(sec.cpu[k]), k)):
            kernels, busy = name in sec.with_kernels, name in sec.with_busy
            out[name] = {
                "count": len(sec.cpu[name]),
                "cpu_ms": _stats_ms(sec.cpu[name]),
                "kernel_ms": _stats_ms(sec.kernel[name]) if kernels else None,
                "kernel_span_ms": _stats_ms(sec.span[name]) if kernels else None,
                "device_busy_ms": _stats_ms(sec.busy[name]) if busy else None,
            }
        activity = {
            k: {"count": c, "total_ms": round(d / 1e3, 6)} for k, (c, d) in self.activity.items()
        }
        return {
            "traces": [str(p) for p in paths],
            "bytes": self.bytes,
            "events": self.events,
            "device": _device(self.hints),
            "steps": {"count": len(self.steps), "ms": _stats_ms(self.steps)}
            if self.steps
            else None,
            "sections": out,
            "device_activity": {**activity, "kernels_without_launch": self.orphans},
        }


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:,.3f}"


def _cell(name: str) -> str:
    return name.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def render_markdown(summary: dict) -> str:
    """A short human-readable report: header facts, step times and a section table."""
    lines = ["# Profiler trace summary", ""]
    traces = ", ".join(f"`{t}`" for t in summary["traces"])
    lines.append(f"- Traces ({len(summary['traces'])}): {traces}")
    lines.append(f"- Device: {summary['device']}")
    mb = summary["bytes"] / 2**20
    lines.append(f"- Events: {summary['events']:,} ({mb:,.1f} MiB of JSON)")
    activity = summary.get("device_activity") or {}
    orphans, kernels = activity.get("kernels_without_launch"), activity.get("kernel")
    if orphans and kernels:
        lines.append(
            f"- Kernels not joined to a launch (no correlation): {orphans:,} of "
            f"{kernels['count']:,}; they count in device busy time (overlap), not in kernel time"
        )
    steps = summary.get("steps")
    if steps:
        ms = steps["ms"]
        lines.append(
            f"- Steps: {steps['count']}, mean {_fmt(ms['mean'])} ms "
            f"(min {_fmt(ms['min'])}, median {_fmt(ms['median'])}, max {_fmt(ms['max'])})"
        )
    else:
        lines.append("- Steps: none (no ProfilerStep#N annotations)")
    lines.append("")
    if not summary["sections"]:
        lines.append("No `record_function` sections in the trace.")
        return "\n".join(lines) + "\n"
    lines.append(
        "| Section | Count | CPU mean ms | CPU total ms | Kernel mean ms | Kernel span mean ms "
        "| Device busy mean ms |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, sec in summary["sections"].items():
        kern, span, busy = sec["kernel_ms"], sec["kernel_span_ms"], sec.get("device_busy_ms")
        lines.append(
            f"| {_cell(name)} | {sec['count']} | {_fmt(sec['cpu_ms']['mean'])} | "
            f"{_fmt(sec['cpu_ms']['total'])} | {_fmt(kern and kern['mean'])} | "
            f"{_fmt(span and span['mean'])} | {_fmt(busy and busy['mean'])} |"
        )
    return "\n".join(lines) + "\n"


def plot_step_breakdown(summary: dict, png_path: str | Path, max_sections: int = 30) -> None:
    """Horizontal bars of mean ms per section (CPU, and device kernel and busy time where
    present), with the mean step time as the top bar and a dashed reference line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # Figure + Agg canvas directly: no pyplot global state or backend switching.
    items = list(summary["sections"].items())
    items.sort(key=lambda kv: -kv[1]["cpu_ms"]["mean"])
    items = items[:max_sections]
    steps = summary.get("steps")
    # Escape '$' so matplotlib never reads a section name as mathtext.
    labels = [(n if len(n) <= 40 else n[:37] + "...").replace("$", r"\$") for n, _ in items]
    cpu = [sec["cpu_ms"]["mean"] for _, sec in items]
    kern = [(sec["kernel_ms"] or {}).get("mean", 0.0) for _, sec in items]
    busy = [(sec.get("device_busy_ms") or {}).get("mean", 0.0) for _, sec in items]
    if steps:
        labels.insert(0, "step (ProfilerStep)")
        cpu.insert(0, steps["ms"]["mean"])
        kern.insert(0, 0.0)
        busy.insert(0, 0.0)
    fig = Figure(figsize=(9, 1.6 + 0.4 * max(len(labels), 1)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if not labels:
        ax.text(0.5, 0.5, "no steps or sections in trace", ha="center", va="center")
        ax.set_axis_off()
    else:
        y = np.arange(len(labels))
        first = 1 if steps else 0
        if steps:
            ax.barh(y[:1], cpu[:1], height=0.7, color="tab:gray", label="step time (mean ms)")
            ax.axvline(cpu[0], color="tab:gray", linestyle="--", linewidth=1)
        ax.barh(y[first:], cpu[first:], height=0.7, color="tab:blue", label="CPU (mean ms)")
        if any(kern):
            ax.barh(y, kern, height=0.35, color="tab:orange", label="device kernels (mean ms)")
        if any(busy):
            ax.barh(y, busy, height=0.15, color="tab:green", label="device busy (mean ms)")
        ax.set_yticks(y, labels)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # first row on top
        ax.set_xlabel("mean time per instance (ms)")
        ax.legend(loc="lower right", fontsize="small")
    ax.set_title(f"Step breakdown ({summary['device']})")
    fig.tight_layout()
    fig.savefig(png_path, format="png", dpi=100)


def write_summary(paths: Sequence[str | Path], out_dir: str | Path) -> dict:
    """Summarize ``paths`` and write ``summary.json``, ``summary.md`` and ``step_breakdown.png``
    into ``out_dir`` (each atomically); returns the summary."""
    summary = summarize_traces(paths)
    out = Path(out_dir)
    write_json(out / "summary.json", summary)
    write_text(out / "summary.md", render_markdown(summary))
    with atomic_path(out / "step_breakdown.png") as tmp:
        plot_step_breakdown(summary, tmp)
    return summary


# x
