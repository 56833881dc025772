"""DICOM to arrays: a CT series as a volume with its NIfTI affine, a DICOM SEG segment as a mask.

Volumes are in NIfTI array order: axis 0 runs along a row (DICOM column index), axis 1 down
the columns (DICOM row index), axis 2 through the slices sorted by position along the slice
normal. Affines map those voxel indices to RAS millimetres: DICOM's patient coordinates are
LPS, so the first two rows of the LPS affine are negated.

A SEG frame is placed on the CT slice named by its ReferencedSOPInstanceUID (falling back to
its ImagePositionPatient), and its geometry (rows, columns, pixel spacing, orientation,
position) must agree with the CT. Every problem is one DataError naming the file or series.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pydicom
from pydicom.dataset import Dataset
from pydicom.errors import InvalidDicomError

from accelpipe.core.errors import DataError

# Everything pydicom raises on a truncated, corrupt or non-DICOM file or pixel data.
_READ_ERRORS = (
    InvalidDicomError,
    OSError,
    EOFError,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    IndexError,
    NotImplementedError,
    RuntimeError,
    zlib.error,
)
# Positions and directions are decimal strings: allow rounding, not a different grid.
_DIRECTION_TOL = 1e-3
_SPACING_RTOL = 1e-3
_POSITION_TOL = 0.1  # fraction of a voxel
_SPACING_UNIFORMITY = 0.05  # max relative deviation of slice gaps from their median


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def safe_name(name: str) -> str:
    """A DICOM id (free text, e.g. PatientID) as a file name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name.strip()).lstrip(".") or "unnamed"


def read_dicom(path: Path, *, pixels: bool = True) -> Dataset:
    """Read a DICOM file (pixel data left undecoded); DataError naming it if it is unreadable."""
    try:
        return pydicom.dcmread(path, stop_before_pixels=not pixels)
    except _READ_ERRORS as err:
        raise DataError(f"{path}: unreadable or truncated DICOM file ({_one_line(err)})") from None


def pixel_array(ds: Dataset, path: Path) -> np.ndarray:
    """Decode a data set's pixel data; DataError naming the file if it is missing or cut short."""
    try:
        if "PixelData" not in ds:
            raise ValueError("no pixel data (file cut short?)")
        return ds.pixel_array
    except _READ_ERRORS as err:
        raise DataError(f"{path}: unreadable or truncated DICOM file ({_one_line(err)})") from None


def referenced_series_uid(seg: Dataset, where: str) -> str:
    """SeriesInstanceUID of the image series a SEG was drawn on (ReferencedSeriesSequence[0])."""
    try:
        return str(seg.ReferencedSeriesSequence[0].SeriesInstanceUID)
    except (AttributeError, IndexError):
        raise DataError(
            f"{where}: SEG has no ReferencedSeriesSequence naming its image series"
        ) from None


# --------------------------------------------------------------------------------------------
# CT series
# --------------------------------------------------------------------------------------------


@dataclass
class Volume:
    """A CT series in NIfTI order (columns, rows, slices), with what SEG frames are matched on."""

    series_uid: str
    hu: np.ndarray  # int16 or float32 Hounsfield units
    affine: np.ndarray  # 4x4, voxel index -> RAS mm
    sop_uids: list[str]  # per slice, in volume order
    positions: np.ndarray  # (slices, 3) ImagePositionPatient (LPS mm), in volume order
    orientation: np.ndarray  # (6,) ImageOrientationPatient
    pixel_spacing: np.ndarray  # (2,) row spacing, column spacing (mm)

    @property
    def spacing(self) -> tuple[float, float, float]:
        """Voxel size (mm) along the three array axes."""
        i, j, k = np.linalg.norm(self.affine[:3, :3], axis=0)
        return float(i), float(j), float(k)


@dataclass
class _Slice:
    sop_uid: str
    position: np.ndarray
    hu: np.ndarray  # (rows, columns)


