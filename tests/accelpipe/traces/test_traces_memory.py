"""Peak allocated memory per section (accelpipe.traces.memory): a hand-built trace worked out
by hand, random ones against brute force, and a real CPU profile of torch."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from accelpipe.traces import reader, render_markdown, summarize_traces
from accelpipe.traces.memory import device_name
from tests.accelpipe.traces.test_traces_join import cuda_events
from tests.helpers.chrome_traces import CPU, write_trace
from tests.helpers.chrome_traces import x_event as _x

ANN = "user_annotation"
AUTOGRAD = {"pid": 100, "tid": 2}  # the same process as CPU: backward's allocations
OTHER = {"pid": 200, "tid": 1}
GIB = 1 << 30


def _mem(ts: float, total: int, where: dict = CPU, kind: int = 0, index: int = -1) -> dict:
    args = {"Total Reserved": 0, "Total Allocated": total, "Bytes": 8, "Device Id": index}
    args |= {"Device Type": kind, "Addr": 1}
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        **where,
        "ts": ts,
        "args": args,
    }


def _cuda(ts: float, total: int) -> dict:
    return _mem(ts, total, kind=1, index=0)


def _events() -> list[dict]:
    return [
        _x(ANN, "ProfilerStep#1", 0, 1000, CPU),
        _x(ANN, "loader_first", 10, 90, CPU),
        _x(ANN, "step", 100, 800, CPU),
        _x(ANN, "forward", 150, 250, CPU),
        _x(ANN, "loss", 400, 50, CPU),
        _x(ANN, "backward", 450, 350, CPU),
        _x(ANN, "optimizer_step", 800, 90, CPU),
        _x(ANN, "ProfilerStep#2", 1000, 1000, CPU),
        _x(ANN, "loader_next", 1010, 80, CPU),
        _x(ANN, "step", 1100, 800, CPU),
        _x(ANN, "forward", 1150, 250, CPU),
        _mem(50, 1000),
        _mem(200, 5000),
        _cuda(210, GIB),
        _mem(300, 3000),
        _mem(420, 3500),
        _mem(420, 10**9, OTHER),  # another process: in no section of this one
        _mem(450, 4000),  # loss's end and backward's start: inside both
        _mem(500, 9000, AUTOGRAD),
        _cuda(600, 3 * GIB),
        _mem(700, 2000, AUTOGRAD),
        _cuda(820, 2 * GIB),
        _mem(850, 2500),
        _mem(1200, 7000),
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", **CPU, "ts": 1300},  # no args
        _mem(float("nan"), 10**12),  # skipped and counted
    ]


# By hand: the level a section opens at (the last event before it) and every event inside.
PEAKS = {
    "step": {"cpu": 9000, "cuda:0": 3 * GIB},
    "backward": {"cpu": 9000, "cuda:0": 3 * GIB},
    "forward": {"cpu": 7000, "cuda:0": 2 * GIB},  # 2nd: opened at 2500 and 2 GiB, then 7000
    "optimizer_step": {"cpu": 2500, "cuda:0": 3 * GIB},  # opened at 2000 and 3 GiB
    "loader_first": {"cpu": 1000},  # no CUDA level known yet
    "loss": {"cpu": 4000, "cuda:0": GIB},  # opened at 3000 and 1 GiB
    "loader_next": None,  # nothing allocated or freed while open
}


@pytest.mark.parametrize("chunk", [None, 256])
def test_peak_allocated_per_section_and_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int | None
) -> None:
    if chunk:  # every block edge falls somewhere else
        monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    summary = summarize_traces([write_trace(tmp_path / "mem.json", _events())])
    assert summary["memory"] == {
        "events": 13,
        "peak_allocated_bytes": {"cpu": 10**9, "cuda:0": 3 * GIB},
        "sections": PEAKS,
    }
    assert list(summary["memory"]["sections"]) == list(summary["sections"])
    assert summary["skipped_events"] == {"non_finite_time": 1}
    json.dumps(summary, allow_nan=False)


def test_markdown_has_a_memory_table_only_with_memory_events(tmp_path: Path) -> None:
    text = render_markdown(summarize_traces([write_trace(tmp_path / "mem.json", _events())]))
    assert "From 13 `[memory]` events; peak over the trace: cpu 953.674 MiB" in text
    assert "| Section | cpu | cuda:0 |" in text
    assert "| forward | 0.007 | 2,048.000 |" in text
    assert "| loader_first | 0.001 | – |" in text
    assert "| loader_next | – | – |" in text
    plain = summarize_traces([write_trace(tmp_path / "cuda.json", cuda_events())])
    assert plain["memory"] is None
    assert "Peak allocated" not in render_markdown(plain)


@pytest.mark.parametrize(
    ("kind", "index", "name"),
    [
        (0, -1, "cpu"),
        (1, 0, "cuda:0"),
        (15, 3, "hpu:3"),
        (99, 1, "device_type_99:1"),
        ("1", 0, "unknown:0"),
    ],
)
def test_device_names(kind: object, index: object, name: str) -> None:
    assert device_name(kind, index) == name


def test_odd_memory_events_are_named_or_left_out(tmp_path: Path) -> None:
    """Lists where numbers belong are named by their text, not a crash; what is not a byte
    count (a string, a negative or a NaN total) is left out."""
    odd = _mem(200, 5000, {"pid": [100], "tid": 1})
    odd["args"]["Device Type"] = [1]
    events = [_x(ANN, "forward", 100, 200, {"pid": [100], "tid": 1}), odd]
    for total in ("5", -1, float("nan")):
        events.append(_mem(250, 0, {"pid": [100], "tid": 1}))
        events[-1]["args"]["Total Allocated"] = total
    memory = summarize_traces([write_trace(tmp_path / "odd.json", events)])["memory"]
    assert memory == {
        "events": 1,
        "peak_allocated_bytes": {"unknown": 5000},
        "sections": {"forward": {"unknown": 5000}},
    }


# --------------------------------------------------------------------------- brute force


def brute_force(events: list[dict]) -> dict:
    """Per section name and device: max over instances of the level at open and the events
    inside (same pid), with a plain loop over every event; None without an event inside."""
    mems = [e for e in events if e.get("name") == "[memory]" and "Total Allocated" in e["args"]]
    mems.sort(key=lambda e: e["ts"])
    out: dict[str, dict | None] = {}
    inside_any: set[str] = set()
    for sec in events:
        if sec.get("cat") != ANN or sec["name"].startswith("ProfilerStep#"):
            continue
        name, start, end = sec["name"], sec["ts"], sec["ts"] + sec["dur"]
        peaks = out.setdefault(name, {})
        for dev in {device_name(e["args"]["Device Type"], e["args"]["Device Id"]) for e in mems}:
            mine = [
                e
                for e in mems
                if e["pid"] == sec["pid"]
                and device_name(e["args"]["Device Type"], e["args"]["Device Id"]) == dev
            ]
            before = [e["args"]["Total Allocated"] for e in mine if e["ts"] < start]
            inside = [e["args"]["Total Allocated"] for e in mine if start <= e["ts"] <= end]
            inside_any |= {name} if inside else set()
            levels = before[-1:] + inside
            if levels:
                peaks[dev] = max(peaks.get(dev, 0), *levels)
    return {k: (dict(sorted(v.items())) if k in inside_any else None) for k, v in out.items()}


def _random_events(seed: int) -> list[dict]:
    rng = random.Random(seed)
    events = []
    for _ in range(40):
        start = rng.randrange(0, 5000)
        name = rng.choice(["forward", "backward", "loss", "step"])
        where = rng.choice([CPU, AUTOGRAD, OTHER])
        events.append(_x(ANN, name, start, rng.randrange(0, 300), where))
    for _ in range(30):
        where = rng.choice([CPU, AUTOGRAD, OTHER])
        kind, index = rng.choice([(0, -1), (1, 0), (1, 1)])
        ts = rng.randrange(0, 6000)  # integers: ties with section edges happen
        events.append(_mem(ts, rng.randrange(0, 10**10), where, kind, index))
    return events


def test_random_traces_match_brute_force(tmp_path: Path) -> None:
    seen = []
    for seed in range(8):
        events = _random_events(seed)
        summary = summarize_traces([write_trace(tmp_path / f"{seed}.json", events, "compact")])
        want = brute_force(events)
        assert summary["memory"]["sections"] == {k: want[k] for k in summary["sections"]}
        seen += want.values()
    assert None in seen and any(len(peaks or ()) == 3 for peaks in seen)  # both kinds tried


def test_a_real_cpu_profile_of_torch(tmp_path: Path) -> None:
    """torch's own [memory] events (profile_memory=True), read back by a plain json.load."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "torch.json"
    model = torch.nn.Linear(32, 32)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        for _ in range(2):
            with torch.profiler.record_function("forward"):
                loss = model(torch.randn(16, 32)).square().sum()
            with torch.profiler.record_function("backward"):
                loss.backward()
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    mems = [e for e in events if e.get("name") == "[memory]"]
    assert mems and {e["args"]["Device Type"] for e in mems} == {0}
    summary = summarize_traces([path])
    assert summary["memory"]["events"] == len(mems)
    assert summary["memory"]["sections"] == brute_force(events)
    assert summary["memory"]["sections"]["forward"]["cpu"] > 0
