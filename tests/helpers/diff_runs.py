"""Published run folders for the diff tests (tests/accelpipe/results/test_diff.py), made the way
a run is: a kineto trace of a training loop (accelpipe's sections, kernels launched from
them) summarized by the real summarizer, a train_log.csv whose figures performance.steps
computes, and the provenance the diff reads its warm-up from.

`made_run(..., slow={"backward": ms})` is the test-only hook of an injected slowdown: that
section of every step runs `ms` longer (a sleep inside it), so the step, the enclosing
`step` section and the logged step time grow by as much and nothing else changes.
"""

from __future__ import annotations

import json
from pathlib import Path

from accelpipe.performance.steps import step_statistics
from accelpipe.traces import summarize_traces
from tests.helpers.chrome_traces import CPU, write_trace, x_event
from tests.helpers.train_logs import write_train_log

STEPS = 12  # profiled steps and measured steps alike
BATCH = 8
WARMUP = 1
# section -> its host ms in a step, and the kernel it launches (name, device ms) if any
LOOP = {
    "loader_next": (3.0, None),
    "forward": (6.0, ("gemm_forward", 4.0)),
    "loss": (1.0, ("reduce_loss", 0.5)),
    "backward": (9.0, ("gemm_backward", 7.0)),
    "optimizer_step": (2.0, ("adam_update", 1.0)),
}
INSIDE_STEP = ("forward", "loss", "backward", "optimizer_step")
GAP_US = 500.0  # unannotated host time at the end of each step


def jitter(step: int, phase: int) -> float:
    """A deterministic factor in [0.9, 1.1]: step-to-step noise, the same for every run made
    with the same `phase` (a run of the same config: another phase)."""
    return 0.9 + 0.2 * (((step * 7 + phase * 5) % 11) / 10)


def _stream(corr: int, name: str, ts: float, dur: float) -> list[dict]:
    """A launch on the host and its kernel on stream 7, 2 µs after the launch."""
    device = {"pid": 0, "tid": 7}
    return [
        x_event("cuda_runtime", "cudaLaunchKernel", ts, 4, CPU, correlation=corr),
        x_event("kernel", name, ts + 2, dur, device, correlation=corr, stream=7, device=0),
    ]


def trace_events(phase: int, slow: dict[str, float]) -> tuple[list[dict], list[float]]:
    """The loop's events over STEPS steps, and each step's ms."""
    events: list[dict] = []
    step_ms = []
    ts = 1000.0
    for step in range(STEPS):
        start, corr = ts, step * 10
        spans = {}
        for k, (name, (ms, kernel)) in enumerate(LOOP.items()):
            us = ms * 1e3 * jitter(step, phase + k) + slow.get(name, 0.0) * 1e3
            spans[name] = (ts, us)
            if kernel:
                kernel_us = kernel[1] * 1e3 * jitter(step, phase + k + 3)
                events += _stream(corr + k, kernel[0], ts + 10, min(kernel_us, us - 20))
            events.append(x_event("user_annotation", name, ts, us, CPU))
            ts += us
        first = spans[INSIDE_STEP[0]][0]
        events.append(x_event("user_annotation", "step", first, ts - first, CPU))
        ts += GAP_US
        events.append(
            x_event("user_annotation", f"ProfilerStep#{step + 1}", start, ts - start, CPU)
        )
        step_ms.append((ts - start) / 1e3)
        ts += 1.0
    return events, step_ms


def made_run(
    folder: Path, phase: int = 0, slow: dict[str, float] | None = None, order: int = 1
) -> Path:
    """A published run folder at `folder`: trace_summary.json of the made trace,
    train_log.csv (a warm-up step, then the trace's steps as measured steps, taken in
    `order`: -1 logs them in reverse), performance.json's step figures and provenance.json."""
    folder.mkdir(parents=True, exist_ok=True)
    events, step_ms = trace_events(phase, slow or {})
    trace = write_trace(folder / "trace.json", events)
    summary = summarize_traces(trace)
    trace.unlink()
    (folder / "trace_summary.json").write_text(json.dumps(summary))
    steps = [(BATCH / ms * 1e3, 0.5, ms, "0") for ms in step_ms[::order]]
    log = write_train_log(folder / "train_log.csv", [(1.0, 0.5, 2000.0, "0"), *steps])
    stats = step_statistics(log, WARMUP)
    performance = {
        "backend": "cuda",
        "device": "A made GPU",
        "precision": "bf16",
        "world_size": 1,
        "global_batch": BATCH,
        "throughput": stats["throughput"],
        "per_step": stats["per_step"],
    }
    (folder / "performance.json").write_text(json.dumps(performance))
    provenance = {"config": {"performance": {"warmup_steps": WARMUP}}}
    (folder / "provenance.json").write_text(json.dumps(provenance))
    return folder
