"""Tests for accelpipe.datasets.nsclc_synthetic: real DICOM CT + SEG, deterministic by seed."""

from __future__ import annotations

from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets.nsclc_synthetic import Geometry, phantom, synthesize
from tests.helpers.nsclc_raw import SHAPE, series_dir, synth_tree


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synth_tree(tmp_path_factory.mktemp("raw"))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.dcm"))}


def test_synthetic_layout_and_real_dicom(synth_root: Path) -> None:
    assert sorted(p.name for p in synth_root.iterdir()) == ["LUNG1-001", "LUNG1-002", "LUNG1-003"]
    ct_dir = series_dir(synth_root, "LUNG1-002", "CT")
    seg_dir = series_dir(synth_root, "LUNG1-002", "SEG")
    assert sorted(p.name for p in (synth_root / "LUNG1-002").iterdir()) == sorted(
        [ct_dir.name, seg_dir.name]
    )
    files = sorted(ct_dir.iterdir())
    assert [p.name for p in files] == [f"1-{i:03d}.dcm" for i in range(1, 9)]
    ct = pydicom.dcmread(files[0])
    assert ct.Modality == "CT" and ct.SOPClassUID == "1.2.840.10008.5.1.4.1.1.2"
    assert ct.SeriesInstanceUID == ct_dir.name and ct.PatientID == "LUNG1-002"
    assert (ct.Rows, ct.Columns) == SHAPE[:2] and [float(v) for v in ct.PixelSpacing] == [1.5, 1.5]
    assert float(ct.SliceThickness) == 3.0 and list(ct.ImageOrientationPatient) == [
        1,
        0,
        0,
        0,
        1,
        0,
    ]
    assert (ct.RescaleSlope, ct.RescaleIntercept) == (1, -1024)
    assert ct.StudyInstanceUID and ct.FrameOfReferenceUID

    seg = hd.seg.segread(next(seg_dir.iterdir()))
    assert seg.SeriesInstanceUID == seg_dir.name and seg.SegmentationType == "BINARY"
    assert [s.SegmentLabel for s in seg.SegmentSequence] == ["Lungs-Total", "GTV-1"]
    assert seg.ReferencedSeriesSequence[0].SeriesInstanceUID == ct.SeriesInstanceUID
    assert seg.FrameOfReferenceUID == ct.FrameOfReferenceUID


def test_synthetic_is_deterministic_by_seed(synth_root: Path, tmp_path: Path) -> None:
    assert _tree(synth_tree(tmp_path / "same")) == _tree(synth_root)
    other = _tree(synth_tree(tmp_path / "other", seed=1))
    assert set(other).isdisjoint(_tree(synth_root))  # new UIDs, so new folder names


def test_synthetic_tumour_is_dense_blob_in_lung() -> None:
    geo = Geometry((64, 64, 32), 1.0, 3.0)
    for i in range(4):
        hu, tumour, lungs = phantom(np.random.default_rng([0, i]), geo)
        assert hu.dtype == np.int16
        assert 20 < hu[tumour].mean() < 70 and hu[lungs].mean() < -750
        assert np.median(hu[0, :2, :2]) < -950  # air outside the body
        assert 3 <= tumour.any(axis=(1, 2)).sum() <= 10  # several slices
        assert 6 <= tumour.any(axis=(0, 1)).sum() <= 20  # ~6-10 voxel radius in-plane
        assert not (tumour & lungs).any()


def test_synthetic_rejects_tiny_shape(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="shape"):
        synthesize(tmp_path, patients=1, shape=(8, 8, 2))
