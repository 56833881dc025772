"""`accelpipe accelerator-check`: parts bounded in time, verdicts that say why, the report."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from accelpipe import REPO
from accelpipe.config.schema import validate
from accelpipe.plan import preflight
from accelpipe.stages import accelerator_check as check

# the reference recipes' global batch sizes (the schema's train.batch_size defaults)
_REFERENCE = {"unet2d": 64, "resnet50": 256, "swinunetr": 1}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")  # a zombie is gone


def test_a_part_past_its_limit_is_stopped_with_its_children(tmp_path: Path) -> None:
    child = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {child}; wait"
    ran = check.run_bounded(["bash", "-c", script], 1.0, tmp_path / "part.log", tmp_path)
    assert ran.returncode is None  # killed at its limit, not finished
    pid = int(child.read_text())
    for _ in range(100):  # the signal is delivered at once; its death is seen a moment later
        if not _alive(pid):
            break
        time.sleep(0.05)
    assert not _alive(pid)  # the whole process group went


def test_a_part_that_finishes_gives_its_status(tmp_path: Path) -> None:
    ran = check.run_bounded(["bash", "-c", "echo hi; exit 3"], 60.0, tmp_path / "p.log", tmp_path)
    assert ran.returncode == 3
    assert (tmp_path / "p.log").read_text() == "hi\n"


def test_a_part_without_time_left_is_skipped_and_says_so() -> None:
    args = argparse.Namespace(budget_s=60.0)
    part = check.run_part(args, "tiny-unet2d", check.MIN_PART_S - 0.1)
    assert part.verdict == "skipped"
    assert part.detail == "no time left in the 60 s budget"


def test_the_budget_gives_each_part_its_share_and_keeps_the_reserve() -> None:
    budget = check.Budget(100.0, [1.0, 1.0, 2.0])
    assert budget.deadlines == [25.0, 50.0, 100.0]
    last = 100.0 - check.REPORT_RESERVE_S - check.KILL_GRACE_S
    assert budget.limit(0) <= 25.0
    assert last - 1.0 < budget.limit(2) <= last


def _run(flops: float | None, mfu: float | None, kernels: int) -> dict[str, Any]:
    return {
        "flops_per_sample": flops,
        "mfu": mfu,
        "gemm_fraction": 0.5,
        "peak_note": None,
        "joules_per_1000_samples": None,
        "energy_not_measured": "no power source",
        "trace": {"device": "cuda", "steps": 2, "kernels": kernels, "kernel_ms": 1.0},
    }


def test_on_an_accelerator_a_run_without_mfu_or_device_kernels_fails() -> None:
    tiny = check.Part("tiny-resnet50", "pass", "", figures={"bf16": _run(1e9, None, 0)})
    trace, compute, energy = check.derived_parts([tiny], "cuda")
    assert (trace.verdict, trace.detail) == ("fail", "no device kernels: resnet50/bf16")
    assert (compute.verdict, compute.detail) == ("fail", "not measured: resnet50/bf16 mfu")
    assert (energy.verdict, energy.detail) == ("skipped", "no meter reads here: no power source")


def test_a_check_on_the_figures_names_the_runs_it_could_not_cover() -> None:
    done = check.Part("tiny-unet2d", "pass", "", figures={"bf16": _run(1e9, 0.3, 5)})
    cut = check.Part("tiny-swinunetr", "timeout", "", figures={"fp32": None, "bf16": None})
    derived = check.derived_parts([done, cut], "cuda")
    assert [p.verdict for p in derived] == ["pass", "pass", "skipped"]
    for part in derived:
        assert part.detail.endswith(
            "; not checked (run unfinished): swinunetr/fp32, swinunetr/bf16"
        )


def test_the_energy_check_names_the_runs_the_meter_did_not_read() -> None:
    """As on the lent H200: the benchmark rows and one tiny run read energy, three tiny runs'
    few milliseconds of measured steps did not."""
    read = _run(1e9, 0.3, 5) | {"joules_per_1000_samples": 42.7, "energy_not_measured": None}
    unread = _run(1e9, 0.3, 5) | {"energy_not_measured": "the meter read 0 J"}
    tiny = check.Part("tiny-unet2d", "pass", "", figures={"fp32": unread, "bf16": read})
    energy = check.derived_parts([tiny], "cuda")[2]
    assert (energy.verdict, energy.figures) == ("pass", {"unet2d/fp32": None, "unet2d/bf16": 42.7})
    assert energy.detail == (
        "joules per 1,000 samples measured; not in unet2d/fp32 (the meter read 0 J)"
    )


def test_no_finished_run_skips_the_checks_on_its_figures() -> None:
    tiny = check.Part("tiny-unet2d", "timeout", "stopped", figures={"fp32": None, "bf16": None})
    derived = check.derived_parts([tiny], "cuda")
    assert [(p.name, p.verdict, p.detail) for p in derived] == [
        (name, "skipped", "no tiny run finished") for name in ("trace", "compute", "energy")
    ]


def test_device_tests_that_are_not_here_skip_the_part_naming_them(tmp_path: Path) -> None:
    args = argparse.Namespace(workflow=str(tmp_path), tests=["tests/devices"], out=str(tmp_path))
    part = check.check_tests(args, 60.0)
    assert (part.verdict, part.detail) == ("skipped", "no test files under tests/devices here")


def test_a_budget_too_short_for_any_part_is_refused() -> None:
    with pytest.raises(check.ConfigError, match="--budget-s 10"):
        check.check_arguments(argparse.Namespace(budget_s=10, workflow=str(REPO)))


def test_a_folder_that_is_no_checkout_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(check.ConfigError, match=f"--workflow {tmp_path}: no Snakefile"):
        check.check_arguments(argparse.Namespace(budget_s=480, workflow=str(tmp_path)))


@pytest.mark.parametrize(
    ("backend", "batches", "train_images"),
    [("cpu", {"unet2d": 4, "resnet50": 8, "swinunetr": 1}, 24), ("cuda", _REFERENCE, 256)],
)
def test_the_benchmark_row_is_at_the_reference_batch_on_an_accelerator(
    backend: str, batches: dict[str, int], train_images: int
) -> None:
    args = argparse.Namespace(
        workflow=str(REPO),
        backend=backend,
        workloads=["unet2d", "resnet50", "swinunetr"],
        precisions=["fp32", "bf16"],
        benchmark_warmup=5,
        benchmark_steps=20,
    )
    config = check.check_config(args)
    assert {w: config[w]["benchmark"]["batch_sizes"] for w in batches} == {
        w: [b] for w, b in batches.items()
    }
    assert all(config[w]["runs"]["bf16"] == {"precision": "bf16", "devices": 1} for w in batches)
    # every run on one device: the tiny config's two-device runs made the preflight refuse
    # the lent one-GPU H200 (2026-11-28), also those of a workload the check leaves out
    assert preflight.needs(validate(config), "pytorch")["devices"] == 1
    only_swinunetr = check.check_config(
        argparse.Namespace(**{**vars(args), "workloads": ["swinunetr"]})
    )
    assert preflight.needs(validate(only_swinunetr), "pytorch")["devices"] == 1
    imagenet = config["datasets"]["imagenet"]["synthetic"]
    # the training set holds a full batch (resnet50 drops a partial one)
    assert imagenet["classes"] * imagenet["train_per_class"] == train_images


@pytest.mark.e2e
def test_the_check_runs_end_to_end_on_the_cpu_inside_its_budget(tmp_path: Path) -> None:
    """The CI's run: one workload, a short budget; every verdict says what happened."""
    out = tmp_path / "check"
    budget_s = 150
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "accelpipe", "accelerator-check", "--backend", "cpu"),
            *("--budget-s", str(budget_s), "--out", str(out), "--workloads", "unet2d"),
            *("--tests", "tests/accelpipe/devices/test_peaks.py"),
            *("--benchmark-steps", "3", "--benchmark-warmup", "1", "--cores", "2"),
        ],
        cwd=REPO,
        text=True,
        capture_output=True,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "accelerator-check.json").read_text())
    parts = {p["name"]: p for p in report["parts"]}
    assert list(parts) == [
        *("doctor", "tests", "tiny-unet2d", "benchmark-unet2d"),
        *("trace", "compute", "energy"),
    ]
    assert report["backend"] == "cpu" and report["framework_build"].startswith("torch ")
    assert report["elapsed_s"] <= budget_s
    assert all(p["verdict"] in check.VERDICTS for p in parts.values())
    assert parts["doctor"]["verdict"] == "pass"
    assert parts["tests"]["verdict"] == "pass"
    assert parts["tests"]["figures"]["tests"] > 0 and parts["tests"]["figures"]["failures"] == 0
    for name in ("tiny-unet2d", "benchmark-unet2d"):
        part = parts[name]
        if part["verdict"] == "timeout":  # a loaded machine: the part says it ran out of time
            assert part["detail"] == f"stopped at its limit of {part['limit_s']:.0f} s"
        elif part["verdict"] == "skipped":
            assert part["detail"] == f"no time left in the {budget_s} s budget"
        else:
            assert part["verdict"] == "pass", part
    runs = parts["tiny-unet2d"]["figures"]
    if parts["tiny-unet2d"]["verdict"] == "pass":
        for precision in ("fp32", "bf16"):
            figures = runs[precision]
            assert figures["flops_per_sample"] > 0 and figures["gemm_fraction"] > 0
            assert figures["mfu"] is None and figures["peak_note"].startswith("cpu")
            assert figures["trace"]["steps"] > 0
        assert parts["trace"]["verdict"] == parts["compute"]["verdict"] == "pass"
    if parts["benchmark-unet2d"]["verdict"] == "pass":
        assert parts["benchmark-unet2d"]["figures"]["row"] == "bf16-b4"  # the tiny batch on CPU
    energy = parts["energy"]
    measured = any(v is not None for v in energy["figures"].values())
    assert energy["verdict"] == ("pass" if measured else "skipped"), energy
    page = (out / "accelerator-check.md").read_text()
    assert "- models: the tiny config's (.test/config.yaml)" in page  # no speed claim
    for part in parts.values():
        assert f"| {part['name']} | {part['verdict']} |" in page
