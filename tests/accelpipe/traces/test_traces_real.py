"""Real traces: four recorded on GPUs by others (../shared/traces, HTA's test data) and
CPU profiles made here with torch.profiler. Expected numbers come from an independent
reading of each file's events (json.load and plain loops), never from earlier output."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from accelpipe.traces import summarize_traces
from tests.helpers.chrome_traces import (
    SHARED_TRACES,
    assert_close,
    gzipped,
    stats,
    without_paths,
    zipped,
)

pytestmark = pytest.mark.torch

REAL = {
    "timeline_analysis__sampled_rank-0.json.gz": "cuda",
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz": "rocm",
    "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz": "cuda",
    "call_stack__backward_thread.json": "cuda",
}
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def _load(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _expected(events: list[dict], any_thread: bool = True) -> tuple[dict, list[dict]]:
    """Per section name, per instance (cpu, kernel, first, last, busy) µs, by the rule:
    a launch belongs to the innermost instance of each name (latest start, then earliest
    end) whose [ts, ts + dur] holds it, in the same process (and, with ``any_thread``
    False, the same thread: the old rule). Also the ProfilerStep events."""
    kernels: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            kernels[e["args"]["correlation"]].append((e["ts"], e["dur"]))
    launches: dict[int, dict] = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("cat") in LAUNCH_CATS and corr in kernels and corr not in launches:
            launches[corr] = e
    annotations = [e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    steps = [e for e in annotations if e["name"].startswith("ProfilerStep#")]
    sections = [e for e in annotations if not e["name"].startswith("ProfilerStep#")]
    per = {id(s): {"kern": 0.0, "first": float("inf"), "last": float("-inf")} for s in sections}
    for corr, launch in launches.items():
        for name in {s["name"] for s in sections}:
            holders = [
                s
                for s in sections
                if s["name"] == name
                and s["pid"] == launch["pid"]
                and (any_thread or s["tid"] == launch["tid"])
                and s["ts"] <= launch["ts"] <= s["ts"] + s["dur"]
            ]
            if holders:
                owner = max(holders, key=lambda s: (s["ts"], -(s["ts"] + s["dur"])))
                mine = per[id(owner)]
                mine["kern"] += sum(d for _, d in kernels[corr])
                mine["first"] = min(mine["first"], *(t for t, _ in kernels[corr]))
                mine["last"] = max(mine["last"], *(t + d for t, d in kernels[corr]))
    intervals = sorted((t, t + d) for ks in kernels.values() for t, d in ks)
    out: dict[str, list[dict]] = defaultdict(list)
    for s in sections:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        busy, reach = 0.0, float("-inf")
        for a, b in intervals:  # union of kernel time clipped to the section
            a, b = max(a, lo, reach), min(b, hi)
            if b > a:
                busy += b - a
            reach = max(reach, min(b, hi))
        out[s["name"]].append(per[id(s)] | {"cpu": s["dur"], "busy": busy})
    return out, steps


def _summary_of(instances: dict[str, list[dict]]) -> dict:
    want = {}
    for name, rows in instances.items():
        has = any(r["last"] >= r["first"] for r in rows)
        span = [(r["last"] - r["first"]) / 1e3 if r["last"] >= r["first"] else 0.0 for r in rows]
        busy = [r["busy"] / 1e3 for r in rows]
        want[name] = {
            "count": len(rows),
            "host_busy_ms": stats([r["cpu"] / 1e3 for r in rows]),  # one interval each
            "host_span_ms": stats([r["cpu"] / 1e3 for r in rows]),
            "kernel_ms": stats([r["kern"] / 1e3 for r in rows]) if has else None,
            "kernel_span_ms": stats(span) if has else None,
            "device_busy_ms": stats(busy) if any(busy) else None,
        }
    return want


@pytest.mark.parametrize("name", sorted(REAL))
def test_shared_gpu_traces_match_an_independent_reading(name: str) -> None:
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present (the shared test data lives beside the project)")
    events = _load(path)
    instances, steps = _expected(events)
    summary = summarize_traces([path])
    assert summary["device"] == REAL[name]
    assert summary["format"] == "kineto"
    assert_close(summary["sections"], _summary_of(instances))
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert summary["device_activity"]["kernel"]["count"] == len(kernels)
    assert summary["skipped_events"] == {"non_finite_time": 0}
    # Steps: only a last step holding none of the sections every other step holds is
    # incomplete (these files have one pid and at most two steps).
    steps.sort(key=lambda s: s["ts"])
    named = [e for e in events if e.get("cat") == "user_annotation" and e not in steps]

    def inside(step: dict) -> set[str]:
        return {e["name"] for e in named if step["ts"] <= e["ts"] <= step["ts"] + step["dur"]}

    if not steps:
        assert summary["steps"] is None
        return
    reference = set.intersection(*(inside(s) for s in steps[:-1])) if len(steps) > 1 else set()
    last_incomplete = bool(reference) and not (reference & inside(steps[-1]))
    kept = steps[:-1] if last_incomplete else steps
    assert summary["steps"]["incomplete_left_out"] == int(last_incomplete)
    assert_close(summary["steps"]["ms"], stats([s["dur"] / 1e3 for s in kept]))


# Their step breakdowns: test_traces_structure.py (none of them has accelpipe's sections).


def test_the_rocm_trace_leaves_out_its_short_last_step() -> None:
    path = SHARED_TRACES / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not present")
    steps = sorted(
        (e for e in _load(path) if str(e.get("name")).startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    summary = summarize_traces([path])
    assert summary["steps"]["incomplete_left_out"] == 1
    assert summary["steps"]["ms"]["total"] == pytest.approx(steps[0]["dur"] / 1e3, abs=2e-6)


@pytest.mark.parametrize(
    "name", ["timeline_analysis__sampled_rank-0.json.gz", "call_stack__backward_thread.json"]
)
def test_backward_gets_the_autograd_threads_kernels(name: str) -> None:
    """The launches inside backward come from another thread: the same-thread rule gives
    backward (almost) nothing, the process-wide rule all of them."""
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    events = _load(path)
    process_wide = _summary_of(_expected(events)[0])["## backward ##"]["kernel_ms"]["total"]
    same = _summary_of(_expected(events, any_thread=False)[0])["## backward ##"]["kernel_ms"]
    same_total = same["total"] if same else 0.0
    assert process_wide > 0 and process_wide > 100 * same_total
    got = summarize_traces([path])["sections"]["## backward ##"]["kernel_ms"]["total"]
    assert got == pytest.approx(process_wide, abs=2e-6)


# --------------------------------------------------------------------------- CPU profiles

SECTION_NAMES = ("forward", "loss", "backward", "optimizer_step")


@pytest.fixture(scope="module")
def real_profile(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, tuple[int, float]]]:
    """Profile a tiny model for 3 active steps; return the chrome trace written by
    tensorboard_trace_handler and (count, cpu_time_total µs) per name."""
    torch = pytest.importorskip("torch")
    tmp_path = tmp_path_factory.mktemp("profile")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    trace_dir = tmp_path / "tb"
    on_ready = torch.profiler.tensorboard_trace_handler(str(trace_dir))
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=on_ready,
    ) as prof:
        for _ in range(6):
            x = torch.randn(8, 16)
            with record_function("forward"):
                y = model(x)
            with record_function("loss"):
                loss = y.pow(2).mean()
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer_step"):
                opt.step()
                opt.zero_grad()
            prof.step()
    averages = {e.key: (e.count, e.cpu_time_total) for e in prof.key_averages()}
    (chrome,) = trace_dir.glob("*.pt.trace.json")
    return chrome, averages


def test_real_profile_matches_key_averages(real_profile: tuple) -> None:
    chrome, averages = real_profile
    summary = summarize_traces([chrome])
    assert summary["device"] == "cpu"
    # The trace stores µs with 3 decimals and we round ms to 6 decimals: both are 1 ns, so
    # totals may differ from key_averages' ns sums by about 1 ns per instance.
    for name in SECTION_NAMES:
        count, cpu_us = averages[name]
        section = summary["sections"][name]
        assert section["count"] == count == 3
        busy_us = section["host_busy_ms"]["total"] * 1000
        assert busy_us == pytest.approx(cpu_us, abs=0.001 * count + 0.001)
        assert section["kernel_ms"] is None
    step_count, step_us = averages["ProfilerStep*"]
    assert summary["steps"]["count"] == step_count == 3  # a full cycle: nothing left out
    assert summary["step_breakdown"]["basis"] == "sections"
    assert summary["steps"]["incomplete_left_out"] == 0
    assert summary["steps"]["ms"]["total"] * 1000 == pytest.approx(step_us, abs=0.004)


def test_real_profile_json_gz_zip_agree(real_profile: tuple, tmp_path: Path) -> None:
    chrome = real_profile[0]
    copy = tmp_path / chrome.name
    copy.write_bytes(chrome.read_bytes())
    want = without_paths(summarize_traces([copy]))
    assert want["events"] > 100 and want["sections"]
    for packed in (gzipped(copy), zipped(copy)):
        assert without_paths(summarize_traces([packed])) == want
