"""Vectorised structure finding in a block of JSON text: where the top-level objects of an
array start and end, and whether what lies between them is exactly one comma.

Everything here works on *escape-free* bytes: the caller first replaces ``\\\\`` and ``\\"``
by two harmless bytes (same length), so every ``"`` left delimits a string and a brace is
structural exactly when an even number of quotes precede it.
"""

from __future__ import annotations

import numpy as np

from accelpipe.traces.problems import Malformed

WHITESPACE = b" \t\n\r"
GAP_WIDTH = 16  # gaps between events up to this long are checked vectorised


def parity64(words: np.ndarray) -> np.ndarray:
    """Parity (0/1) of the set bits of each uint64."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        return np.bitwise_count(words) & np.uint8(1)
    for shift in (32, 16, 8, 4, 2, 1):
        words = words ^ (words >> np.uint64(shift))
    return (words & np.uint64(1)).astype(np.uint8)


class Scratch:
    """Reused per-block boolean buffers: fresh multi-MB arrays for every block cost more in
    page faults than the comparisons that fill them."""

    def __init__(self) -> None:
        self.buffers = [np.empty(0, np.bool_), np.empty(0, np.bool_)]

    def equal(self, a: np.ndarray, byte: int, other: bool = False) -> np.ndarray:
        if len(self.buffers[other]) < len(a):
            self.buffers[other] = np.empty(len(a), np.bool_)
        return np.equal(a, byte, out=self.buffers[other][: len(a)])


def byte_words(buf: bytes | np.ndarray) -> np.ndarray:
    """The eight bytes from each offset of ``buf`` as little-endian uint64 (``len - 7`` of
    them): an overlapping view, no copy, so one gather tests eight bytes at many places."""
    return np.ndarray((max(len(buf) - 7, 0),), dtype="<u8", buffer=buf, strides=(1,))


def word(text: bytes) -> np.uint64:
    """``text`` (at most eight bytes) as ``byte_words`` reads it, zero-padded."""
    return np.uint64(int.from_bytes(text, "little"))


_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(9)], np.uint64)  # n low bytes


def begins_with(words: np.ndarray, pos: np.ndarray, texts: tuple[bytes, ...]) -> np.ndarray:
    """Mask of ``pos`` where the bytes begin with any of ``texts`` (each at most 16 bytes;
    ``pos + 8`` must index ``words``)."""
    if max(map(len, texts), default=0) > 16:
        raise ValueError(f"begins_with compares at most 16 bytes: {texts}")
    head, rest = words[pos], words[pos + 8]
    found = np.zeros(len(pos), np.bool_)
    for text in texts:
        hit = (head & _LOW_BYTES[min(len(text), 8)]) == word(text[:8])
        if len(text) > 8:
            hit &= (rest & _LOW_BYTES[len(text) - 8]) == word(text[8:])
        found |= hit
    return found


def string_values(
    a: np.ndarray, words: np.ndarray, key: bytes, end: int, scratch: Scratch
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where ``key"`` (``key`` without its opening quote, at most 7 bytes) occurs in
    ``a[:end]``. Returns (found, values, odd): the places followed by ``": "`` or ``":"``
    and a string with 16 bytes before ``end``, where those strings' text begins, and the
    places that may be ``key"`` with any other separator or too near ``end`` to look at
    here (ascending; the caller looks at those one by one).

    The caller decides what a match means (it may be a nested key, or the end of a longer
    key); on escape-free bytes every ``key"`` is the end of a key or of a string value.
    """
    pattern = key + b'"'
    limit = min(end, len(a))
    at = np.flatnonzero(scratch.equal(a[:limit], key[0]))
    near = at[at >= len(words)]  # fewer than eight bytes left: no word to compare
    at = at[: len(at) - len(near)]
    at = at[(words[at] & _LOW_BYTES[len(pattern)]) == word(pattern)]
    after = at + len(pattern)
    readable = after + 3 + 16 <= limit  # the separator and 16 bytes of the value
    sep = words[np.where(readable, after, 0)]
    spaced = (sep & _LOW_BYTES[3]) == word(b': "')
    tight = (sep & _LOW_BYTES[2]) == word(b':"')
    ok = readable & (spaced | tight)
    values = after + np.where(spaced, 3, 2)
    return at[ok], values[ok], np.concatenate((at[~ok], near))


