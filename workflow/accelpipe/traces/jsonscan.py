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
        self.flags = np.empty(0, np.bool_)
        self.other = np.empty(0, np.bool_)

    def equal(self, a: np.ndarray, byte: int, other: bool = False) -> np.ndarray:
        if len(self.flags) < len(a):
            self.flags = np.empty(len(a), np.bool_)
            self.other = np.empty(len(a), np.bool_)
        return np.equal(a, byte, out=(self.other if other else self.flags)[: len(a)])


def outside_strings(a: np.ndarray, pos: np.ndarray, scratch: Scratch) -> np.ndarray:
    """Mask of ``pos`` preceded by an even number of '"' in ``a``.

    Quote flags are packed 64 to a word: per-word parities give a cheap prefix parity and
    each position only needs the bits below it in its own word.
    """
    packed = np.packbits(scratch.equal(a, 34), bitorder="little")
    packed = np.concatenate((packed, np.zeros(-len(packed) % 8, np.uint8)))
    words = packed.view("<u8")
    word_par = parity64(words)
    before = np.cumsum(word_par, dtype=np.uint8) - word_par  # mod 256 keeps the parity
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
    cols = np.arange(min(GAP_WIDTH, max(int(gap_len.max()), 1)))  # kineto: 4, compact: 1
    block = a[np.minimum(gap_start[:, None] + cols, len(a) - 1)]
    valid = cols < gap_len[:, None]
    comma = (block == 44) & valid
    space = (block == 32) | (block == 10) | (block == 13) | (block == 9)
    ok = (space | comma | ~valid).all(axis=1) & (comma.sum(axis=1) == want)
    ok &= gap_len <= GAP_WIDTH
    for i in np.flatnonzero(~ok):  # long gaps (indented writers) are checked one by one
        text = seg[gap_start[i] : starts[i]]
        if len(text) <= GAP_WIDTH or text.translate(None, WHITESPACE) != b"," * int(want[i]):
            return int(i)
    return n


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
