"""Kernels to launches to sections (accelpipe.traces.join), on hand-built traces whose
numbers are worked out by hand, and against brute force on random ones."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import numpy as np
import pytest

from accelpipe.traces import join, summarize_traces
from accelpipe.traces.collect import FileEvents
from tests.helpers.chrome_traces import (
    CPU,
    GPU,
    assert_close,
    filler,
    section,
    stats,
    step_stats,
    without_paths,
    write_trace,
)
from tests.helpers.chrome_traces import x_event as _x

WEIRD = 'odd {"} name }{ \\'  # braces, an escaped quote and a final escaped backslash
ANN, RT = "user_annotation", "cuda_runtime"


def cuda_events() -> list[dict]:
    """A two-step CUDA trace whose kernel attribution is worked out by hand below."""
    gpu_ann = "gpu_user_annotation"
    events = [
        _x(ANN, "ProfilerStep#5", 1000, 1000, CPU),
        _x(ANN, "ProfilerStep#6", 2000, 800, CPU),
        _x(ANN, "forward", 1100, 300, CPU),
        _x(ANN, "forward", 2100, 200, CPU),
        _x(ANN, "backward", 1500, 400, CPU),
        _x(ANN, "backward", 2400, 300, CPU),
        _x(ANN, WEIRD, 1120, 50, CPU),  # nested inside the first forward
        # GPU mirrors of the annotations: never sections.
        _x(gpu_ann, "forward", 1150, 400, GPU),
        _x(gpu_ann, "backward", 1600, 300, GPU),
        _x(gpu_ann, "ProfilerStep#5", 1150, 900, GPU),
        # Launches on the CPU thread, kernels on the GPU stream, joined by correlation.
        _x(RT, "cudaLaunchKernel", 1130, 4, CPU, correlation=1),
        _x("kernel", "void k1<{lambda()#1}>()", 1200, 10, GPU, correlation=1),
        _x(RT, "cudaLaunchKernel", 1300, 4, CPU, correlation=2),
        _x("kernel", "k2", 1220, 30, GPU, correlation=2),
        _x(RT, "cudaLaunchKernel", 1600, 4, CPU, correlation=3),
        _x("kernel", "k3", 1700, 50, GPU, correlation=3),
        _x("kernel", "k3b", 1790, 5, GPU, correlation=3),  # two kernels, one launch
        _x(RT, "cudaLaunchKernelExC", 1700, 4, CPU, correlation=4),
        _x("kernel", "k4", 1760, 20, GPU, correlation=4),
        _x(RT, "cudaLaunchKernel", 2100, 4, CPU, correlation=5),  # at the section start
        _x("kernel", "k5", 2200, 5, GPU, correlation=5),
        _x(RT, "cudaSomeFutureLaunch", 2450, 4, CPU, correlation=6),  # unknown name
        _x("kernel", "k6", 2500, 40, GPU, correlation=6),
        _x(RT, "cudaMemcpyAsync", 1310, 4, CPU, correlation=7),
        _x("gpu_memcpy", "Memcpy HtoD", 1250, 100, GPU, correlation=7),
        # Another thread of the same process: inside forward's window, so forward's.
        _x(RT, "cudaLaunchKernel", 1200, 4, {"pid": 100, "tid": 2}, correlation=8),
        _x("kernel", "k8 other thread", 1300, 1000, GPU, correlation=8),
        _x("kernel", "k9 no launch", 1400, 7, GPU, correlation=9),
        _x("cuda_driver", "cuLaunchKernel", 2420, 4, CPU, correlation=10),
        _x("kernel", "k10", 2600, 10, GPU, correlation=10),
        _x(RT, "cudaMemsetAsync", 2110, 4, CPU, correlation=12),
        _x("gpu_memset", "Memset", 2000, 3, GPU, correlation=12),
        # Another process: inside forward's window, but never forward's.
        _x(RT, "cudaLaunchKernel", 1150, 4, {"pid": 200, "tid": 1}, correlation=13),
        _x("kernel", "k13 other process", 1400, 2, GPU, correlation=13),
    ]
    return events + filler()


CUDA_SECTIONS = {
    "forward": section(
        2,
        [0.3, 0.2],
        kern=[1.040, 0.005],  # k1 + k2 + k8 (other thread) | k5 (memcpy not a kernel)
        span=[1.100, 0.005],  # 1200..2300 | 2200..2205
        # Kernels on any stream inside 1100..1400 (k1, k2, k8 from 1300) | 2100..2300 (k8).
        busy=[0.140, 0.200],
    ),
    "backward": section(
        2,
        [0.4, 0.3],
        kern=[0.075, 0.050],  # k3 + k3b + k4 | k6 + k10
        span=[0.095, 0.110],  # 1700..1795 | 2500..2610
        busy=[0.400, 0.050],  # all k8 | k6 + k10
    ),
    WEIRD: section(1, [0.05], kern=[0.010], span=[0.010]),  # k1; it runs after 1120..1170
}


@pytest.mark.parametrize("style", ["kineto", "compact", "indent", "wide"])
def test_cuda_trace_attributes_kernels_to_sections(tmp_path: Path, style: str) -> None:
    path = write_trace(tmp_path / "cuda.json", cuda_events(), style)
    summary = summarize_traces([path])
    assert_close(summary["sections"], CUDA_SECTIONS)
    assert_close(summary["steps"], step_stats([1.0, 0.8]))
    assert summary["device"] == "cuda"
    assert summary["format"] == "kineto"
    assert summary["events"] == len(cuda_events())
    assert summary["bytes"] == path.stat().st_size
    assert summary["traces"] == [str(path)]
    assert_close(
        summary["device_activity"],
        {
            "kernel": {"count": 11, "total_ms": 1.179},
            "gpu_memcpy": {"count": 1, "total_ms": 0.1},
            "gpu_memset": {"count": 1, "total_ms": 0.003},
            "kernels_without_launch": 1,
        },
    )
    json.dumps(summary, allow_nan=False)


def test_shuffled_events_give_the_same_summary(tmp_path: Path) -> None:
    events = cuda_events()
    base = summarize_traces([write_trace(tmp_path / "a.json", events)])
    for seed in range(3):
        shuffled = copy.deepcopy(events)
        random.Random(seed).shuffle(shuffled)
        again = summarize_traces([write_trace(tmp_path / f"s{seed}.json", shuffled, "compact")])
        assert without_paths(again) | {"bytes": 0} == without_paths(base) | {"bytes": 0}


def test_traces_are_joined_per_file_and_pooled(tmp_path: Path) -> None:
    """Correlation ids restart in every file; instances from all files are pooled."""
    a = write_trace(tmp_path / "a.json", cuda_events())
    b = write_trace(tmp_path / "b.json", cuda_events(), "compact")
    both = summarize_traces([a, b])
    assert both["traces"] == [str(a), str(b)]
    assert both["events"] == 2 * len(cuda_events())
    assert both["steps"]["count"] == 4
    forward = both["sections"]["forward"]
    assert forward["count"] == 4
    assert forward["kernel_ms"]["total"] == pytest.approx(2 * 1.045, abs=2e-6)
    assert forward["kernel_span_ms"]["max"] == pytest.approx(1.1, abs=2e-6)


# --------------------------------------------------------------------------- autograd thread

MAIN, AUTOGRAD = {"pid": 7, "tid": 1}, {"pid": 7, "tid": 2}
STREAM = {"pid": 0, "tid": 7}


def _autograd_events() -> list[dict]:
    """One step whose backward kernels are launched from the autograd worker thread, as
    PyTorch does on CUDA and ROCm; the record_functions are all on the main thread."""
    return [
        _x(ANN, "ProfilerStep#1", 0, 1000, MAIN),
        _x(ANN, "forward", 10, 290, MAIN),
        _x(ANN, "backward", 310, 490, MAIN),
        _x(ANN, "clip", 780, 20, MAIN),  # nested in backward
        _x(ANN, "optimizer_step", 810, 180, MAIN),
        _x(RT, "cudaLaunchKernel", 20, 4, MAIN, correlation=1),
        _x("kernel", "fwd", 100, 30, STREAM, correlation=1),
        _x(RT, "cudaLaunchKernel", 350, 4, AUTOGRAD, correlation=11),
        _x("kernel", "bwd_a", 400, 100, STREAM, correlation=11),
        _x(RT, "cudaLaunchKernel", 500, 4, AUTOGRAD, correlation=12),
        _x("kernel", "bwd_b", 520, 60, STREAM, correlation=12),
        _x("kernel", "bwd_b2", 600, 20, STREAM, correlation=12),
        _x(RT, "cudaLaunchKernel", 790, 4, AUTOGRAD, correlation=13),
        _x("kernel", "bwd_clip", 810, 15, STREAM, correlation=13),
        _x(RT, "cudaLaunchKernel", 805, 4, AUTOGRAD, correlation=14),  # between sections
        _x("kernel", "late", 830, 5, STREAM, correlation=14),
        _x(RT, "cudaLaunchKernel", 850, 4, MAIN, correlation=20),
        _x("kernel", "sgd", 900, 40, STREAM, correlation=20),
    ]


def test_backward_kernels_launched_from_the_autograd_thread_count(tmp_path: Path) -> None:
    summary = summarize_traces([write_trace(tmp_path / "bwd.json", _autograd_events())])
    assert_close(
        summary["sections"],
        {
            "backward": section(
                1,
                [0.49],
                kern=[0.195],  # 100 + (60 + 20) + 15, all launched from the autograd thread
                span=[0.425],  # 400 .. 825
                busy=[0.180],  # 400..500, 520..580, 600..620 inside 310..800
            ),
            "forward": section(1, [0.29], kern=[0.03], span=[0.03], busy=[0.03]),
            "optimizer_step": section(1, [0.18], kern=[0.04], span=[0.04], busy=[0.06]),
            "clip": section(1, [0.02], kern=[0.015], span=[0.015]),  # and backward's too
        },
    )
    assert summary["device_activity"]["kernel"]["count"] == 7


def test_a_launch_counts_once_per_section_name(tmp_path: Path) -> None:
    """backward open on both threads at once: each launch goes to the innermost instance
    (the one that started last), so the name's total is each kernel once."""
    events = [*_autograd_events(), _x(ANN, "backward", 340, 220, AUTOGRAD)]
    summary = summarize_traces([write_trace(tmp_path / "twice.json", events)])
    backward = summary["sections"]["backward"]
    assert backward["count"] == 2
    # main instance: the launch at 790 (15); autograd instance 340..560: 350 and 500 (180).
    assert_close(backward["kernel_ms"], stats([0.015, 0.180]))
    assert_close(backward["kernel_span_ms"], stats([0.015, 0.220]))  # 810..825 | 400..620


