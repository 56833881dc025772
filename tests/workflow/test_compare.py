"""End-to-end: results/compare through the real workflow. It compares the runs that exist
when Snakemake plans, re-runs when one of them is published again, and never trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelpipe import registry
from tests.workflow.project import Project, make_project

pytestmark = pytest.mark.e2e

RUN = "results/unet2d/fold0"  # the `project` fixture's finished run


def test_without_a_finished_run_compare_is_one_clear_message(tmp_path: Path) -> None:
    proc = make_project(tmp_path).snakemake("results/compare", check=False)
    assert proc.returncode != 0
    assert "results/compare: no finished run yet" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


def test_compare_shows_the_finished_run(project: Project) -> None:
    assert project.planned_jobs("results/compare") == {"compare": 1}
    project.snakemake("results/compare")
    [row] = json.loads((project.root / "results/compare/compare.json").read_text())["runs"]
    run = project.root / RUN
    metrics = json.loads((run / "metrics.json").read_text())
    performance = json.loads((run / "performance.json").read_text())
    assert (row["workload"], row["run"]) == ("unet2d", "fold0")
    assert row["metric_value"] == metrics[registry.workload("unet2d").metric]
    assert row["samples_per_s"] == performance["throughput"]["samples_per_s"]
    assert not (row["fastest"] or row["most_accurate"])  # one run of its workload: no marks


def test_a_training_edit_never_makes_compare_train(project: Project) -> None:
    changed = "unet2d=" + json.dumps({"train": {"lr": 0.5}})
    assert "train" in project.planned_jobs(RUN, "--config", changed)  # the run would retrain
    assert project.planned_jobs("results/compare", "--config", changed) == {}


def test_a_run_published_again_re_runs_only_compare(project: Project) -> None:
    assert project.planned_jobs("results/compare") == {}
    project.snakemake(RUN, "--forcerun", "publish_run")
    assert project.planned_jobs("results/compare") == {"compare": 1}
