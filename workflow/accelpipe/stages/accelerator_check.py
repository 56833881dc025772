"""`accelpipe accelerator-check`: what a person runs first on a new accelerator node.

In one go, each part bounded in time and the whole inside a budget: the doctor, the device
tests, the tiny runs of the PyTorch workloads in fp32 and bf16 (their real profiler traces
through summarize-trace, their FLOPs, MFU, fraction of the measured matmul ceiling and
energy, as performance.json defines them), and a benchmark row per workload. It writes
accelerator-check.json and accelerator-check.md into --out; a part the budget or the node
cannot run says so instead of passing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from accelpipe.config.schema import validate
from accelpipe.core.errors import AccelpipeError, ConfigError
from accelpipe.core.io import read_json, write_json, write_text

log = logging.getLogger("accelpipe")

TINY_CONFIG = Path(".test") / "config.yaml"  # in the checkout (--workflow)
KILL_GRACE_S = 10.0  # a part past its limit gets SIGTERM, then SIGKILL this much later
REPORT_RESERVE_S = 5.0  # kept for the report after the last part
MIN_PART_S = 5.0  # a part with less time than this left is skipped, not started
# Each part's share of the budget (time a part leaves unused goes to the next).
WEIGHTS = {"doctor": 1.0, "tests": 2.0, "tiny": 3.0, "benchmark": 1.5}
VERDICTS = ("pass", "fail", "timeout", "skipped")


class AcceleratorCheckFailed(AccelpipeError):
    """A part of the check failed; the report names it."""


@dataclass
class Part:
    """One check's outcome: its verdict, why, its figures, and the time it took."""

    name: str
    verdict: str
    detail: str
    seconds: float = 0.0
    limit_s: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Bounded:
    """A command run with a wall-time limit: its exit status (None: killed at the limit)."""

    returncode: int | None
    seconds: float


def run_bounded(command: list[str], limit_s: float, log_file: Path, cwd: Path) -> Bounded:
    """`command` in its own process group, killed whole (Snakemake's jobs, pytest's
    children) once it runs past `limit_s`; its output to `log_file`."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_file, "w") as out:
        proc = subprocess.Popen(
            command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return Bounded(proc.wait(timeout=limit_s), time.monotonic() - start)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Bounded(None, time.monotonic() - start)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group (Snakemake stops its jobs), then SIGKILL to whatever is left of
    it once the leader exits or the grace ends: nothing of a part outlives its limit."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=KILL_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


class Budget:
    """Deadlines for the parts: part i may run until its cumulative share of the budget,
    and never past the budget less the report's reserve."""

    def __init__(self, budget_s: float, weights: list[float]) -> None:
        self.start = time.monotonic()
        self.budget_s = budget_s
        total = sum(weights)
        running, self.deadlines = 0.0, []
        for weight in weights:
            running += weight
            self.deadlines.append(budget_s * running / total)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def limit(self, index: int) -> float:
        """Seconds part `index` may run from now (grace for killing it included)."""
        last = self.budget_s - REPORT_RESERVE_S - KILL_GRACE_S
        return min(self.deadlines[index], last) - self.elapsed()


def python_command(*argv: str) -> list[str]:
    """A Python module as a command in this interpreter (its venv's accelpipe and tools)."""
    return [sys.executable, "-m", *argv]


def check_doctor(args: argparse.Namespace, limit_s: float) -> Part:
    doctor_json = Path(args.out) / "doctor.json"
    precision = "auto" if args.backend == "cpu" else "bf16"
    command = python_command(
        *("accelpipe", "doctor", "--backend", args.backend, "--precision", precision),
        *("--json", str(doctor_json)),
    )
    ran = run_bounded(command, limit_s, Path(args.out) / "logs" / "doctor.log", Path.cwd())
    figures = {}
    if doctor_json.exists():
        report = read_json(doctor_json)
        figures = {"host": report["host"], **report["system"]}
        figures["problems"] = [f"{c['name']}: {c['found']}" for c in report["problems"]]
    return _outcome("doctor", ran, limit_s, figures, "every check ok or not needed")