def test_recursive_sections_do_not_double_count(tmp_path: Path) -> None:
    """A name nested in itself on one thread (the alexnet trace has this)."""
    events = [
        _x(ANN, "block", 0, 100, MAIN),
        _x(ANN, "block", 10, 50, MAIN),
        _x(ANN, "block", 20, 10, MAIN),
        _x(RT, "cudaLaunchKernel", 5, 1, MAIN, correlation=1),  # outer only
        _x(RT, "cudaLaunchKernel", 25, 1, MAIN, correlation=2),  # innermost
        _x(RT, "cudaLaunchKernel", 40, 1, MAIN, correlation=3),  # middle
        _x(RT, "cudaLaunchKernel", 60, 1, MAIN, correlation=4),  # middle's end: middle
        *(_x("kernel", f"k{c}", 200 + c, c, STREAM, correlation=c) for c in (1, 2, 3, 4)),
    ]
    summary = summarize_traces([write_trace(tmp_path / "rec.json", events)])
    block = summary["sections"]["block"]
    assert_close(block["kernel_ms"], stats([0.001, 0.007, 0.002]))
    assert block["kernel_ms"]["total"] == pytest.approx(0.010, abs=2e-6)  # 1 + 2 + 3 + 4 µs


# --------------------------------------------------------------------------- brute force


