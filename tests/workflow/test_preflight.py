"""The preflight rule through the real workflow: on cuda, rocm and gaudi every train job (and
benchmark row, and the publishing of its run) needs `accelpipe doctor`'s report of its image,
the cpu backend none; a failing doctor stops the run before anything trains, naming each
failing check."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.helpers.fake_smi import gpu_row, install_nvidia_smi
from tests.workflow.project import Project, make_project

pytestmark = pytest.mark.e2e
TARGET = "results/unet2d/fold0"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A workflow copy with nothing made yet (every job planned)."""
    return make_project(tmp_path_factory.mktemp("preflight"))


def planned_inputs(project: Project, *args: str) -> dict[str, list[list[str]]]:
    """rule -> the input files of each of its jobs in a dry run (no input line: [])."""
    proc = project.snakemake("--dry-run", *args)
    jobs = re.findall(r"^rule (\w+):\n((?:    .*\n)+)", proc.stdout + proc.stderr, re.M)
    planned: dict[str, list[list[str]]] = {}
    for rule, body in jobs:
        line = re.search(r"^    input: (.*)$", body, re.M)
        planned.setdefault(rule, []).append(line.group(1).split(", ") if line else [])
    return planned


@pytest.mark.parametrize("backend", ["cuda", "rocm", "gaudi"])
def test_train_needs_the_preflight_of_its_image(fresh: Project, backend: str) -> None:
    planned = planned_inputs(fresh, TARGET, "--config", f"backend={backend}")
    report = f"work/preflight/{backend}-pytorch.json"
    assert planned["preflight"] == [[]]  # no data input: it can run first
    assert report in planned["train"][0] and report in planned["publish_run"][0]
    for rule in ("raw_dataset", "prepare_dataset", "evaluate", "summarize_trace"):
        assert all(report not in inputs for inputs in planned[rule]), rule


def test_the_cpu_backend_has_no_preflight(fresh: Project) -> None:
    planned = planned_inputs(fresh, TARGET)
    assert "preflight" not in planned
    assert not any("work/preflight" in f for inputs in planned["train"] for f in inputs)


def test_one_preflight_per_image_for_every_train_job(fresh: Project) -> None:
    """Two workloads of each framework, a benchmark: one preflight per framework's image."""
    targets = ("results/unet2d/fold0", "results/resnet50/fp32", "results/resnet50/benchmark")
    targets += ("results/ssd/fp32", "results/segmenter/bf16")
    planned = planned_inputs(fresh, *targets, "--config", "backend=gaudi")
    assert len(planned["preflight"]) == 2
    pytorch, tensorflow = (
        "work/preflight/gaudi-pytorch.json",
        "work/preflight/gaudi-tensorflow.json",
    )
    jobs = planned["train"] + planned["benchmark_row"]
    assert sum(pytorch in inputs for inputs in jobs) == 2 + len(planned["benchmark_row"])
    assert sum(tensorflow in inputs for inputs in jobs) == 2


def test_under_a_container_runtime_the_preflight_is_named_by_its_image(fresh: Project) -> None:
    planned = planned_inputs(fresh, TARGET, "--config", "runtime=docker", "backend=cuda")
    (train,) = planned["train"]
    assert any(re.fullmatch(r"work/preflight/cuda-pytorch-[0-9a-f]{12}\.json", f) for f in train)


def test_the_preflight_runs_once_and_a_new_device_count_does_not_rerun_it(
    tmp_path: Path,
) -> None:
    """Run for real where it passes here (the cpu's report, which no train job needs): once
    made, it is not made again, not even when the config asks more devices (they travel in
    resources: a re-run would re-run every train job of the image)."""
    (tmp_path / "project").mkdir()
    project = make_project(tmp_path / "project")
    target = "work/preflight/cpu-pytorch.json"
    project.snakemake(target)
    report = json.loads((project.root / target).read_text())
    assert (report["backend"], report["problems"], report["asked"]["devices"]) == ("cpu", [], 2)
    assert project.planned_jobs(target) == {}
    more = {"runs": {"ddp": {"precision": "fp32", "devices": 4}}}
    assert project.planned_jobs(target, "--config", f"resnet50={json.dumps(more)}") == {}


def test_a_failing_preflight_stops_the_run_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An nvidia-smi without its driver: the preflight fails first, naming the checks, and
    no train job starts (the data chain need not run either)."""
    (tmp_path / "project").mkdir()
    project = make_project(tmp_path / "project")
    bin_dir = tmp_path / "bin"
    install_nvidia_smi(
        bin_dir,
        [gpu_row(0)],
        fail="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = project.snakemake(TARGET, "--config", "backend=cuda", check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Error in rule preflight" in output, output
    assert "accelpipe doctor: " in output and "problems: driver, framework" in output, output
    assert "driver: nvidia-smi or" not in output  # one tool on cuda
    assert "couldn't communicate with the NVIDIA driver" in output, output
    assert not (project.root / "work/unet2d/fold0/train").exists()
    assert not (project.root / "logs/unet2d/fold0/train.log").exists()
    assert not (project.root / "work/preflight/cuda-pytorch.json").exists()  # no stale pass
    log = (project.root / "logs/preflight/cuda-pytorch.log").read_text()
    assert "problem  driver" in log and "| fix: install the NVIDIA driver" in log


def test_a_grid_given_on_the_command_line_plans(fresh: Project) -> None:
    """The command line issue 33 named, word for word: --config's nested values reach the
    config as strings ('0.0001'), typed as the key the grid varies (a number)."""
    proc = fresh.snakemake(
        "--dry-run",
        "results/unet2d/grid",
        "--config",
        'unet2d={"grid":{"train.lr":[0.0001,0.001]}}',
    )
    out = proc.stdout + proc.stderr
    assert "results/unet2d/lr-0p0001/fold0" in out and "results/unet2d/lr-0p001/fold0" in out
