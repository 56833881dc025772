"""Another MSD task, of real NIfTI files in every variant, through the real workflow.

The task folders are built from the files shipped in nibabel's test data (NIfTI-1 and -2,
.nii and .nii.gz, big- and little-endian, scaled; 3D single-modality and 4D images) plus label
maps made here, in the MSD layout, and given as `datasets.brats.source: path:<dir>`.
"""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.nifti_variants import HIPPOCAMPUS_LABELS, variant_task
from tests.workflow.project import TINY_CONFIG, Project, make_project

pytestmark = pytest.mark.e2e
PREPARED = "data/prepared/brats/2d"


def _project(root: Path, task: Path) -> Project:
    config = copy.deepcopy(TINY_CONFIG)
    config["datasets"]["brats"] = {"source": f"path:{task}"}
    config["unet2d"]["folds"] = 2  # 3 to 6 cases per task
    return make_project(root, config)


def _source(task: Path) -> str:
    return "datasets=" + json.dumps({"brats": {"source": f"path:{task}"}})


@pytest.fixture(scope="module")
def hippocampus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, dict]:
    """A 3D single-modality task with the labels of MSD Task04_Hippocampus, trained and scored."""
    task = tmp_path_factory.mktemp("user") / "Task04_Variants"
    cases = variant_task(task, "3d")
    project = _project(tmp_path_factory.mktemp("workflow"), task)
    project.snakemake("results/unet2d/fold0")
    return project, cases


def test_3d_single_modality_task_of_every_variant_prepares(hippocampus) -> None:
    project, cases = hippocampus
    prepared = project.root / PREPARED
    config = json.loads((prepared / "config.json").read_text())
    assert config["in_channels"] == 1 and config["n_class"] == 3
    assert config["labels"] == HIPPOCAMPUS_LABELS
    assert config["cases"] == sorted(cases)
    for case in cases:
        x, y = np.load(prepared / f"{case}_x.npy"), np.load(prepared / f"{case}_y.npy")
        assert x.dtype == np.float32 and x.shape[0] == 1 and x.shape[2:] == (32, 32), case
        assert np.all(np.isfinite(x)) and set(np.unique(y)) <= {0, 1, 2}, case


def test_metrics_name_the_labels_of_dataset_json(hippocampus) -> None:
    project, _ = hippocampus
    result = project.root / "results/unet2d/fold0"
    metrics = json.loads((result / "metrics.json").read_text())
    assert set(metrics["dice"]) == {"1", "2"}
    assert metrics["labels"] == {"1": "left hippocampus", "2": "right"}
    assert "left hippocampus" in metrics["note"] and "edema" not in metrics["note"]
    assert metrics["mean_dice"] == pytest.approx(sum(metrics["dice"].values()) / 2, abs=1e-5)
    with (result / "per_case_dice.csv").open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["case", "dice_left hippocampus", "dice_right", "mean"]
    assert len(rows) - 1 == metrics["n_cases"] == 3  # 6 cases, 2 folds


@pytest.fixture(scope="module")
def multimodal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, dict]:
    """A 4D two-modality task: example4d.nii.gz, example_nifti2.nii.gz and a big-endian one."""
    task = tmp_path_factory.mktemp("user") / "Task04_Variants"
    cases = variant_task(task, "4d")
    project = _project(tmp_path_factory.mktemp("workflow"), task)
    project.snakemake(PREPARED)
    return project, cases


def test_4d_task_with_nifti2_prepares(multimodal) -> None:
    project, cases = multimodal
    prepared = project.root / PREPARED
    config = json.loads((prepared / "config.json").read_text())
    assert config["in_channels"] == 2 and config["cases"] == sorted(cases)
    x = np.load(prepared / "nifti2_x.npy")  # example_nifti2.nii.gz: (32, 20, 12, 2)
    assert x.shape == (2, 12, 32, 32) and np.all(np.isfinite(x))


@pytest.mark.parametrize(
    ("case", "damage"),
    [
        ("nifti2", lambda data: data[: len(data) // 2]),  # truncated .nii.gz
        ("nifti2_be_scaled", lambda data: data[:4] + b"n+9\0\r\n\x1a\n" + data[12:]),  # magic
    ],
    ids=["truncated", "wrong-magic"],
)
def test_unreadable_file_fails_naming_it_without_traceback(
    multimodal, tmp_path: Path, case, damage
) -> None:
    project, _ = multimodal
    task = tmp_path / "Task04_Variants"
    cases = variant_task(task, "4d")
    bad = cases[case][0]
    bad.write_bytes(damage(bad.read_bytes()))
    proc = project.snakemake(PREPARED, "--config", _source(task), check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    # Named as prepare sees it: through the raw folder's link to the user's task folder.
    assert f"imagesTr/{bad.name}: unreadable or truncated NIfTI" in output, output
    assert "Traceback" not in output, output
