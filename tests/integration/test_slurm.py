"""The workflow on a real Slurm (scripts/slurm-local.sh start) through profiles/slurm-test:
every job goes through sbatch, the results equal a local run's, and a training job
cancelled with scancel is resubmitted and resumes from its last epoch checkpoint.

Without a usable Slurm the tests skip, saying why, unless ACCELPIPE_REQUIRE_SLURM=1 (CI
sets it): then they fail instead.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.workflow.project import Project, built_project, make_project

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles/slurm-test")
TARGET = "results/unet2d/fold0"
RULES = {"raw_dataset", "prepare_dataset", "train", "evaluate", "summarize_trace", "publish_run"}
# What the plugin logs per submission; the Slurm log of each job is named by its id.
SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+)")
USABLE = {"idle", "mixed", "allocated", "completing"}


def _slurm_problem() -> str | None:
    if shutil.which("sinfo") is None:
        return "sinfo not found (scripts/slurm-local.sh start installs and starts Slurm)"
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"Slurm is down (scripts/slurm-local.sh start): {proc.stderr.strip()}"
    if not USABLE & {state.rstrip("*~#$@+^-") for state in proc.stdout.split()}:
        return f"no usable Slurm node, sinfo says: {' '.join(proc.stdout.split()) or 'none'}"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    if (problem := _slurm_problem()) is not None:
        if os.environ.get("ACCELPIPE_REQUIRE_SLURM") == "1":
            pytest.fail(f"ACCELPIPE_REQUIRE_SLURM=1 but {problem}")
        pytest.skip(problem)


@pytest.fixture(scope="module")
def slurm_run(slurm, tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, str]:
    """The fold0 results built through Slurm, and Snakemake's log of it."""
    project = make_project(tmp_path_factory.mktemp("slurm"))
    proc = project.snakemake("--profile", PROFILE, TARGET)
    return project, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def local_project(slurm, tmp_path_factory: pytest.TempPathFactory) -> Project:
    return built_project(tmp_path_factory, (TARGET,))


def _states(job_ids: list[str]) -> dict[str, str]:
    """Slurm's record of the jobs: squeue keeps finished ones for MinJobAge (300 s)."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("|") for line in out.split())


def test_every_job_went_through_sbatch(slurm_run: tuple[Project, str]) -> None:
    project, log = slurm_run
    job_ids = SUBMITTED.findall(log)
    assert len(job_ids) == len(RULES), log
    # .snakemake/slurm_logs/rule_<rule>/<wildcards>/<slurm job id>.log, one per job
    logs = list((project.root / ".snakemake/slurm_logs").glob("rule_*/*/*.log"))
    assert sorted(p.stem for p in logs) == sorted(job_ids)
    assert {p.parent.parent.name.removeprefix("rule_") for p in logs} == RULES
    assert set(_states(job_ids).values()) == {"COMPLETED"}
    stage = json.loads((project.root / "work/unet2d/fold0/train/stage.json").read_text())
    assert stage["resumed_from_step"] is None


def test_slurm_results_equal_local_results(
    slurm_run: tuple[Project, str], local_project: Project
) -> None:
    project, _ = slurm_run
    for name in ("metrics.json", "per_case_dice.csv"):
        slurm_bytes = (project.root / TARGET / name).read_bytes()
        local_bytes = (local_project.root / TARGET / name).read_bytes()
        assert slurm_bytes == local_bytes, name


def _train_job(project: Project, run: str) -> str | None:
    """The running Slurm job of this project's train rule for `run`, found by the comment
    the plugin gives each job (rule_<rule>_wildcards_<values>) and its working directory."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "running", "-o", "%i|%k|%Z"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in out.splitlines():
        job_id, comment, workdir = line.split("|")
        if comment == f"rule_train_wildcards_unet2d_{run}" and workdir == str(project.root):
            return job_id
    return None


def test_cancelled_training_is_resubmitted_and_resumes(slurm_run: tuple[Project, str]) -> None:
    project, _ = slurm_run
    longer = 'unet2d={"train":{"epochs":40,"steps_per_epoch":3}}'
    work = project.root / "work/unet2d/fold1"
    job = project.start_snakemake(
        "--profile", PROFILE, "work/unet2d/fold1/train", "--config", longer
    )
    try:
        project.wait_for(lambda: next(work.glob(".train-partial-*/checkpoint.pt"), None), job)
        cancelled = project.wait_for(lambda: _train_job(project, "fold1"), job)
        subprocess.run(["scancel", cancelled], check=True)
        log, _ = job.communicate()
    finally:
        project.kill(job)
    assert job.returncode == 0, log
    assert f"SLURM-job '{cancelled}' failed, SLURM status is: 'CANCELLED'" in log
    submitted = SUBMITTED.findall(log)
    assert len(submitted) == 2 and submitted[0] == cancelled, log  # retried once

    stage = json.loads((work / "train/stage.json").read_text())
    assert stage["resumed_from_step"] is not None and stage["resumed_from_step"] > 0
    assert stage["resumed_from_step"] % 3 == 0  # an epoch boundary
    with (work / "train/train_log.csv").open() as f:
        steps = [int(r["step"]) for r in csv.DictReader(f)]
    assert steps == list(range(1, 121))  # no step lost or logged twice across the cancel
    assert not list(work.glob(".train-partial-*"))


def test_two_process_training_runs_under_srun(slurm_run: tuple[Project, str]) -> None:
    project, _ = slurm_run
    two = 'unet2d={"train":{"devices":2,"batch_size":4}}'
    proc = project.snakemake("--profile", PROFILE, "work/unet2d/fold3/train", "--config", two)
    log = proc.stdout + proc.stderr
    assert len(SUBMITTED.findall(log)) == 1, log  # one Slurm job...
    stage = json.loads((project.root / "work/unet2d/fold3/train/stage.json").read_text())
    assert stage["world_size"] == 2 and stage["global_batch"] == 4  # ...two training processes
    train_log = (project.root / "logs/unet2d/fold3/train.log").read_text()
    assert "srun" in train_log and "torch.distributed.run" in train_log, train_log


def test_two_worker_tensorflow_training_runs_under_srun(slurm_run: tuple[Project, str]) -> None:
    """The Segmenter's ddp run (devices: 2): one Slurm job whose launcher starts the two
    TensorFlow workers as one srun step; each reads its own shard of the records."""
    project, _ = slurm_run
    proc = project.snakemake("--profile", PROFILE, "work/segmenter/ddp/train")
    log = proc.stdout + proc.stderr
    assert len(SUBMITTED.findall(log)) == 3, log  # raw, prepare, train
    stage = json.loads((project.root / "work/segmenter/ddp/train/stage.json").read_text())
    assert (stage["world_size"], stage["global_batch"], stage["steps"]) == (2, 4, 6)
    with (project.root / "work/segmenter/ddp/train/train_log.csv").open() as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f)]
    assert len(losses) == 6 and all(math.isfinite(v) and v > 0 for v in losses)
    train_log = (project.root / "logs/segmenter/ddp/train.log").read_text()
    assert "TensorFlow workers" in train_log or "through srun" in train_log, train_log
    assert "srun" in train_log, train_log
