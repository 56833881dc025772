"""Throughput and memory of the streaming trace summarizer on a generated kineto-style trace.

Writes a ~``--size-mb`` MiB pretty-printed chrome trace to a temporary directory, then
``--repeats`` times reads it in 1 MiB chunks as the I/O floor and runs ``summarize_traces``
in a child process, so that its peak RSS is its own; figures are the runs' medians (peak RSS
their largest). ``--style gpu`` (the default): mostly ``cpu_op`` events with
args, ProfilerStep/section annotations and their GPU mirrors, CUDA launches (half of them
from the autograd thread, as PyTorch launches backward work), kernels and flow events.
``--style cpu``: what a CPU-only profile holds, the same without the device events. Prints
one JSON object on stdout; progress goes to stderr. MB here means MiB (2**20 bytes).

    .venv/bin/python benchmarks/bench_trace_summary.py --size-mb 1024  # the child finds workflow/
    .venv/bin/python benchmarks/bench_trace_summary.py --size-mb 1024 --style cpu
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import smoke  # the sibling module (sys.path[0] when run as a script)

MIB = 2**20
REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("forward", "loss", "backward", "optimizer_step")
CPU_OPS_PER_SECTION = 100
LAUNCHES_PER_SECTION = 15
PID, TID, GPU_PID, STREAM = 4242, 4242, 0, 7
AUTOGRAD_TID = 4250  # PyTorch's autograd worker thread: where backward launches come from

CPU_OP = """  {
    "ph": "X",
    "cat": "cpu_op",
    "name": "%s",
    "pid": %d,
    "tid": %d,
    "ts": %.3f,
    "dur": %.3f
    ,
    "args": {
      "External id": %d,"Record function id": 0, "Concrete Inputs": ["", "", "1"], \
"Input type": ["float", "float", "Scalar"], "Input Strides": [[512, 1], [512, 1], []], \
"Input Dims": [[64, 512], [64, 512], []], "Ev Idx": %d
    }
  }"""
ANNOTATION = """  {
    "ph": "X",
    "cat": "%s",
    "name": "%s",
    "pid": %s,
    "tid": %d,
    "ts": %.3f,
    "dur": %.3f
    ,
    "args": {
      "External id": %d,"Record function id": 0, "Ev Idx": %d
    }
  }"""
LAUNCH = """  {
    "ph": "X",
    "cat": "cuda_runtime",
    "name": "cudaLaunchKernel",
    "pid": %d,
    "tid": %d,
    "ts": %.3f,
    "dur": %.3f
    ,
    "args": {
      "External id": %d,
      "cbid": 211, "correlation": %d
    }
  }"""
KERNEL = """  {
    "ph": "X",
    "cat": "kernel",
    "name": "%s",
    "pid": %d,
    "tid": %d,
    "ts": %.3f,
    "dur": %.3f
    ,
    "args": {
      "External id": %d,
      "queued": 0, "device": 0, "context": 1,
      "stream": %d, "correlation": %d,
      "registers per thread": 32,
      "shared memory": 0,
      "blocks per SM": 0.5,
      "warps per SM": 2.0,
      "grid": [128, 1, 1],
      "block": [128, 1, 1],
      "est. achieved occupancy %%": 25
    }
  }"""
FLOW = """  {
    "ph": "%s", "id": %d, "pid": %d, "tid": %d, "ts": %.3f,
    "cat": "ac2g", "name": "ac2g"%s
  }"""
OP_NAMES = ("aten::add_", "aten::mul", "aten::addmm", "aten::empty", "aten::copy_", "aten::relu")
KERNEL_NAMES = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<"
    "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() "
    "const::{lambda(float)#1}>(at::TensorIteratorBase&, {lambda(float)#1} const&)::"
    "{lambda(int)#1}>(int, {lambda(int)#1})",
    "ampere_sgemm_128x64_tn",
)


class _Gen:
    """Emits one ProfilerStep worth of events at a time, with consistent ids and times."""

    def __init__(self, gpu: bool = True) -> None:
        self.gpu = gpu
        self.ts = 1_000_000.0
        self.ext = 0
        self.corr = 0
        self.events = 0

    def _id(self) -> int:
        self.ext += 1
        return self.ext

    def step(self, n: int) -> str:
        cpu: list[str] = []
        gpu: list[str] = []
        start = self.ts
        for name in SECTIONS:
            self._section(name, cpu, gpu)
        cpu.insert(0, self._annotation("user_annotation", f"ProfilerStep#{n}", start))
        self.ts += 5.0
        self.events += len(cpu) + len(gpu)
        return ",\n".join(cpu + gpu)

    def _annotation(self, cat: str, name: str, start: float, pid: int = PID) -> str:
        i = self._id()
        return ANNOTATION % (cat, name, pid, TID, start, self.ts - start, i, i)

    def _section(self, name: str, cpu: list[str], gpu: list[str]) -> None:
        start = self.ts
        first = len(cpu)
        every = CPU_OPS_PER_SECTION // LAUNCHES_PER_SECTION
        for k in range(CPU_OPS_PER_SECTION):
            i = self._id()
            op = OP_NAMES[k % len(OP_NAMES)]
            cpu.append(CPU_OP % (op, PID, TID, self.ts, 9.5, i, i))
            if self.gpu and k % every == 0 and k // every < LAUNCHES_PER_SECTION:
                tid = AUTOGRAD_TID if name == "backward" else TID
                self._launch(i, tid, cpu, gpu)
            self.ts += 10.0
        cpu.insert(first, self._annotation("user_annotation", name, start))
        if self.gpu:
            gpu.append(self._annotation("gpu_user_annotation", name, start + 20.0, GPU_PID))

    def _launch(self, ext: int, tid: int, cpu: list[str], gpu: list[str]) -> None:
        self.corr += 1
        at = self.ts + 2.0
        cpu.append(LAUNCH % (PID, tid, at, 4.0, ext, self.corr))
        kname = KERNEL_NAMES[self.corr % len(KERNEL_NAMES)]
        gpu.append(KERNEL % (kname, GPU_PID, STREAM, at + 15.0, 3.5, ext, STREAM, self.corr))
        gpu.append(FLOW % ("s", self.corr, PID, tid, at, ""))
        gpu.append(FLOW % ("f", self.corr, GPU_PID, STREAM, at + 15.0, ', "bp": "e"'))


def generate(path: Path, size_mb: float, gpu: bool = True) -> tuple[int, int, int]:
    """Write the trace; returns (bytes, events, steps)."""
    gen = _Gen(gpu)
    target = int(size_mb * MIB)
    written = steps = 0
    with open(path, "w") as f:
        head = (
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],\n'
        )
        head += '  "traceEvents": [\n'
        written += f.write(head)
        sep = ""
        while written < target:
            steps += 1
            written += f.write(sep + gen.step(steps))
            sep = ",\n"
        written += f.write('\n  ],\n  "traceName": "bench.json"\n}\n')
    return written, gen.events, steps


def io_floor(path: Path) -> float:
    """Seconds to read the file in 1 MiB chunks and discard them."""
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(MIB):
            pass
    return time.perf_counter() - start


CHILD = """
import json, sys, time
from accelpipe.traces import summarize_traces
t, c = time.perf_counter(), time.process_time()
s = summarize_traces([sys.argv[1]])
dt, dc = time.perf_counter() - t, time.process_time() - c
steps = s["steps"]["count"] if s["steps"] else 0
kernel_ms = {k: (v["kernel_ms"] or {}).get("total", 0.0) for k, v in s["sections"].items()}
print(json.dumps({"seconds": dt, "cpu_seconds": dc, "events": s["events"], "steps": steps,
                  "sections": {k: v["count"] for k, v in s["sections"].items()},
                  "kernel_ms": kernel_ms, "device": s["device"]}))
