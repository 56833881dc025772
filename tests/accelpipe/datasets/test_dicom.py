"""accelpipe.datasets.dicom: CT series -> volume + RAS affine, DICOM SEG segment -> mask."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom
import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets import dicom, nsclc_synthetic

# Rows != columns and an odd slice count: a swapped axis cannot go unnoticed.
Edit = Callable[[pydicom.Dataset], None]
GEO = nsclc_synthetic.Geometry((28, 36, 9), pixel_spacing=1.5, slice_thickness=3.0)


@dataclass
class Patient:
    ct_files: list[Path]
    seg_path: Path
    hu: np.ndarray  # (slices, rows, columns), slice 0 lowest
    tumour: np.ndarray
    lungs: np.ndarray


def _write(tmp_path: Path, ct: list[pydicom.Dataset], masks: dict[str, np.ndarray]) -> Patient:
    (tmp_path / "ct").mkdir()
    files = []
    for ds in ct:
        files.append(tmp_path / "ct" / f"1-{int(ds.InstanceNumber):03d}.dcm")
        ds.save_as(files[-1], enforce_file_format=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        seg = nsclc_synthetic._segmentation(ct, masks, "LUNG1-001", 0)
    seg_path = tmp_path / "seg.dcm"
    seg.save_as(seg_path, enforce_file_format=True)
    return Patient(sorted(files), seg_path, np.empty(0), masks["GTV-1"], masks["Lungs-Total"])


@pytest.fixture
def patient(tmp_path: Path) -> Patient:
    hu, tumour, lungs = nsclc_synthetic.phantom(np.random.default_rng(3), GEO)
    assert tumour.any()
    ct = nsclc_synthetic._ct_slices("LUNG1-001", hu, GEO, seed=0)
    p = _write(tmp_path, ct, {"Lungs-Total": lungs, "GTV-1": tumour})
    p.hu = hu
    return p


def _edit_seg(path: Path, edit: Edit) -> pydicom.Dataset:
    seg = pydicom.dcmread(path)
    edit(seg)
    seg.save_as(path)
    return pydicom.dcmread(path)


def test_ct_volume_order_values_and_affine(patient: Patient) -> None:
    # Files come in instance order (top slice first); the volume runs bottom to top.
    ct = dicom.read_ct_series(list(reversed(patient.ct_files)))
    assert ct.hu.shape == (36, 28, 9) and ct.hu.dtype == np.int16  # (columns, rows, slices)
    np.testing.assert_array_equal(ct.hu, patient.hu.transpose(2, 1, 0))
    assert ct.spacing == (1.5, 1.5, 3.0)
    assert np.all(np.diff(ct.positions[:, 2]) == 3.0)

    # Every voxel maps to its pixel's DICOM position, LPS -> RAS (x and y negated).
    rng = np.random.default_rng(0)
    for i, j, k in zip(
        rng.integers(36, size=5), rng.integers(28, size=5), range(0, 9, 2), strict=True
    ):
        ds = pydicom.dcmread(patient.ct_files[8 - k])  # instance 1 is the top slice
        ipp = np.array(ds.ImagePositionPatient, dtype=float)
        lps = ipp + i * 1.5 * np.array([1, 0, 0]) + j * 1.5 * np.array([0, 1, 0])
        ras = ct.affine @ [i, j, k, 1]
        np.testing.assert_allclose(ras[:3], lps * [-1, -1, 1])
        assert ct.hu[i, j, k] == int(ds.pixel_array[j, i]) + int(ds.RescaleIntercept)


def test_affine_of_oblique_anisotropic_series(tmp_path: Path) -> None:
    hu = np.zeros((3, 4, 5), dtype=np.int16)
    ct = nsclc_synthetic._ct_slices("P", hu, nsclc_synthetic.Geometry((4, 5, 3), 1.0, 2.0), seed=0)
    row_dir, col_dir = np.array([0.8, 0.6, 0.0]), np.array([0.0, 0.0, -1.0])  # coronal-ish
    normal = np.cross(row_dir, col_dir)
    origin = np.array([10.0, -20.0, 30.0])
    for k, ds in enumerate(ct):
        ds.ImageOrientationPatient = [*row_dir, *col_dir]
        ds.PixelSpacing = [0.7, 0.9]  # row spacing, column spacing
        ds.ImagePositionPatient = list(origin + k * 2.5 * normal)
        ds.save_as(tmp_path / f"{k}.dcm", enforce_file_format=True)
    vol = dicom.read_ct_series(sorted(tmp_path.glob("*.dcm")))
    assert vol.hu.shape == (5, 4, 3)
    for i, j, k in [(0, 0, 0), (4, 0, 0), (0, 3, 0), (4, 3, 2)]:
        lps = origin + i * 0.9 * row_dir + j * 0.7 * col_dir + k * 2.5 * normal
        np.testing.assert_allclose((vol.affine @ [i, j, k, 1])[:3], lps * [-1, -1, 1])


def test_rescale_slope_gives_float_hu(tmp_path: Path) -> None:
    hu = np.full((2, 4, 4), 100, dtype=np.int16)
    for k, ds in enumerate(
        nsclc_synthetic._ct_slices("P", hu, nsclc_synthetic.Geometry((4, 4, 2), 1.0, 1.0), 0)
    ):
        ds.RescaleSlope, ds.RescaleIntercept = 0.5, -1000.5
        ds.save_as(tmp_path / f"{k}.dcm", enforce_file_format=True)
    vol = dicom.read_ct_series(sorted(tmp_path.glob("*.dcm")))
    assert vol.hu.dtype == np.float32
    np.testing.assert_allclose(vol.hu, (100 + 1024) * 0.5 - 1000.5)


def test_missing_drifting_and_foreign_slices_are_refused(patient: Patient, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not evenly spaced"):
        dicom.read_ct_series(patient.ct_files[:4] + patient.ct_files[5:])
    drift = pydicom.dcmread(patient.ct_files[2])
    drift.ImagePositionPatient = [
        float(drift.ImagePositionPatient[0]) + 2,
        *drift.ImagePositionPatient[1:],
    ]
    drift.save_as(patient.ct_files[2])
    with pytest.raises(DataError, match="do not lie on one straight line"):
        dicom.read_ct_series(patient.ct_files)
    foreign = tmp_path / "foreign.dcm"
    ds = pydicom.dcmread(patient.ct_files[0])
    ds.SeriesInstanceUID = "1.2.3"
    ds.save_as(foreign)
    with pytest.raises(DataError, match=r"foreign\.dcm: belongs to series 1\.2\.3"):
        dicom.read_ct_series([*patient.ct_files, foreign])


@pytest.mark.parametrize("cut", [100, 400, -1])
def test_truncated_or_foreign_file_names_the_file(patient: Patient, cut: int) -> None:
    bad = patient.ct_files[3]
    bad.write_bytes(bad.read_bytes()[:cut])
    with pytest.raises(DataError, match=f"{bad}: unreadable or truncated DICOM file"):
        dicom.read_ct_series(patient.ct_files)


def test_segment_selected_by_label_and_placed_on_its_slices(patient: Patient) -> None:
    ct = dicom.read_ct_series(patient.ct_files)
    seg = dicom.read_dicom(patient.seg_path)
    assert dicom.segment_labels(seg) == {1: "Lungs-Total", 2: "GTV-1"}
    assert dicom.referenced_series_uid(seg, "x") == ct.series_uid
    gtv = dicom.segment_mask(seg, patient.seg_path, "GTV-1", ct)
    assert gtv.dtype == np.uint8 and gtv.shape == ct.hu.shape
    np.testing.assert_array_equal(gtv, patient.tumour.transpose(2, 1, 0))
    lungs = dicom.segment_mask(seg, patient.seg_path, "Lungs-Total", ct)
    np.testing.assert_array_equal(lungs, patient.lungs.transpose(2, 1, 0))
    assert ct.hu[gtv > 0].mean() > ct.hu[lungs > 0].mean() + 500  # the tumour is dense


def test_segment_found_by_description_and_by_position(patient: Patient) -> None:
    def edit(seg: pydicom.Dataset) -> None:
        seg.SegmentSequence[1].SegmentLabel = "Tumour"
        seg.SegmentSequence[1].SegmentDescription = "GTV-1"
        for frame in seg.PerFrameFunctionalGroupsSequence:  # no source images: use positions
            del frame.DerivationImageSequence

    seg = _edit_seg(patient.seg_path, edit)
    ct = dicom.read_ct_series(patient.ct_files)
    mask = dicom.segment_mask(seg, patient.seg_path, "GTV-1", ct)
    np.testing.assert_array_equal(mask, patient.tumour.transpose(2, 1, 0))


def test_unknown_label_lists_the_labels(patient: Patient) -> None:
    ct = dicom.read_ct_series(patient.ct_files)
    seg = dicom.read_dicom(patient.seg_path)
    assert not dicom.has_segment(seg, "Heart")
    with pytest.raises(
        DataError, match=r"no segment labelled 'Heart' \(it has: GTV-1, Lungs-Total"
    ):
        dicom.segment_mask(seg, patient.seg_path, "Heart", ct)


def _gtv_frame(seg: pydicom.Dataset) -> pydicom.Dataset:
    """The first frame of segment 2 (GTV-1): only the selected segment's frames are placed."""
    frames = seg.PerFrameFunctionalGroupsSequence
    return next(
        f for f in frames if f.SegmentIdentificationSequence[0].ReferencedSegmentNumber == 2
    )