def outside_strings(a: np.ndarray, pos: np.ndarray, scratch: Scratch) -> np.ndarray:
    """Mask of ``pos`` preceded by an even number of '"' in ``a``.

    Quote flags are packed 64 to a word: per-word parities give a cheap prefix parity and
    each position only needs the bits below it in its own word.
    """
    packed = np.packbits(scratch.equal(a, 34), bitorder="little")
    packed = np.concatenate((packed, np.zeros(-len(packed) % 8, np.uint8)))
    words = packed.view("<u8")
    word_par = parity64(words)
    before = np.cumsum(word_par, dtype=np.int32) - word_par  # int32: 4x faster than uint8
    w = pos >> 6
    below = (np.uint64(1) << (pos & 63).astype(np.uint64)) - np.uint64(1)
    return ((before[w] + parity64(words[w] & below)) & 1) == 0


def locate_objects(a: np.ndarray, scratch: Scratch) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Top-level ``{...}`` objects in ``a`` (a block that starts outside any string).

    Returns (starts, ends, partial, cut): complete objects' first/last byte, the start of a
    trailing incomplete object (-1 if none) and where braces first close below depth 0.
    """
    is_brace = scratch.equal(a, 123)
    is_brace |= scratch.equal(a, 125, other=True)
    braces = np.flatnonzero(is_brace)
    code = a[braces]
    keep = outside_strings(a, braces, scratch)
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


def first_bad_gap(
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
    rows = _unlike_last_gap(seg, a, gap_start, gap_len)
    gap_start, gap_len, want = gap_start[rows], gap_len[rows], want[rows]
    cols = np.arange(min(GAP_WIDTH, max(int(gap_len.max()), 1)))  # kineto: 4, compact: 1
    block = a[np.minimum(gap_start[:, None] + cols, len(a) - 1)]
    valid = cols < gap_len[:, None]
    comma = (block == 44) & valid
    space = (block == 32) | (block == 10) | (block == 13) | (block == 9)
    ok = (space | comma | ~valid).all(axis=1) & (comma.sum(axis=1) == want)
    ok &= gap_len <= GAP_WIDTH
    for i in np.flatnonzero(~ok):  # long gaps (indented writers) are checked one by one
        text = seg[gap_start[i] : starts[rows[i]]]
        if len(text) <= GAP_WIDTH or _bare(text) != b"," * int(want[i]):
            return int(rows[i])
    return n


def _unlike_last_gap(
    seg: bytes, a: np.ndarray, gap_start: np.ndarray, gap_len: np.ndarray
) -> np.ndarray:
    """Rows whose gap must be checked. A writer repeats one separator: when the last gap
    is a good one of up to eight bytes, every gap equal to it is good too. The first gap
    (which may want no comma) and the last are always among the rows."""
    words = byte_words(a)
    n = len(gap_start)
    last = seg[gap_start[-1] : gap_start[-1] + gap_len[-1]]
    if n < 3 or gap_start[-1] >= len(words) or len(last) > 8 or _bare(last) != b",":
        return np.arange(n)
    sep = words[np.minimum(gap_start, len(words) - 1)] & _LOW_BYTES[np.minimum(gap_len, 8)]
    same = (gap_len == gap_len[-1]) & (sep == sep[-1]) & (gap_start < len(words))
    same[0] = same[-1] = False
    return np.flatnonzero(~same)


def _bare(text: bytes) -> bytes:
    return text.translate(None, WHITESPACE)


def check_tail(text: bytes, first: bool, offset: int) -> int | None:
    """Look past the last complete event (``text`` starts at stream byte ``offset``): the
    offset just after a closing ``]``, or None when more events may follow (only whitespace
    and at most one comma so far)."""
    body = text.lstrip(WHITESPACE)
    if body.startswith(b"]"):
        return len(text) - len(body) + 1
    rest = body[1:].lstrip(WHITESPACE) if body.startswith(b",") and not first else body
    if rest:
        at = offset + len(text) - len(rest)
        raise Malformed(f"expected an event object, found {rest[:40]!r}", at)
    return None