"""


def run_child(path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO / "workflow"))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], env=env, capture_output=True, text=True
    )
    if proc.returncode:
        sys.exit(f"summarizer failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1024.0, help="trace size in MiB")
    ap.add_argument("--tmpdir", default=None, help="where to write the temporary trace")
    ap.add_argument("--style", choices=("gpu", "cpu"), default="gpu", help="what the trace holds")
    ap.add_argument(
        "--repeats", type=int, default=3, help="median of N runs, each in a fresh process"
    )
    args = smoke.parse_args(ap, argv, size_mb=1.0, repeats=1)
    gpu = args.style == "gpu"
    with tempfile.TemporaryDirectory(prefix="bench_trace_", dir=args.tmpdir) as tmp:
        path = Path(tmp) / "bench.pt.trace.json"
        t0 = time.perf_counter()
        nbytes, events, steps = generate(path, args.size_mb, gpu)
        print(
            f"generated {nbytes / MIB:.0f} MiB, {events} events in {time.perf_counter() - t0:.1f}s",
            file=sys.stderr,
        )
        floors, children = [], []
        for _ in range(args.repeats):
            floors.append(io_floor(path))
            children.append(run_child(path))
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest child
    for child in children:
        _check(child, events, steps, gpu)
    size_mb = nbytes / MIB
    runs = [size_mb / child["seconds"] for child in children]
    mb_per_s = statistics.median(runs)
    baseline = size_mb / statistics.median(floors)
    print(
        json.dumps(
            {
                "bench": "trace_summary",
                "smoke": args.smoke,
                "style": args.style,
                "size_mb": round(size_mb, 1),
                "seconds": round(size_mb / mb_per_s, 3),
                "mb_per_s": round(mb_per_s, 1),
                "mb_per_s_runs": [round(r, 1) for r in runs],
                "peak_rss_mb": round(peak_kib / 1024, 1),
                "baseline_mb_per_s": round(baseline, 1),
                "ratio_to_baseline": round(mb_per_s / baseline, 4),
                # less sensitive to a busy machine
                "cpu_seconds": round(statistics.median(c["cpu_seconds"] for c in children), 3),
                "events": events,
            }
        )
    )


def _check(child: dict, events: int, steps: int, gpu: bool) -> None:
    """Exit unless the child's summary has every event, step, section and kernel."""
    want = len(SECTIONS) * steps
    got = sum(child["sections"].values())
    if child["events"] != events or child["steps"] != steps or got != want:
        sys.exit(f"wrong summary: {child} (expected {events} events, {steps} steps)")
    # Every section launches LAUNCHES_PER_SECTION kernels of 3.5 µs per step (backward's
    # from the autograd thread): all of them must be attributed.
    want_ms = steps * LAUNCHES_PER_SECTION * 3.5 / 1000 if gpu else 0.0
    wrong = {k: v for k, v in child["kernel_ms"].items() if abs(v - want_ms) > 1e-6 * steps}
    if wrong or child["device"] != ("cuda" if gpu else "cpu"):
        sys.exit(f"wrong kernel attribution: {wrong} (expected {want_ms} ms each)")


if __name__ == "__main__":
    main()