def _shift_frame(seg: pydicom.Dataset) -> None:
    item = _gtv_frame(seg).PlanePositionSequence[0]
    item.ImagePositionPatient = [float(v) + 1.0 for v in item.ImagePositionPatient]


def _pixel_spacing(seg: pydicom.Dataset) -> None:
    seg.SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0].PixelSpacing = [2.0, 2.0]


def _orientation(seg: pydicom.Dataset) -> None:
    item = seg.SharedFunctionalGroupsSequence[0].PlaneOrientationSequence[0]
    item.ImageOrientationPatient = [0, 1, 0, 1, 0, 0]


def _foreign_instance(seg: pydicom.Dataset) -> None:
    frame = _gtv_frame(seg)
    frame.DerivationImageSequence[0].SourceImageSequence[0].ReferencedSOPInstanceUID = "1.2.3"


def _rows(seg: pydicom.Dataset) -> None:
    seg.Rows, seg.Columns = seg.Columns, seg.Rows


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_shift_frame, "frame position .* does not match CT series"),
        (_pixel_spacing, r"pixel spacing \[2.0, 2.0\] differs from CT series"),
        (_orientation, "orientation .* differs from CT series"),
        (_foreign_instance, "references instance 1.2.3, not in CT series"),
        (_rows, "SEG frames are 36x28, CT series .* slices are 28x36"),
    ],
)
def test_geometry_mismatch_names_seg_and_ct(patient: Patient, edit: Edit, message: str) -> None:
    seg = _edit_seg(patient.seg_path, edit)
    ct = dicom.read_ct_series(patient.ct_files)
    with pytest.raises(DataError, match=message) as err:
        dicom.segment_mask(seg, patient.seg_path, "GTV-1", ct)
    text = str(err.value)
    assert str(patient.seg_path) in text and str(seg.SeriesInstanceUID) in text
    assert ct.series_uid in text and "\n" not in text


def test_truncated_seg_pixel_data(patient: Patient) -> None:
    data = patient.seg_path.read_bytes()
    patient.seg_path.write_bytes(data[:-10])
    ct = dicom.read_ct_series(patient.ct_files)
    seg = dicom.read_dicom(patient.seg_path)
    with pytest.raises(DataError, match=f"{patient.seg_path}: unreadable or truncated"):
        dicom.segment_mask(seg, patient.seg_path, "GTV-1", ct)


def test_seg_without_referenced_series(patient: Patient) -> None:
    seg = _edit_seg(patient.seg_path, lambda s: delattr(s, "ReferencedSeriesSequence"))
    with pytest.raises(DataError, match="SEG series 9: SEG has no ReferencedSeriesSequence"):
        dicom.referenced_series_uid(seg, "SEG series 9")


def test_safe_name() -> None:
    assert dicom.safe_name("LUNG1-001") == "LUNG1-001"
    assert dicom.safe_name("../a b/c") == "_a_b_c"
    assert dicom.safe_name("  ") == "unnamed"
