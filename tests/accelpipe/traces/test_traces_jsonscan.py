"""The vectorised scans (accelpipe.traces.jsonscan) against their plain definitions: the
overlapping byte words, prefix tests, the category selection (``_INTEREST_RE`` is its
definition) and the check of the gaps between events, on the real traces in
../shared/traces and on text written to break them."""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest

from accelpipe.traces import collect, jsonscan, reader
from tests.helpers.chrome_traces import SHARED_TRACES, filler


def _real_texts() -> list[bytes]:
    paths = sorted(SHARED_TRACES.glob("*.json*"))
    assert paths, f"no traces in {SHARED_TRACES}"
    return [gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes() for p in paths]


def _by_definition(clean: bytes, end: int) -> list[int]:
    return [m.start() for m in collect._INTEREST_RE.finditer(clean, 0, end)]


def _selected(clean: bytes, end: int) -> list[int]:
    return collect.FileEvents()._interesting(clean, end).tolist()


def test_byte_words_are_the_eight_bytes_from_every_offset() -> None:
    data = bytes(random.Random(3).randrange(256) for _ in range(100))
    words = jsonscan.byte_words(data)
    assert len(words) == 93
    assert words.tolist() == [int.from_bytes(data[i : i + 8], "little") for i in range(93)]
    assert len(jsonscan.byte_words(b"1234567")) == 0


def test_begins_with_agrees_with_startswith() -> None:
    rng = random.Random(5)
    data = bytes(rng.choice(b'ab"c') for _ in range(4000))
    texts = (b"a", b'ab"', b"abcabcab", b"abcabcabc", b'aaaaaaaaaaaaaaa"', b"ca")
    pos = np.arange(len(data) - 16)
    got = jsonscan.begins_with(jsonscan.byte_words(data), pos, texts)
    assert got.tolist() == [data.startswith(texts, int(p)) for p in pos]
    assert got.any() and not got.all()
    with pytest.raises(ValueError, match="16 bytes"):
        jsonscan.begins_with(jsonscan.byte_words(data), pos, (b"x" * 17,))


def test_selection_equals_the_pattern_on_the_real_traces() -> None:
    for text in _real_texts():
        clean = reader._neutralise_escapes(text)
        for end in (len(clean), len(clean) // 3, 17):
            want = _by_definition(clean, end)
            assert _selected(clean, end) == want
        assert _by_definition(clean, len(clean))  # there was something to find


@pytest.mark.parametrize(
    "text",
    [
        b'{"cat": "kernel"},{"cat":"cpu_op"},{"cat": "cpu_op"},{"cat":"kernel"}',
        b'{"cat" : "kernel"},{"cat":\n "gpu_memcpy"},{"cat"\t:"cpu_op"},{"cat" :"Trace"}',
        b'{"cat": "cpu_opx"},{"cat": "cpu_o"},{"cat": "python_function"},{"cat": "ac2g"}',
        b'{"concat": "a"},{"x": "cat"},{"cat": 5},{"args": {"cat": "user_annotation"}}',
        b'{"name": "concat", "cat": "Operator"},{"cat": "Operatorx"},{"cat": "cpu_op',
        b'{"cat": "k"}',
        b'{"cat": "python_functio"},{"cat": "python_function_"},{"cat": ""}',
    ],
)
def test_selection_equals_the_pattern_on_every_separator_and_near_the_end(text: bytes) -> None:
    for end in range(len(text) + 2):
        assert _selected(text, end) == _by_definition(text, end), end


def test_selection_equals_the_pattern_on_random_text() -> None:
    rng = random.Random(11)
    atoms = [b'"cat"', b": ", b":", b'"', b"cpu_op", b"kernel", b"c", b"at", b" ", b"\n", b"{"]
    for _ in range(200):
        text = b"".join(rng.choice(atoms) for _ in range(rng.randrange(1, 60)))
        clean = reader._neutralise_escapes(text)
        assert _selected(clean, len(clean)) == _by_definition(clean, len(clean)), text


def _events_text(gaps: list[bytes]) -> bytes:
    events = [json.dumps(ev).encode() for ev in filler()[: len(gaps)]]
    return b"".join(gap + ev for gap, ev in zip(gaps, events, strict=True))


def _first_bad_gap(text: bytes, first: bool) -> int:
    a = np.frombuffer(reader._neutralise_escapes(text), np.uint8)
    starts, ends, _partial, _cut = jsonscan.locate_objects(a, jsonscan.Scratch())
    return jsonscan.first_bad_gap(text, a, starts, ends, first)


@pytest.mark.parametrize(
    ("gaps", "first", "bad"),
    [
        ([b""] + [b",\n  "] * 9, True, 10),
        ([b"\n  "] + [b",\n  "] * 9, True, 10),
        ([b",\n  "] * 10, True, 0),  # the array's first event wants no comma
        ([b",\n  "] * 10, False, 10),
        ([b""] + [b",\n  "] * 4 + [b";\n  "] + [b",\n  "] * 4, True, 5),  # same length
        ([b""] + [b",\n  "] * 4 + [b",,\n "] + [b",\n  "] * 4, True, 5),
        ([b""] + [b",\n  "] * 4 + [b"\n   "] + [b",\n  "] * 4, True, 5),  # no comma
        ([b""] + [b",,  "] * 9, True, 1),  # the last gap is bad: its equals are bad
        ([b""] + [b","] * 3 + [b", "] + [b","] * 5, True, 10),  # unlike, and good
        ([b""] + [b",\n" + b" " * 20] * 9, True, 10),  # longer than a word
        ([b""] + [b",\n" + b" " * 20] * 4 + [b" " * 22] + [b",\n" + b" " * 20] * 4, True, 5),
    ],
)
def test_first_bad_gap_finds_the_first_bad_separator(
    gaps: list[bytes], first: bool, bad: int
) -> None:
    assert _first_bad_gap(_events_text(gaps), first) == bad