def _brute(pid, name, start, end, l_pid, l_ts, k_sum, k_first, k_last):
    """Per instance: the launches of its process inside [start, end] whose innermost
    same-name instance (latest start, then earliest end) it is."""
    n = len(start)
    kern, first, last = [0.0] * n, [np.inf] * n, [-np.inf] * n
    for j in range(len(l_ts)):
        for nm in set(name):
            inside = [
                i
                for i in range(n)
                if name[i] == nm and pid[i] == l_pid[j] and start[i] <= l_ts[j] <= end[i]
            ]
            if inside:
                i = max(inside, key=lambda i: (start[i], -end[i]))
                kern[i] += k_sum[j]
                first[i] = min(first[i], k_first[j])
                last[i] = max(last[i], k_last[j])
    return kern, first, last


@pytest.mark.parametrize("seed", range(40))
def test_attribution_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n, m = rng.randint(1, 25), rng.randint(0, 60)
    grid = rng.choice([1.0, 10.0])  # a coarse grid makes shared edges and ties common
    pid = [rng.choice([0, 1]) for _ in range(n)]
    name = [rng.choice([0, 1, 2]) for _ in range(n)]
    start = [rng.randint(0, 20) * grid for _ in range(n)]
    end = [s + rng.randint(0, 8) * grid for s in start]
    l_pid = sorted(rng.choice([0, 1]) for _ in range(m))
    l_ts = [rng.randint(0, 30) * grid for _ in range(m)]
    order = sorted(range(m), key=lambda j: (l_pid[j], l_ts[j]))
    l_pid, l_ts = [l_pid[j] for j in order], [l_ts[j] for j in order]
    k_sum = [rng.uniform(0, 5) for _ in range(m)]
    k_first = [t + rng.uniform(0, 50) for t in l_ts]
    k_last = [f + rng.uniform(0, 20) for f in k_first]
    launches = join._Launches(*(np.array(v) for v in (l_pid, l_ts, k_sum, k_first, k_last)))
    got = join.attribute(*(np.array(v) for v in (pid, name, start, end)), launches)
    want = _brute(pid, name, start, end, l_pid, l_ts, k_sum, k_first, k_last)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-9)


def test_device_busy_matches_a_brute_force_union() -> None:
    rng = random.Random(3)
    fe = FileEvents()
    intervals = []
    for _ in range(300):
        ts, dur = rng.uniform(0, 1000), rng.choice([0.0, rng.uniform(0, 30)])
        fe.kern_ts.append(ts)
        fe.kern_dur.append(dur)
        intervals.append((ts, ts + dur))
    windows = [(a, a + rng.uniform(0, 200)) for a in (rng.uniform(-50, 1050) for _ in range(200))]
    windows += [(0.0, 0.0), (-10.0, 2000.0), (intervals[0][0], intervals[0][0])]
    got = join.busy_within(fe, *(np.array(c) for c in zip(*windows, strict=True)))
    for (lo, hi), value in zip(windows, got, strict=True):
        clipped = sorted((max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo))
        total, reach = 0.0, -np.inf
        for s, e in clipped:
            total += max(0.0, e - max(s, reach))
            reach = max(reach, e)
        assert value == pytest.approx(total, abs=1e-9)