def _floats(ds: Dataset, keyword: str, n: int, where: Path | str) -> np.ndarray:
    value = ds.get(keyword)
    try:
        arr = np.asarray([float(v) for v in value], dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.empty(0)
    if arr.shape != (n,):
        raise DataError(f"{where}: missing or malformed {keyword} ({value!r})")
    return arr


def _to_hu(ds: Dataset, pixels: np.ndarray) -> np.ndarray:
    slope = float(ds.get("RescaleSlope", 1) or 1)
    intercept = float(ds.get("RescaleIntercept", 0) or 0)
    if slope == 1 and intercept.is_integer():  # the usual case: exact integer HU
        hu = pixels.astype(np.int32) + int(intercept)
        if hu.min(initial=0) >= -32768 and hu.max(initial=0) <= 32767:
            return hu.astype(np.int16)
    scaled: np.ndarray = pixels.astype(np.float32) * np.float32(slope) + np.float32(intercept)
    return scaled.astype(np.float32)


def _read_slice(path: Path, series_uid: str | None) -> tuple[Dataset, _Slice]:
    ds = read_dicom(path)
    pixels = pixel_array(ds, path)
    if series_uid is not None and str(ds.get("SeriesInstanceUID")) != series_uid:
        raise DataError(
            f"{path}: belongs to series {ds.get('SeriesInstanceUID')}, not {series_uid}"
        )
    if pixels.ndim != 2:
        raise DataError(f"{path}: expected one 2D CT slice, got pixel array {pixels.shape}")
    position = _floats(ds, "ImagePositionPatient", 3, path)
    return ds, _Slice(str(ds.SOPInstanceUID), position, _to_hu(ds, pixels))


def read_ct_series(files: Sequence[Path]) -> Volume:
    """Read one single-frame image series (CT) into a Volume; DataError naming the bad file."""
    if not files:
        raise DataError("empty image series: no DICOM files")
    first, first_slice = _read_slice(Path(files[0]), None)
    series_uid = str(first.SeriesInstanceUID)
    orientation = _floats(first, "ImageOrientationPatient", 6, files[0])
    spacing = _floats(first, "PixelSpacing", 2, files[0])
    slices = [first_slice]
    for path in files[1:]:
        ds, item = _read_slice(Path(path), series_uid)
        same_plane = np.allclose(
            _floats(ds, "ImageOrientationPatient", 6, path), orientation, atol=_DIRECTION_TOL
        ) and np.allclose(_floats(ds, "PixelSpacing", 2, path), spacing, rtol=_SPACING_RTOL)
        if not same_plane or item.hu.shape != first_slice.hu.shape:
            raise DataError(
                f"{path}: slice geometry (size, spacing or orientation) differs from {files[0]} "
                f"in series {series_uid}"
            )
        slices.append(item)
    normal = np.cross(orientation[:3], orientation[3:])
    slices.sort(key=lambda s: float(s.position @ normal))
    positions = np.stack([s.position for s in slices])
    step = _slice_step(positions, normal, first, series_uid)
    hu_dtype = np.result_type(*(s.hu.dtype for s in slices))
    hu = np.stack([s.hu.astype(hu_dtype, copy=False).T for s in slices], axis=-1)
    return Volume(
        series_uid=series_uid,
        hu=np.ascontiguousarray(hu),
        affine=nifti_affine(orientation, spacing, positions[0], step),
        sop_uids=[s.sop_uid for s in slices],
        positions=positions,
        orientation=orientation,
        pixel_spacing=spacing,
    )


def _slice_step(positions: np.ndarray, normal: np.ndarray, ds: Dataset, uid: str) -> np.ndarray:
    """The LPS vector from one slice to the next; slices must be evenly spaced for an affine."""
    if len(positions) == 1:
        thickness = float(ds.get("SliceThickness", 1) or 1)
        return normal * thickness
    gaps = np.diff(positions @ normal)
    median = float(np.median(gaps))
    if median <= 0 or np.any(np.abs(gaps - median) > _SPACING_UNIFORMITY * median):
        raise DataError(
            f"series {uid}: slices are not evenly spaced (gaps {gaps.min():.3g}..{gaps.max():.3g} "
            "mm; duplicate or missing slices?)"
        )
    # The mean step, not normal * gap, keeps gantry tilt (a sheared grid) in the affine.
    step: np.ndarray = (positions[-1] - positions[0]) / (len(positions) - 1)
    line = positions[0] + np.arange(len(positions))[:, None] * step
    if np.abs(positions - line).max() > _SPACING_UNIFORMITY * median:
        raise DataError(f"series {uid}: slice positions do not lie on one straight line")
    return step


def nifti_affine(
    orientation: np.ndarray, pixel_spacing: np.ndarray, origin: np.ndarray, step: np.ndarray
) -> np.ndarray:
    """RAS affine of a (columns, rows, slices) array from DICOM plane geometry (LPS).

    ImageOrientationPatient is (row direction, column direction): moving one column moves
    along the row direction by the column spacing (PixelSpacing[1]), and one row along the
    column direction by the row spacing (PixelSpacing[0]).
    """
    lps = np.eye(4)
    lps[:3, 0] = orientation[:3] * pixel_spacing[1]
    lps[:3, 1] = orientation[3:] * pixel_spacing[0]
    lps[:3, 2] = step
    lps[:3, 3] = origin
    return np.diag([-1.0, -1.0, 1.0, 1.0]) @ lps


# --------------------------------------------------------------------------------------------
# DICOM SEG
# --------------------------------------------------------------------------------------------


def segment_labels(seg: Dataset) -> dict[int, str]:
    """SegmentNumber -> SegmentLabel (or SegmentDescription when there is no label)."""
    out = {}
    for item in seg.get("SegmentSequence", []):
        name = item.get("SegmentLabel") or item.get("SegmentDescription") or ""
        out[int(item.SegmentNumber)] = str(name)
    return out


def find_segment(seg: Dataset, label: str, where: str) -> int:
    """Number of the segment whose SegmentLabel or SegmentDescription is `label`."""
    for item in seg.get("SegmentSequence", []):
        if label in (item.get("SegmentLabel"), item.get("SegmentDescription")):
            return int(item.SegmentNumber)
    have = ", ".join(sorted(set(segment_labels(seg).values()))) or "none"
    raise DataError(f"{where}: SEG has no segment labelled {label!r} (it has: {have})")


def _first(item: Dataset, keyword: str) -> Dataset | None:
    seq = item.get(keyword)
    return seq[0] if seq else None


def _frame_attr(seg: Dataset, frame: Dataset, seq: str, keyword: str) -> Any:
    """A functional-group attribute: per-frame if present there, else shared."""
    for group in (frame, _first(seg, "SharedFunctionalGroupsSequence")):
        item = _first(group, seq) if group is not None else None
        if item is not None and keyword in item:
            return item.get(keyword)
    return None


def _check_frame(seg: Dataset, frame: Dataset, ct: Volume, where: str) -> None:
    """A SEG frame's orientation and pixel spacing (per-frame or shared) must match the CT."""
    orient = _frame_attr(seg, frame, "PlaneOrientationSequence", "ImageOrientationPatient")
    if orient is not None and not np.allclose(
        np.asarray(orient, float), ct.orientation, atol=_DIRECTION_TOL
    ):
        raise DataError(
            f"{where}: SEG orientation {[float(v) for v in orient]} differs from CT series "
            f"{ct.series_uid} ({ct.orientation.tolist()})"
        )
    spacing = _frame_attr(seg, frame, "PixelMeasuresSequence", "PixelSpacing")
    if spacing is not None and not np.allclose(
        np.asarray(spacing, float), ct.pixel_spacing, rtol=_SPACING_RTOL
    ):
        raise DataError(
            f"{where}: SEG pixel spacing {[float(v) for v in spacing]} differs from CT series "
            f"{ct.series_uid} ({ct.pixel_spacing.tolist()})"
        )


def _frame_slice(frame: Dataset, pos: np.ndarray | None, ct: Volume, where: str) -> int:
    """Index of the CT slice a SEG frame lies on: by source SOP instance, else by position."""
    source = _first(_first(frame, "DerivationImageSequence") or Dataset(), "SourceImageSequence")
    if source is not None and "ReferencedSOPInstanceUID" in source:
        sop = str(source.ReferencedSOPInstanceUID)
        if sop not in ct.sop_uids:
            raise DataError(
                f"{where}: SEG frame references instance {sop}, not in CT series {ct.series_uid}"
            )
        return ct.sop_uids.index(sop)
    if pos is None:
        raise DataError(f"{where}: SEG frame has neither a source image nor a position")
    normal = np.cross(ct.orientation[:3], ct.orientation[3:])
    return int(np.argmin(np.abs(ct.positions @ normal - pos @ normal)))


def _place(seg: Dataset, frame: Dataset, ct: Volume, where: str) -> int:
    """The CT slice of a SEG frame, after checking that the frame lies exactly on it."""
    _check_frame(seg, frame, ct, where)
    pos = _frame_attr(seg, frame, "PlanePositionSequence", "ImagePositionPatient")
    pos = np.asarray(pos, float) if pos is not None else None
    k = _frame_slice(frame, pos, ct, where)
    if pos is not None and np.max(np.abs(pos - ct.positions[k])) > _POSITION_TOL * min(ct.spacing):
        raise DataError(
            f"{where}: SEG frame position {pos.tolist()} does not match CT series "
            f"{ct.series_uid} slice {k} at {ct.positions[k].tolist()}"
        )
    return k


def _frames(seg: Dataset, path: Path) -> np.ndarray:
    """All SEG frames as (frames, rows, columns) booleans (FRACTIONAL thresholded at 50%)."""
    pixels = pixel_array(seg, path).reshape(-1, int(seg.Rows), int(seg.Columns))
    if str(seg.get("SegmentationType", "BINARY")) == "FRACTIONAL":
        return pixels > int(seg.get("MaximumFractionalValue", 255)) / 2
    return pixels > 0


def segment_mask(seg: Dataset, path: Path, label: str, ct: Volume) -> np.ndarray:
    """uint8 mask of segment `label` of a SEG (read from `path`) on the grid and order of `ct`."""
    where = f"{path} (SEG series {seg.get('SeriesInstanceUID')})"
    number = find_segment(seg, label, where)
    if (int(seg.Rows), int(seg.Columns)) != ct.hu.shape[1::-1]:
        raise DataError(
            f"{where}: SEG frames are {seg.Rows}x{seg.Columns}, CT series {ct.series_uid} "
            f"slices are {ct.hu.shape[1]}x{ct.hu.shape[0]}"
        )
    per_frame = seg.get("PerFrameFunctionalGroupsSequence") or []
    frames = _frames(seg, path)
    if len(per_frame) != len(frames):
        raise DataError(f"{where}: {len(frames)} frames but {len(per_frame)} per-frame groups")
    mask = np.zeros(ct.hu.shape, dtype=np.uint8)
    for frame, pixels in zip(per_frame, frames, strict=True):
        ident = _first(frame, "SegmentIdentificationSequence")
        if ident is None or int(ident.ReferencedSegmentNumber) != number:
            continue
        mask[:, :, _place(seg, frame, ct, where)] |= pixels.T  # (rows, cols) -> (cols, rows)
    return mask


def has_segment(seg: Dataset, label: str) -> bool:
    """Whether a SEG has a segment whose SegmentLabel or SegmentDescription is `label`."""
    return any(
        label in (item.get("SegmentLabel"), item.get("SegmentDescription"))
        for item in seg.get("SegmentSequence", [])
    )
