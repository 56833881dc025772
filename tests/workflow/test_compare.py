"""End-to-end: results/compare through the real workflow. It compares the runs that exist
when Snakemake plans, re-runs when one of them is published again, and never trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelpipe.config import registry
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
    provenance = json.loads((run / "provenance.json").read_text())
    assert row["config_hash"] == provenance["config_hash"] and row["config_stale"] is False
    assert row["host_oversubscribed"] in (True, False)  # judged: the train stage measured it


def test_a_training_edit_never_makes_compare_train_but_flags_the_run_stale(
    project: Project,
) -> None:
    """Issue 30 item 13: the page under a changed config re-makes itself (its params carry
    each run's hash under the config), trains nothing and flags the run as stale."""
    changed = "unet2d=" + json.dumps({"train": {"lr": 0.5}})
    assert "train" in project.planned_jobs(RUN, "--config", changed)  # the run would retrain
    assert project.planned_jobs("results/compare", "--config", changed) == {"compare": 1}
    project.snakemake("results/compare", "--config", changed)
    page = (project.root / "results/compare/compare.html").read_text()
    assert "⚠ stale config: 1 of 1 runs (unet2d/fold0)" in page
    listing = subprocess.run(
        [sys.executable, "-m", "accelpipe", "runs", "--config", changed],
        cwd=project.root,
        env=os.environ | {"PYTHONPATH": str(project.root / "workflow")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "STALE" in listing and "stale unet2d/fold0" in listing
    project.snakemake("results/compare")  # back to the config the other tests plan with
    [row] = json.loads((project.root / "results/compare/compare.json").read_text())["runs"]
    assert row["config_stale"] is False


def test_a_run_published_again_re_runs_only_compare(project: Project) -> None:
    assert project.planned_jobs("results/compare") == {}
    project.snakemake(RUN, "--forcerun", "publish_run")
    assert project.planned_jobs("results/compare") == {"compare": 1}
