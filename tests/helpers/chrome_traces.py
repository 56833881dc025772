"""Building blocks for hand-built chrome traces and checking summaries against them."""

from __future__ import annotations

import gzip
import itertools
import json
import zipfile
from pathlib import Path

import pytest

CPU, GPU = {"pid": 100, "tid": 1}, {"pid": 0, "tid": 7}
# Real GPU traces recorded by others (HTA's test data), beside the project's checkout.
SHARED_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"


def x_event(cat: str, name: str, ts: float, dur: float, where: dict, /, **args: object) -> dict:
    ev = {"ph": "X", "cat": cat, "name": name, **where, "ts": ts, "dur": dur}
    if args:
        ev["args"] = dict(args)
    return ev


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {
        "min": min(values),
        "mean": sum(values) / len(values),
        "median": median,
        "max": max(values),
        "total": sum(values),
    }


def section(count: int, host: list[float], kern=None, span=None, busy=None, host_span=None) -> dict:
    """The summary entry of one section, from per-instance ms: ``host`` is the host busy
    time, ``host_span`` the host span (default ``host``: a kineto ``record_function`` is
    one interval, so both are its duration)."""
    return {
        "count": count,
        "host_busy_ms": stats(host),
        "host_span_ms": stats(host if host_span is None else host_span),
        "kernel_ms": kern and stats(kern),
        "kernel_span_ms": span and stats(span),
        "device_busy_ms": busy and stats(busy),
    }


def step_stats(durations_ms: list[float], left_out: int = 0) -> dict:
    return {"count": len(durations_ms), "ms": stats(durations_ms), "incomplete_left_out": left_out}


def assert_close(got: object, want: object) -> None:
    """Recursive equality with float tolerance (stats are rounded to 1 ns)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), (got, want)
        for key in want:
            assert_close(got[key], want[key])
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=2e-6)
    else:
        assert got == want


def dump(doc: dict, style: str) -> str:
    """Serialize a trace document the ways producers do."""
    if style == "compact":
        return json.dumps(doc, separators=(",", ":"))
    if style == "wide":  # gaps between events longer than the vectorised check handles
        return json.dumps(doc, indent=10)
    if style == "kineto":  # one key per line, "dur" then a lone comma line, like libkineto
        lines = []
        for ev in doc["traceEvents"]:
            body = json.dumps(ev, indent=4).replace(',\n    "args"', '\n    ,\n    "args"', 1)
            lines.append("  " + body.replace("\n", "\n  "))
        head = {k: v for k, v in doc.items() if k not in ("traceEvents", "traceName")}
        text = json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n'
        return text + ",\n".join(lines) + f'\n  ],"traceName": {json.dumps(doc["traceName"])} }}'
    return json.dumps(doc, indent=2)


def write_trace(path: Path, events: list[dict], style: str = "kineto") -> Path:
    """A torch-like trace document around ``events``."""
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Some Accelerator {0}"}],
        "traceEvents": events,
        "traceName": str(path),
        "distributedInfo": {"backend": "nccl", "rank": 0},
    }
    path.write_text(dump(doc, style))
    return path


def filler() -> list[dict]:
    """Bulk events that must be skipped without confusing the scanner."""
    return [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        x_event("cpu_op", "aten::mm", 1105, 5, CPU, **{"Input Dims": [[2, 3], [3, 4]]}),
        x_event("cpu_op", 'aten::weird}, {"x', 1140, 2, CPU, **{"Concrete Inputs": ["[1]", "{"]}),
        x_event("cpu_op", "aten::nested", 1510, 3, CPU, items=[{"a": 1}, {"b": "}"}], cat="kernel"),
        x_event("python_function", "nn.Module: Linear_0", 1101, 50, CPU, **{"Python id": 3}),
        x_event("python_function", "C:\\torch\\{nn}\\", 1102, 1, CPU, note='say "}" \\'),
        {"ph": "s", "id": 1, "pid": 100, "tid": 1, "ts": 1130, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 1200, "cat": "ac2g", "bp": "e"},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 2900},
        x_event("Trace", "PyTorch Profiler (0)", 900, 2100, {"pid": "Spans", "tid": "PyTorch"}),
        {},
    ]


def without_paths(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "traces"}


def gzipped(src: Path) -> Path:
    dst = src.with_name(src.name + ".gz")
    dst.write_bytes(gzip.compress(src.read_bytes()))
    return dst


def zipped(src: Path, name: str | None = None) -> Path:
    dst = src.with_name(name or src.name.removesuffix(".json") + ".zip")
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(src, "trace/" + src.name)
    return dst


# The engines' sections inside a step, first busy one wins (traces.intervals.FIRST).
FIRST = ("loader_first", "loader_next", "forward", "loss", "backward", "optimizer_step")


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) pairs, with a plain loop."""
    busy, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        a = max(a, reach)
        if b > a:
            busy += b - a
        reach = max(reach, b)
    return busy


def plain_breakdown(lo: float, hi: float, intervals: list[tuple[str, float, float]]) -> dict:
    """One step ``[lo, hi]`` split among ``(name, start, end)`` intervals (of its process),
    by the rule written out instant by instant: cut the step at every interval edge; each
    piece goes to the first name of FIRST with an interval over it, else to the interval
    over it that started last (then ended first), else to None. Returns µs per name."""
    cuts = sorted({lo, hi, *(t for _, s, e in intervals for t in (s, e) if lo < t < hi)})
    out: dict = {}
    for a, b in itertools.pairwise(cuts):
        over = [(name, s, e) for name, s, e in intervals if s <= a and e >= b]
        fixed = [f for f in FIRST if any(name == f for name, _, _ in over)]
        if fixed:
            owner = fixed[0]
        else:
            rest = [iv for iv in over if iv[0] not in FIRST]
            owner = min(rest, key=lambda iv: (-iv[1], iv[2]))[0] if rest else None
        out[owner] = out.get(owner, 0.0) + (b - a)
    return out
