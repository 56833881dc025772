"""Tests for accelpipe.datasets.msd with a tiny Task01-shaped tar served on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets.msd import MSD_TASKS, fetch_task, layout_problem
from tests.helpers.archives import schema_limits
from tests.helpers.http_server import FileServer

TASK = "Task01_BrainTumour"
CASES = ("BRATS_001", "BRATS_002")
LIMITS = schema_limits()


def _write_task(root: Path, *, with_labels: bool = True) -> Path:
    """Write a miniature Task01_BrainTumour (2 cases) under root/TASK."""
    task = root / TASK
    for sub in ("imagesTr", "labelsTr", "imagesTs"):
        (task / sub).mkdir(parents=True)
    rng = np.random.default_rng(0)
    for case in CASES:
        image = rng.standard_normal((8, 8, 4, 4)).astype(np.float32)
        label = rng.integers(0, 4, (8, 8, 4)).astype(np.uint8)
        nib.save(nib.Nifti1Image(image, np.eye(4)), task / "imagesTr" / f"{case}.nii.gz")
        nib.save(nib.Nifti1Image(label, np.eye(4)), task / "labelsTr" / f"{case}.nii.gz")
    (task / "imagesTr" / "._BRATS_001.nii.gz").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    meta = {
        "name": "BRATS",
        "labels": {
            "0": "background",
            "1": "edema",
            "2": "non-enhancing tumor",
            "3": "enhancing tumour",
        },
        "modality": {"0": "FLAIR", "1": "T1w", "2": "t1gd", "3": "T2w"},
        "numTraining": len(CASES),
        "numTest": 0,
        "training": [
            {"image": f"./imagesTr/{c}.nii.gz", "label": f"./labelsTr/{c}.nii.gz"} for c in CASES
        ],
        "test": [],
    }
    (task / "dataset.json").write_text(json.dumps(meta))
    if not with_labels:
        for f in (task / "labelsTr").iterdir():
            f.unlink()
        (task / "labelsTr").rmdir()
    return task


def _make_tar(tmp_path: Path, name: str, **kwargs: bool) -> tuple[Path, str]:
    src = tmp_path / f"src-{name}"
    _write_task(src, **kwargs)
    archive = tmp_path / "www" / name
    archive.parent.mkdir(exist_ok=True)
    with tarfile.open(archive, "w") as tf:
        tf.add(src / TASK, arcname=TASK)
    return archive, hashlib.md5(archive.read_bytes()).hexdigest()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FileServer]:
    (tmp_path / "www").mkdir()
    with FileServer(tmp_path / "www") as srv:
        yield srv


def test_fetch_task_gives_msd_layout(server: FileServer, tmp_path: Path) -> None:
    archive, md5 = _make_tar(tmp_path, f"{TASK}.tar")
    raw = tmp_path / "raw"
    task_dir = fetch_task(
        TASK, raw, url=server.url(archive.name), md5=md5, limits=LIMITS, progress=False
    )

    assert task_dir == raw / TASK
    assert layout_problem(task_dir) is None
    assert sorted(p.name for p in (task_dir / "imagesTr").iterdir()) == [
        f"{c}.nii.gz" for c in CASES
    ]  # the AppleDouble file is gone
    assert nib.load(task_dir / "imagesTr" / "BRATS_002.nii.gz").shape == (8, 8, 4, 4)
    label = nib.load(task_dir / "labelsTr" / "BRATS_001.nii.gz")
    assert label.shape == (8, 8, 4) and label.get_data_dtype() == np.uint8
    assert json.loads((task_dir / "dataset.json").read_text())["numTraining"] == 2
    # The archive lives outside the task folder; no temporary folders are left behind.
    assert (raw / ".downloads" / archive.name).is_file()
    assert sorted(p.name for p in raw.iterdir()) == [".downloads", TASK]


def test_fetch_task_is_idempotent(server: FileServer, tmp_path: Path) -> None:
    archive, md5 = _make_tar(tmp_path, f"{TASK}.tar")
    raw, downloads = tmp_path / "raw", tmp_path / "downloads"
    kwargs = {"url": server.url(archive.name), "md5": md5, "download_dir": downloads}
    first = fetch_task(TASK, raw, limits=LIMITS, progress=False, **kwargs)
    marker = first / "imagesTr" / "BRATS_001.nii.gz"
    mtime = marker.stat().st_mtime_ns
    assert fetch_task(TASK, raw, limits=LIMITS, progress=False, **kwargs) == first
    assert marker.stat().st_mtime_ns == mtime  # not re-extracted
    assert len(server.log) == 1
    assert sorted(p.name for p in raw.iterdir()) == [TASK]  # download_dir honoured

    # A damaged folder is rebuilt from the cached archive, still without a new request.
    (first / "dataset.json").unlink()
    fetch_task(TASK, raw, limits=LIMITS, progress=False, **kwargs)
    assert layout_problem(first) is None
    assert len(server.log) == 1


def test_archive_missing_labels_is_refused(server: FileServer, tmp_path: Path) -> None:
    archive, md5 = _make_tar(tmp_path, "broken.tar", with_labels=False)
    raw = tmp_path / "raw"
    with pytest.raises(DataError, match="labelsTr") as err:
        fetch_task(TASK, raw, url=server.url(archive.name), md5=md5, limits=LIMITS, progress=False)
    assert "broken.tar" in str(err.value)
    assert sorted(p.name for p in raw.iterdir()) == [".downloads"]  # no half task folder


def test_archive_without_task_folder_is_refused(server: FileServer, tmp_path: Path) -> None:
    archive, md5 = _make_tar(tmp_path, "other.tar")
    with pytest.raises(DataError, match=r"no top-level folder Task02_Heart/.*Task01_BrainTumour"):
        fetch_task(
            "Task02_Heart",
            tmp_path / "raw",
            url=server.url(archive.name),
            md5=md5,
            limits=LIMITS,
            progress=False,
        )
    assert not (tmp_path / "raw" / "Task02_Heart").exists()


def test_wrong_md5_is_refused_before_extraction(server: FileServer, tmp_path: Path) -> None:
    archive, _ = _make_tar(tmp_path, f"{TASK}.tar")
    with pytest.raises(DataError, match="md5 mismatch"):
        fetch_task(
            TASK,
            tmp_path / "raw",
            url=server.url(archive.name),
            md5="0" * 32,
            limits=LIMITS,
            progress=False,
        )
    assert not (tmp_path / "raw" / TASK).exists()


def test_layout_problem_names_missing_piece(tmp_path: Path) -> None:
    task = _write_task(tmp_path)
    (task / "labelsTr" / "BRATS_002.nii.gz").unlink()
    assert "labelsTr/BRATS_002.nii.gz" in str(layout_problem(task))
    (task / "dataset.json").unlink()
    assert layout_problem(task) == "missing dataset.json"


def test_unknown_task_needs_url(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown MSD task 'Task99_Nope'"):
        fetch_task("Task99_Nope", tmp_path, limits=LIMITS)


def test_official_task01_source() -> None:
    assert MSD_TASKS[TASK] == {
        "url": "https://msd-for-monai.s3-us-west-2.amazonaws.com/Task01_BrainTumour.tar",
        "md5": "240a19d752f0d9e9101544901065d872",
    }
    assert len(MSD_TASKS) == 10