def _outcome(name: str, ran: Bounded, limit_s: float, figures: dict[str, Any], ok: str) -> Part:
    """The part's verdict from its command's exit: killed at the limit, failed, or passed."""
    if ran.returncode is None:
        verdict, detail = "timeout", f"stopped at its limit of {limit_s:.0f} s"
    elif ran.returncode != 0:
        verdict, detail = "fail", f"exit status {ran.returncode}: logs/{name}.log"
    else:
        verdict, detail = "pass", ok
    return Part(name, verdict, detail, round(ran.seconds, 1), round(limit_s, 1), figures)


def device_test_files(workflow: Path, paths: list[str]) -> list[str]:
    """The device tests here: test files under `paths`, without the TensorFlow ones where
    TensorFlow does not import (an accelerator node for PyTorch has none)."""
    has_tf = importlib.util.find_spec("tensorflow") is not None
    files = []
    for path in (workflow / p for p in paths if (workflow / p).exists()):
        for test in sorted(path.rglob("test_*.py")) if path.is_dir() else [path]:
            if has_tf or "pytestmark = pytest.mark.tensorflow" not in test.read_text():
                files.append(str(test))
    return files


def check_tests(args: argparse.Namespace, limit_s: float) -> Part:
    files = device_test_files(Path(args.workflow), args.tests)
    if not files:
        return Part("tests", "skipped", f"no test files under {', '.join(args.tests)} here")
    if importlib.util.find_spec("pytest") is None:
        return Part("tests", "skipped", "pytest is not installed in this environment")
    junit = Path(args.out) / "tests.xml"
    command = python_command("pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(junit))
    tests_log = Path(args.out) / "logs" / "tests.log"
    ran = run_bounded(command + files, limit_s, tests_log, Path(args.workflow))
    figures: dict[str, Any] = {"files": len(files)}
    if junit.exists() and ran.returncode is not None:
        root = ET.parse(junit).getroot()
        suite = root.find("testsuite") if root.tag == "testsuites" else root
        if suite is not None:
            keys = ("tests", "failures", "errors", "skipped")
            figures |= {k: int(suite.get(k, 0)) for k in keys}
    return _outcome("tests", ran, limit_s, figures, "every selected test passed or skipped")


def check_config(args: argparse.Namespace) -> dict[str, Any]:
    """The tiny config on the backend, with an fp32 and a bf16 run per workload and one
    benchmark row (bf16, at the reference batch size on an accelerator). Every run on one
    device: the tiny config's two-device runs would make the preflight refuse a one-GPU node
    (it checks the biggest run a config holds)."""
    config = yaml.safe_load((Path(args.workflow) / TINY_CONFIG).read_text())
    config["backend"] = args.backend
    for workload in args.workloads:
        block = config.setdefault(workload, {})
        block["runs"] = block.get("runs", {}) | {p: {"precision": p} for p in args.precisions}
        block["benchmark"] = {
            "warmup_steps": args.benchmark_warmup,
            "steps": args.benchmark_steps,
            "batch_sizes": [benchmark_batch(args.backend, workload, config)],
            "precisions": ["bf16"],
        }
    for block in config.values():  # every workload's: the preflight checks them all
        if isinstance(block, dict) and isinstance(block.get("runs"), dict):
            block["runs"] = {name: {**run, "devices": 1} for name, run in block["runs"].items()}
    if "resnet50" in args.workloads:
        hold_a_full_batch(config)
    return config


def hold_a_full_batch(config: dict[str, Any]) -> None:
    """Enough synthetic training images for one full batch of the benchmark row: resnet50
    drops the last partial batch, and a training set smaller than one batch gives none (its
    loop waits for a batch that never comes). The tiny runs still train 3 steps an epoch."""
    batch = config["resnet50"]["benchmark"]["batch_sizes"][0]
    imagenet = config.setdefault("datasets", {}).setdefault("imagenet", {})
    synthetic = imagenet.setdefault("synthetic", {})
    default = validate({})["datasets"]["imagenet"]["synthetic"]
    classes = synthetic.get("classes", default["classes"])
    per_class = synthetic.get("train_per_class", default["train_per_class"])
    synthetic["train_per_class"] = max(per_class, -(-batch // classes))  # ceil


def benchmark_batch(backend: str, workload: str, config: dict[str, Any]) -> int:
    """The reference recipe's batch size (the schema's default) on an accelerator; on the
    CPU the tiny config's, which two cores train in seconds."""
    reference = int(validate({})[workload]["train"]["batch_size"])
    if backend == "cpu":  # a key the tiny config leaves out is the schema's
        return int(config[workload]["train"].get("batch_size", reference))
    return reference


def run_target(workload: str, run: str) -> str:
    """results/<workload>/<run>: unet2d's named runs are cross-validated (fold 0)."""
    return (
        f"results/{workload}/{run}/fold0" if workload == "unet2d" else f"results/{workload}/{run}"
    )


def snakemake(args: argparse.Namespace, name: str, targets: list[str], limit_s: float) -> Bounded:
    work = Path(args.out) / "work"
    command = python_command(
        *("snakemake", "-s", str(Path(args.workflow) / "Snakefile"), "-d", str(work)),
        *("--configfile", str(work / "check-config.yaml"), "--cores", str(args.cores)),
        *("--nolock", "--rerun-incomplete", "--keep-going", *targets),
    )
    return run_bounded(command, limit_s, Path(args.out) / "logs" / f"{name}.log", Path.cwd())


def check_tiny(args: argparse.Namespace, workload: str, limit_s: float) -> Part:
    name = f"tiny-{workload}"
    targets = [run_target(workload, p) for p in args.precisions]
    ran = snakemake(args, name, targets, limit_s)
    work = Path(args.out) / "work"
    figures = {p: run_figures(work / t) for p, t in zip(args.precisions, targets, strict=True)}
    return _outcome(name, ran, limit_s, figures, "both runs published")


def run_figures(result: Path) -> dict[str, Any] | None:
    """A published run's figures as performance.json and trace_summary.json give them."""
    if not (result / "performance.json").exists():
        return None
    perf = read_json(result / "performance.json")
    compute, energy = perf["compute"], perf["energy"]
    figures = {
        "device": perf["device"],
        "samples_per_s": perf["throughput"]["samples_per_s"],
        "flops_per_sample": compute["flops_per_sample"],
        "mfu": compute["mfu"],
        "peak_note": compute.get("peak_note"),
        "gemm_tflops_per_device": compute["gemm_tflops_per_device"],
        "gemm_fraction": compute["gemm_fraction"],
        "joules_per_1000_samples": energy["joules_per_1000_samples"],
        "energy_not_measured": energy["not_measured"],
    }
    if (result / "trace_summary.json").exists():
        trace = read_json(result / "trace_summary.json")
        figures["trace"] = {
            "device": trace["device"],
            "steps": trace["steps"]["count"],
            "kernels": trace["device_activity"]["kernel"]["count"],
            "kernel_ms": trace["device_activity"]["kernel"]["total_ms"],
        }
    return figures


def check_benchmark(args: argparse.Namespace, workload: str, limit_s: float) -> Part:
    name = f"benchmark-{workload}"
    ran = snakemake(args, name, [f"results/{workload}/benchmark"], limit_s)
    table = Path(args.out) / "work" / "results" / workload / "benchmark" / "benchmark.json"
    figures = read_json(table)["rows"][0] if table.exists() else {}
    return _outcome(name, ran, limit_s, figures, "the row measured")


def derived_parts(parts: list[Part], backend: str) -> list[Part]:
    """The trace, compute and energy checks, on the tiny runs' published figures."""
    runs = [
        (part.name.removeprefix("tiny-"), precision, figures)
        for part in parts
        if part.name.startswith("tiny-")
        for precision, figures in part.figures.items()
        if figures
    ]
    if not runs:
        return [
            Part(name, "skipped", "no tiny run finished") for name in ("trace", "compute", "energy")
        ]
    derived = [trace_part(runs, backend), compute_part(runs, backend), energy_part(runs)]
    unfinished = [
        f"{part.name.removeprefix('tiny-')}/{precision}"
        for part in parts
        if part.name.startswith("tiny-")
        for precision, figures in part.figures.items()
        if not figures
    ]
    if unfinished:  # a pass covers the runs that finished, and says which did not
        for part in derived:
            part.detail += f"; not checked (run unfinished): {', '.join(unfinished)}"
    return derived


RunFigures = list[tuple[str, str, dict[str, Any]]]


def trace_part(runs: RunFigures, backend: str) -> Part:
    traces = {f"{w}/{p}": f.get("trace") for w, p, f in runs}
    missing = [run for run, trace in traces.items() if not trace or not trace["steps"]]
    no_kernels = [run for run, t in traces.items() if t and backend != "cpu" and not t["kernels"]]
    if missing or no_kernels:
        detail = "; ".join(
            [f"no profiled steps: {', '.join(missing)}"] * bool(missing)
            + [f"no device kernels: {', '.join(no_kernels)}"] * bool(no_kernels)
        )
        return Part("trace", "fail", detail, figures=traces)
    kernels = "a CPU trace has no device kernels" if backend == "cpu" else "device kernels seen"
    return Part("trace", "pass", f"every run's trace summarized; {kernels}", figures=traces)


def compute_part(runs: RunFigures, backend: str) -> Part:
    keys = ("flops_per_sample", "mfu", "gemm_fraction", "peak_note")
    figures = {f"{w}/{p}": {k: f[k] for k in keys} for w, p, f in runs}
    # the CPU has no published peak: no MFU there, by performance.json's definition
    needed = ("flops_per_sample", "gemm_fraction") + (("mfu",) if backend != "cpu" else ())
    missing = [f"{run} {k}" for run, f in figures.items() for k in needed if f[k] is None]
    if missing:
        return Part("compute", "fail", f"not measured: {', '.join(missing)}", figures=figures)
    return Part("compute", "pass", "FLOPs and matmul-ceiling fraction per run", figures=figures)


def energy_part(runs: RunFigures) -> Part:
    figures = {f"{w}/{p}": f["joules_per_1000_samples"] for w, p, f in runs}
    if all(value is None for value in figures.values()):
        reason = runs[0][2]["energy_not_measured"]
        return Part("energy", "skipped", f"no meter reads here: {reason}", figures=figures)
    unread = [
        f"{w}/{p} ({f['energy_not_measured']})" for w, p, f in runs if f["energy_not_measured"]
    ]
    detail = "joules per 1,000 samples measured" + (
        f"; not in {'; '.join(unread)}" if unread else ""
    )
    return Part("energy", "pass", detail, figures=figures)


def plan(args: argparse.Namespace) -> list[tuple[str, float]]:
    """(part name, weight) in the order the parts run."""
    return (
        [("doctor", WEIGHTS["doctor"]), ("tests", WEIGHTS["tests"])]
        + [(f"tiny-{w}", WEIGHTS["tiny"]) for w in args.workloads]
        + [(f"benchmark-{w}", WEIGHTS["benchmark"]) for w in args.workloads]
    )


def run_part(args: argparse.Namespace, name: str, limit_s: float) -> Part:
    if limit_s < MIN_PART_S:
        return Part(name, "skipped", f"no time left in the {args.budget_s:.0f} s budget")
    if name == "doctor":
        return check_doctor(args, limit_s)
    if name == "tests":
        return check_tests(args, limit_s)
    kind, workload = name.split("-", 1)
    if kind == "tiny":
        return check_tiny(args, workload, limit_s)
    return check_benchmark(args, workload, limit_s)


def check_arguments(args: argparse.Namespace) -> None:
    for needed in ("Snakefile", TINY_CONFIG):
        if not (Path(args.workflow) / needed).is_file():
            raise ConfigError(f"--workflow {args.workflow}: no {needed} (the accelpipe checkout)")
    if args.budget_s <= REPORT_RESERVE_S + KILL_GRACE_S + MIN_PART_S:
        raise ConfigError(f"--budget-s {args.budget_s}: too short to run any part")


def run_accelerator_check(args: argparse.Namespace) -> None:
    check_arguments(args)
    args.out = str(Path(args.out).resolve())  # the parts run in other folders
    args.workflow = str(Path(args.workflow).resolve())
    out = Path(args.out)
    (out / "work").mkdir(parents=True, exist_ok=True)
    write_text(out / "work" / "check-config.yaml", yaml.safe_dump(check_config(args)))
    steps = plan(args)
    budget = Budget(args.budget_s, [weight for _, weight in steps])
    parts = []
    for index, (name, _) in enumerate(steps):
        part = run_part(args, name, budget.limit(index))
        log.info("accelerator-check %s: %s (%s)", part.name, part.verdict, part.detail)
        parts.append(part)
    parts += derived_parts(parts, args.backend)
    report = build_report(args, parts, budget.elapsed())
    write_json(out / "accelerator-check.json", report)
    write_text(out / "accelerator-check.md", markdown(report))
    print(f"{out / 'accelerator-check.md'}: {report['summary']}", flush=True)
    failed = [p.name for p in parts if p.verdict == "fail"]
    if failed:
        raise AcceleratorCheckFailed(
            f"{', '.join(failed)} failed: see {out / 'accelerator-check.md'}"
        )


def build_report(args: argparse.Namespace, parts: list[Part], elapsed_s: float) -> dict[str, Any]:
    doctor = next(p for p in parts if p.name == "doctor").figures
    counts = {v: sum(p.verdict == v for p in parts) for v in VERDICTS}
    return {
        "backend": args.backend,
        "host": doctor.get("host"),
        "device": doctor.get("devices") or args.backend,
        "driver": doctor.get("driver"),
        "framework_build": doctor.get("framework_build"),
        "budget_s": args.budget_s,
        "elapsed_s": round(elapsed_s, 1),
        "summary": ", ".join(f"{n} {v}" for v, n in counts.items() if n),
        "parts": [asdict(p) for p in parts],
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# accelerator check: {report['backend']} on {report['host']}",
        "",
        f"- device: {report['device']}",
        f"- driver: {report['driver']}",
        f"- framework build: {report['framework_build']}",
        f"- {report['elapsed_s']} s of a {report['budget_s']:.0f} s budget: {report['summary']}",
        f"- models: the tiny config's ({TINY_CONFIG}), also in the benchmark rows: the figures "
        "show the path through the device works, not its speed on the reference networks",
        "",
        "| check | verdict | seconds | limit s | detail |",
        "|---|---|---|---|---|",
    ]
    for part in report["parts"]:
        limit = "" if part["limit_s"] is None else part["limit_s"]
        lines.append(
            f"| {part['name']} | {part['verdict']} | {part['seconds']} | {limit} "
            f"| {part['detail']} |"
        )
    lines += figures_table(report["parts"])
    lines += ["", "Every figure of every check: accelerator-check.json (`parts[].figures`).", ""]
    return "\n".join(lines)


FIGURE_COLUMNS = (
    "samples_per_s",
    "flops_per_sample",
    "mfu",
    "gemm_fraction",
    "joules_per_1000_samples",
)


def figures_table(parts: list[dict[str, Any]]) -> list[str]:
    """The tiny runs' and benchmark rows' headline figures, a row each ("-": not measured)."""
    rows = []
    for part in parts:
        if part["name"].startswith("tiny-"):
            rows += [(f"{part['name']} {p}", f) for p, f in part["figures"].items() if f]
        elif part["name"].startswith("benchmark-") and part["figures"]:
            figures = part["figures"]
            rows.append((f"{part['name']} {figures['row']}", figures))
    if not rows:
        return []
    lines = ["", "| run | " + " | ".join(FIGURE_COLUMNS) + " |"]
    lines.append("|---" * (len(FIGURE_COLUMNS) + 1) + "|")
    for name, figures in rows:
        values = ["-" if figures.get(c) is None else str(figures[c]) for c in FIGURE_COLUMNS]
        lines.append(f"| {name} | " + " | ".join(values) + " |")
    return lines
