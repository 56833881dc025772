"""The streaming reader (accelpipe.traces.reader): chunk edges, compressed forms, and one
clear error naming the file, and where in it, for whatever is not a well-formed trace."""

from __future__ import annotations

import gc
import gzip
import json
import re
import zipfile
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.traces import reader, summarize_traces
from tests.accelpipe.traces.test_traces_join import CUDA_SECTIONS, cuda_events
from tests.helpers.chrome_traces import (
    CPU,
    assert_close,
    gzipped,
    without_paths,
    write_trace,
    zipped,
)
from tests.helpers.chrome_traces import x_event as _x


def _names(filename: str, *more: str) -> AbstractContextManager:
    """Expect a one-line DataError whose message names the file (and says ``more``)."""
    pattern = re.escape(filename) + "".join(f".*{re.escape(m)}" for m in more)
    return pytest.raises(DataError, match=pattern)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_tiny_read_chunks_give_the_same_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Events, strings, escapes and the array end straddle every chunk boundary."""
    paths = [write_trace(tmp_path / f"{s}.json", cuda_events(), s) for s in ("kineto", "compact")]
    want = [summarize_traces([p]) for p in paths]
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    assert [summarize_traces([p]) for p in paths] == want


def test_bare_event_array_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(cuda_events()))
    assert_close(summarize_traces([path])["sections"], CUDA_SECTIONS)


def test_gzip_and_zip_forms_match_json(tmp_path: Path) -> None:
    src = write_trace(tmp_path / "cuda.json", cuda_events())
    want = without_paths(summarize_traces([src]))
    for packed in (gzipped(src), zipped(src)):
        assert without_paths(summarize_traces([packed])) == want


# --------------------------------------------------------------------------- errors


@pytest.fixture
def valid_json(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "ok.json", cuda_events(), "compact")


@pytest.mark.parametrize("fraction", [0.0, 0.05, 0.5, 0.97])
def test_truncated_json_raises_data_error_naming_file(valid_json: Path, fraction: float) -> None:
    data = valid_json.read_bytes()
    bad = valid_json.with_name("cut.json")
    bad.write_bytes(data[: int(len(data) * fraction)])
    with _names("cut.json"):
        summarize_traces([bad])


def test_json_cut_after_an_event_or_before_last_brace_raises(valid_json: Path) -> None:
    data = valid_json.read_bytes()
    end_of_event = data.index(b"},{") + 1
    for i, cut in enumerate((end_of_event, data.rindex(b"]") + 1, len(data) - 1)):
        bad = valid_json.with_name(f"cut{i}.json")
        bad.write_bytes(data[:cut])
        with _names(f"cut{i}.json"):
            summarize_traces([bad])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"},{", b"},x{"),  # garbage between events
        (b"},{", b"}{"),  # missing comma
        (b"},{", b"}},{"),  # unbalanced brace
        (b'"traceEvents":[', b'"traceEvents":[,'),  # leading comma
        (b'],"traceName"', b',],"traceName"'),  # trailing comma
        (b'],"traceName"', b'] "traceName"'),  # missing comma between keys
        (b'"traceEvents"', b'"otherEvents"'),  # no traceEvents at all
        (b'"ph":"X"', b'"ph":X'),  # a decoded (annotation) event is invalid JSON
    ],
)
def test_malformed_json_raises_data_error(valid_json: Path, old: bytes, new: bytes) -> None:
    data = valid_json.read_bytes()
    assert old in data
    bad = valid_json.with_name("bad.json")
    bad.write_bytes(data.replace(old, new, 1))
    with _names("bad.json"):
        summarize_traces([bad])


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "empty file"),
        (b"   ", "empty file"),
        (b"hello", "not a JSON object or array"),
        (b'{"traceEvents": []} x', "unexpected data after the trace"),
        (b"[1, 2]", "expected an event object"),
        (b"[1, 2, 3]", "expected an event object"),
        (b'{"foo": 1}', 'no "traceEvents" array'),
        (b"{}", 'no "traceEvents" array'),
        (b"[{}]", "not a trace"),
        (b'[{"a": 1}, {"b": 2}]', "not a trace"),
        (b'{"traceEvents": [{"foo": 1}]}', "not a trace"),
        (b'{"traceEvents": [[1], [2]]}', "expected an event object"),
        (b"[]", "no trace events"),
        (b'{"traceEvents": []}', "no trace events"),
    ],
)
def test_json_that_is_not_a_trace_is_refused(tmp_path: Path, content: bytes, says: str) -> None:
    bad = tmp_path / "odd.json"
    bad.write_bytes(content)
    with _names("odd.json", says) as err:
        summarize_traces([bad])
    assert "\n" not in str(err.value)


def test_an_empty_torch_trace_is_still_a_trace(tmp_path: Path) -> None:
    """torch writes schemaVersion and deviceProperties even when nothing was recorded."""
    path = write_trace(tmp_path / "empty.json", [])
    summary = summarize_traces([path])
    assert summary["events"] == 0 and summary["sections"] == {} and summary["steps"] is None


def test_truncated_gzip_raises_data_error(valid_json: Path) -> None:
    data = gzipped(valid_json).read_bytes()
    bad = valid_json.with_name("cut.json.gz")
    bad.write_bytes(data[: len(data) // 2])
    with _names("cut.json.gz"):
        summarize_traces([bad])


def test_truncated_or_ambiguous_zip_raises_data_error(valid_json: Path) -> None:
    data = zipped(valid_json).read_bytes()
    cut = valid_json.with_name("cut.zip")
    cut.write_bytes(data[: len(data) // 2])
    with _names("cut.zip"):
        summarize_traces([cut])
    two = valid_json.with_name("two.zip")
    with zipfile.ZipFile(two, "w") as zf:
        zf.write(valid_json, "a.json")
        zf.write(valid_json, "b.json")
    with _names("two.zip"):
        summarize_traces([two])


def test_missing_file_raises_data_error(tmp_path: Path) -> None:
    with _names("nope.json", "not found"):
        summarize_traces([tmp_path / "nope.json"])


def test_empty_path_list_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        summarize_traces([])


# --------------------------------------------------------------------------- where


def _with_unescaped_quote(tmp_path: Path, cat: str, style: str) -> tuple[Path, bytes, int]:
    """A trace whose 3rd event's name holds an unescaped quote (as torch writes some op
    names); returns the path, its bytes and the offset just after the stray quote's
    string ends, where a JSON decoder first fails."""
    events = [
        _x("user_annotation", "forward", 0, 100, CPU),
        _x("cpu_op", "aten::add", 1, 2, CPU),
        _x(cat, "aten::foo(QUOTEbarQUOTE)", 3, 4, CPU),
        *(_x("cpu_op", f"aten::op{i}", 10 + i, 1, CPU) for i in range(50)),
    ]
    path = write_trace(tmp_path / "quote.json", events, style)
    data = path.read_bytes().replace(b"QUOTE", b'"')
    path.write_bytes(data)
    return path, data, data.index(b'bar"')


@pytest.mark.parametrize("cat", ["cpu_op", "user_annotation"])
@pytest.mark.parametrize("style", ["kineto", "compact"])
def test_an_unescaped_quote_is_reported_where_it_is(tmp_path: Path, cat: str, style: str) -> None:
    path, data, at = _with_unescaped_quote(tmp_path, cat, style)
    line = data[:at].count(b"\n") + 1
    column = at - (data.rfind(b"\n", 0, at) + 1) + 1
    with _names("quote.json", f"at byte {at}, line {line}, column {column}") as err:
        summarize_traces([path])
    message = str(err.value)
    assert "never closed" not in message
    assert "aten::foo(" in message  # the excerpt shows the culprit
    if cat == "cpu_op":  # found by the structural scan: it also says which event
        assert "event #3" in message


def test_an_odd_number_of_stray_quotes_in_a_gzip_trace(tmp_path: Path) -> None:
    """One stray quote hides every later brace: the scan reaches the end of the file."""
    events = [_x("cpu_op", "aten::add", i, 1, CPU) for i in range(200)]
    events.insert(100, _x("cpu_op", "aten::to(QUOTE)", 5, 1, CPU))
    src = write_trace(tmp_path / "odd.json", [_x("user_annotation", "f", 0, 9, CPU), *events])
    data = src.read_bytes().replace(b"QUOTE", b'"')
    packed = tmp_path / "odd.json.gz"
    packed.write_bytes(gzip.compress(data))
    at = data.index(b'aten::to(")') + len(b'aten::to("')  # where the stray string ends
    with _names("odd.json.gz", "event #102", f"at byte {at}") as err:
        summarize_traces([packed])
    assert "unescaped" in str(err.value)


@pytest.mark.parametrize(
    "blob", [b'{"a": 1},{"b": 2}', b'{"a": NaN},{"b": 2}'], ids=["orjson", "json"]
)
def test_a_batch_decode_leaves_the_collector_as_it_found_it(blob: bytes) -> None:
    """Off while the events are decoded, back on after: orjson's success returned with it
    off (the structure read calls this outside the collector's own pause)."""
    gc.enable()
    second = blob.index(b',{"b"') + 1
    events = reader.loads_batch(blob, [0, second], [second - 1, len(blob)], 0, 0)
    assert [list(e) for e in events] == [["a"], ["b"]]
    assert gc.isenabled()
