"""End-to-end: SwinUNETR on synthetic NSCLC-Radiomics through the real snakemake workflow."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.helpers.evaluation_checks import check_evaluations
from tests.workflow.project import (
    REPO,
    TINY_RUNS,
    Project,
    built_project,
    make_project,
)

pytestmark = pytest.mark.e2e

(TARGET,) = TINY_RUNS["swinunetr"]  # results/swinunetr/default
DOWNSTREAM_OF_TRAIN = {"train", "evaluate", "summarize_trace", "publish_run"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return built_project(tmp_path_factory, (TARGET,))


def test_result_folder_scores_each_case_and_traces_the_reference_sections(
    project: Project,
) -> None:
    """What every run publishes: tests/workflow/test_result_folders.py."""
    result = project.root / TARGET
    assert {"per_case_dice.csv", "trace_summary.md"} <= {p.name for p in result.iterdir()}
    metrics = json.loads((result / "metrics.json").read_text())
    assert set(metrics["dice"]) == {"GTV-1"} and 0.0 <= metrics["mean_dice"] <= 1.0
    check_evaluations(result, [1, 2], reached=True)  # the tiny target: Dice 0.001
    with (result / "per_case_dice.csv").open() as f:
        assert len(list(csv.DictReader(f))) == metrics["n_cases"] >= 1

    summary = json.loads((result / "trace_summary.json").read_text())
    reference_sections = {"loader_first", "loader_next", "step", "forward", "loss", "backward"}
    assert reference_sections <= set(summary["sections"])
    assert summary["sections"]["step"]["count"] == 2  # the 2 active profiler steps
    assert summary["device"] == "cpu"

    provenance = json.loads((result / "provenance.json").read_text())
    assert provenance["config"]["swinunetr"]["model"]["feature_size"] == 12
    assert "runs" not in provenance["config"]["swinunetr"]  # this run's settings only
    train = json.loads((project.root / "work/swinunetr/default/train/stage.json").read_text())
    assert train["precision"] == "fp32" and train["steps"] == 6
    # .test/config.yaml's cache_memory_gb holds 2 of the 3 training volumes: the run trained
    # (above) and recorded what it cached and why (issue 33 item 1)
    cache = train["volume_cache"]
    assert (cache["volumes"], cache["of"], cache["builders"]) == (2, 3, 1)
    assert "2 fit the budget" in cache["reason"] and cache["budget_bytes"] == 5_500_000
    log = (project.root / "logs/swinunetr/default/train.log").read_text()
    assert "volume cache: 2 of 3 volumes cached" in log


def test_prepared_volumes_and_masks_share_geometry(project: Project) -> None:
    import nibabel as nib

    prepared = project.root / "data/prepared/nsclc/nifti"
    datalist = json.loads((prepared / "datalist.json").read_text())
    assert datalist["training"] and datalist["validation"]
    for entry in datalist["training"] + datalist["validation"]:
        image, label = nib.load(prepared / entry["image"]), nib.load(prepared / entry["label"])
        assert image.shape == label.shape
        assert (image.affine == label.affine).all()
        assert label.get_fdata().max() == 1  # every synthetic patient has a tumour


def test_named_run_override_reruns_only_that_run(project: Project) -> None:
    assert project.planned_jobs(TARGET) == {}
    changed = 'swinunetr={"runs":{"default":{"lr":0.0005},"fp16":{"precision":"fp16"}}}'
    assert set(project.planned_jobs(TARGET, "--config", changed)) == DOWNSTREAM_OF_TRAIN
    # the other run's settings do not touch this run
    other = 'swinunetr={"runs":{"default":{},"fp16":{"precision":"bf16"}}}'
    assert project.planned_jobs(TARGET, "--config", other) == {}


def test_fp16_run_trains_with_loss_scaling(project: Project) -> None:
    project.snakemake("work/swinunetr/fp16/train")
    stage = json.loads((project.root / "work/swinunetr/fp16/train/stage.json").read_text())
    assert stage["precision"] == "fp16"
    with (project.root / "work/swinunetr/fp16/train/train_log.csv").open() as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f)]
    assert len(losses) == 2 and all(0 < v < 10 for v in losses)


def test_unknown_run_is_named(project: Project) -> None:
    proc = project.snakemake("results/swinunetr/nope", check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "swinunetr.runs' has no run 'nope'" in output, output


def test_seg_without_its_ct_series_is_named_and_results_kept(
    project: Project, tmp_path: Path
) -> None:
    user_copy = tmp_path / "copy"
    shutil.copytree(project.root / "data/raw/nsclc", user_copy, symlinks=False)
    patient = sorted((user_copy / "NSCLC-Radiomics").iterdir())[0]
    ct = _ct_series_folder(patient)
    shutil.rmtree(ct)
    before = project.fingerprint("results")
    source = "datasets=" + json.dumps({"nsclc": {"source": f"path:{user_copy}"}})
    proc = project.snakemake(TARGET, "--config", source, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert ct.name in output, output  # the missing series is named
    assert "Traceback" not in output, output
    assert project.fingerprint("results") == before


def _ct_series_folder(patient: Path) -> Path:
    import pydicom

    for series in patient.iterdir():
        first = next(series.glob("*.dcm"))
        if pydicom.dcmread(first, stop_before_pixels=True).Modality == "CT":
            return series
    raise AssertionError(f"{patient}: no CT series")


@pytest.mark.slow
def test_shipped_config_learns_the_tumour(tmp_path: Path) -> None:
    """The embedded default config: Dice above 0.5 on the synthetic validation patients."""
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())
    project = make_project(tmp_path, shipped)
    project.snakemake(TARGET)
    metrics = json.loads((project.root / TARGET / "metrics.json").read_text())
    assert metrics["mean_dice"] > 0.5, metrics
