"""Bad input through the real workflow: one clear message naming the file or key,
no traceback, and the published results of an earlier run left as they were."""

from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from accelpipe.datasets.brats import synthesize
from tests.helpers.http_server import FileServer
from tests.workflow.project import Project

pytestmark = pytest.mark.e2e
TARGET = "results/unet2d/fold0"


def _brats(**block: object) -> str:
    """A `--config` override of the brats dataset block."""
    return "datasets=" + json.dumps({"brats": block})


def _fails_naming(project: Project, needle: str, *config: str) -> str:
    """Run the target with a --config override; assert it fails naming `needle`, results kept."""
    before = project.fingerprint("results")
    args = [TARGET, "--config", *config] if config else [TARGET]
    proc = project.snakemake(*args, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert needle in output, output
    assert "Traceback" not in output, output
    assert project.fingerprint("results") == before
    return output


@pytest.fixture
def raw_copy(tmp_path: Path) -> Path:
    """A user's own copy of a raw Task01 folder (for `path:` sources)."""
    return synthesize(tmp_path / "user", cases=5, shape=(32, 32, 16), seed=3)


def test_unknown_config_key_is_named(project: Project) -> None:
    _fails_naming(project, "'unet2d.train.lrr'", 'unet2d={"train":{"lrr":0.1}}')


def test_mistyped_config_value_is_named(project: Project) -> None:
    _fails_naming(project, "'unet2d.train.epochs'", 'unet2d={"train":{"epochs":"many"}}')


def test_missing_path_source_is_named(project: Project, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dataset"
    _fails_naming(project, str(missing), _brats(source=f"path:{missing}"))


def test_case_without_label_is_named(project: Project, raw_copy: Path) -> None:
    (raw_copy / "labelsTr/BRATS_002.nii.gz").unlink()
    out = _fails_naming(project, "BRATS_002", _brats(source=f"path:{raw_copy}"))
    assert "label" in out


def test_truncated_nifti_is_named(project: Project, raw_copy: Path) -> None:
    image = raw_copy / "imagesTr/BRATS_003.nii.gz"
    data = image.read_bytes()
    image.write_bytes(data[: len(data) // 2])
    with pytest.raises(EOFError):  # the file really is a truncated gzip
        gzip.decompress(image.read_bytes())
    _fails_naming(project, str(image.name), _brats(source=f"path:{raw_copy}"))


def test_wrong_md5_of_download_is_named(project: Project, raw_copy: Path, tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / "Task01_BrainTumour.tar", "w") as tar:
        tar.add(raw_copy, arcname="Task01_BrainTumour")
    wrong = hashlib.md5(b"not the archive").hexdigest()
    with FileServer(served) as server:
        msd = {"url": server.url("Task01_BrainTumour.tar"), "md5": wrong}
        out = _fails_naming(project, "Task01_BrainTumour.tar", _brats(source="msd", msd=msd))
    assert wrong in out


def test_msd_download_with_right_md5_prepares(
    project: Project, raw_copy: Path, tmp_path: Path
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    archive = served / "Task01_BrainTumour.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(raw_copy, arcname="Task01_BrainTumour")
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    with FileServer(served) as server:
        msd = {"url": server.url("Task01_BrainTumour.tar"), "md5": md5}
        project.snakemake("data/prepared/brats/2d", "--config", _brats(source="msd", msd=msd))
    prepared = project.root / "data/prepared/brats/2d"
    assert len(list(prepared.glob("*_x.npy"))) == 5
    assert (project.root / "data/downloads/brats/Task01_BrainTumour.tar").exists()


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("results/unet2d/fold7", "config key 'unet2d.folds' is 5"),
        ("work/unet2d/fold5/train", "config key 'unet2d.folds' is 5"),
        ("results/swinunetr/nope", "config key 'swinunetr.runs' has no run 'nope'"),
        ("results/swinunetr/cv", "swinunetr has no cross-validation"),
        ("results/yolov8/default", "unknown workload 'yolov8'"),
        ("data/raw/kits", "unknown dataset 'kits'"),
        ("data/prepared/brats/3d", "'brats' has no prepared variant '3d'"),
    ],
)
def test_target_the_config_cannot_have_is_refused_before_any_job(
    project: Project, target: str, needle: str
) -> None:
    before = {p.relative_to(project.root) for p in project.root.rglob("*")}
    proc = project.snakemake(target, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "invalid target: " in output and needle in output, output
    assert "Building DAG of jobs" in output and "rule train:" not in output
    after = {p.relative_to(project.root) for p in project.root.rglob("*")}
    assert {p for p in after - before if ".snakemake" not in p.parts} == set()
