"""Synthetic NSCLC-Radiomics: small chest-like CTs with a DICOM SEG, deterministic by seed.

Writes what `accelpipe.datasets.nsclc.check_raw` and `prepare` read, in the raw layout of the
download (`accelpipe.datasets.nsclc_layout`):
`<raw_dir>/NSCLC-Radiomics/<PatientID>/<SeriesInstanceUID>/*.dcm`, per patient one CT series
(one CT Image Storage file per slice, `1-001.dcm`..., real CT tags, Hounsfield values: air,
body, spine, lungs, a tumour) and one BINARY highdicom SEG series (segments "Lungs-Total" and
"GTV-1"). It is the default source, so the swinunetr workload and the tests run without the
TCIA download.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path
from accelpipe.datasets.nsclc_layout import COLLECTION

_CT_STORAGE = "1.2.840.10008.5.1.4.1.1.2"
_MIN_SHAPE = (16, 16, 4)


@dataclass(frozen=True)
class Geometry:
    """A synthetic CT grid: (rows, columns, slices) and voxel size in mm."""

    shape: tuple[int, int, int]
    pixel_spacing: float
    slice_thickness: float

    def mm(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Centred LPS coordinates (z, y, x) of the voxel grid, broadcastable (S, R, C)."""
        rows, cols, slices = self.shape
        z = (np.arange(slices) - (slices - 1) / 2) * self.slice_thickness
        y = (np.arange(rows) - (rows - 1) / 2) * self.pixel_spacing
        x = (np.arange(cols) - (cols - 1) / 2) * self.pixel_spacing
        return z[:, None, None], y[None, :, None], x[None, None, :]


def _inside(
    coords: Sequence[np.ndarray], centre: Sequence[float], radii: Sequence[float]
) -> np.ndarray:
    """Boolean ellipse / ellipsoid (centre and radii in mm) on broadcastable coordinates."""
    terms = (((a - c) / r) ** 2 for a, c, r in zip(coords, centre, radii, strict=True))
    # an array: coords is never empty (sum()'s int start of 0 hides that from the types)
    d = cast(np.ndarray, sum(terms))
    return d <= 1.0


def phantom(rng: np.random.Generator, geo: Geometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A chest-like CT in HU (slices, rows, columns) int16, with tumour and lungs masks.

    Air outside a body cylinder, soft tissue (~40 HU) inside, a dense spine behind, two lungs
    (~-800 HU) and one tumour (30..60 HU) inside a lung: the tumour is the only soft-tissue
    blob surrounded by lung, which is what makes it learnable from intensity.
    """
    z, y, x = geo.mm()
    rows, cols, slices = geo.shape
    half_x, half_y = cols * geo.pixel_spacing / 2, rows * geo.pixel_spacing / 2
    half_z = slices * geo.slice_thickness / 2
    jitter = rng.uniform(0.95, 1.05, 4)
    # Body and spine are cylinders (every slice); lungs and tumour are ellipsoids.
    body = _inside((y, x), (0, 0), (0.72 * half_y * jitter[0], 0.9 * half_x))
    spine = _inside((y, x), (0.5 * half_y, 0), (0.12 * half_x, 0.12 * half_x))
    lung_radii = (1.1 * half_z, 0.5 * half_y * jitter[1], 0.32 * half_x * jitter[2])
    side = (-1, 1)
    lungs = [
        _inside(
            (z, y, x), (0.05 * half_z * jitter[3], -0.08 * half_y, s * 0.42 * half_x), lung_radii
        )
        for s in side
    ]
    # Tumour: radius 9-13% of the in-plane size, at least ~2.5 slices deep, inside one lung.
    k = int(rng.integers(2))
    r = rng.uniform(0.18, 0.26) * min(half_x, half_y)
    radii = (max(r, 2.5 * geo.slice_thickness), r * rng.uniform(0.85, 1.15), r)
    offset = rng.uniform(-1, 1, 3) * np.array([0.3, 0.3, 0.25]) * np.array(lung_radii)
    centre = np.array([0.0, -0.08 * half_y, side[k] * 0.42 * half_x]) + offset
    tumour = _inside((z, y, x), centre, radii) & lungs[k]
    lung = lungs[0] | lungs[1]

    hu = np.full((slices, rows, cols), -1000.0, dtype=np.float32)
    hu[np.broadcast_to(body, hu.shape)] = rng.uniform(30, 50)
    hu[np.broadcast_to(spine, hu.shape)] = rng.uniform(400, 700)
    hu[lung] = rng.uniform(-850, -780)
    hu[tumour] = rng.uniform(30, 60)
    hu += rng.normal(0, 20, hu.shape).astype(np.float32)
    return np.clip(np.rint(hu), -1024, 3071).astype(np.int16), tumour, lung & ~tumour


def _uid(*parts: object) -> str:
    """A deterministic UUID-derived UID (2.25.<uuid5>) so the same seed gives the same files."""
    name = "/".join(["accelpipe-nsclc", *map(str, parts)])
    return f"2.25.{uuid.uuid5(uuid.NAMESPACE_OID, name).int}"


def _ct_slices(patient: str, hu: np.ndarray, geo: Geometry, seed: int) -> list[Any]:
    """One CT Image Storage data set per slice; instance 1 is the top slice, as scanners do."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import UID, ExplicitVRLittleEndian

    slices, rows, cols = hu.shape
    study, series = _uid(seed, patient, "study"), _uid(seed, patient, "ct")
    frame_of_ref = _uid(seed, patient, "frame")
    x0 = -(cols - 1) / 2 * geo.pixel_spacing
    y0 = -(rows - 1) / 2 * geo.pixel_spacing
    out = []
    for k in range(slices):
        number = slices - k
        ds = Dataset()
        ds.file_meta = FileMetaDataset()
        ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds.file_meta.MediaStorageSOPClassUID = UID(_CT_STORAGE)
        ds.SOPClassUID = _CT_STORAGE
        ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = UID(_uid(seed, patient, k))
        ds.Modality, ds.Manufacturer = "CT", "accelpipe synthetic"
        ds.PatientID, ds.PatientName = patient, f"{patient}^"  # family name only
        ds.PatientBirthDate, ds.PatientSex = "", "O"
        ds.StudyInstanceUID, ds.SeriesInstanceUID = study, series
        ds.FrameOfReferenceUID, ds.PositionReferenceIndicator = frame_of_ref, ""
        ds.StudyID, ds.AccessionNumber, ds.ReferringPhysicianName = "1", "", ""
        ds.StudyDate = ds.SeriesDate = ds.ContentDate = "20080101"
        ds.StudyTime = ds.SeriesTime = ds.ContentTime = "120000"
        ds.SeriesNumber, ds.InstanceNumber = 1, number
        ds.ImageType = ["ORIGINAL", "PRIMARY", "AXIAL"]
        ds.ImagePositionPatient = [x0, y0, (k - (slices - 1) / 2) * geo.slice_thickness]
        ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        ds.PixelSpacing = [geo.pixel_spacing, geo.pixel_spacing]
        ds.SliceThickness = geo.slice_thickness
        ds.Rows, ds.Columns = rows, cols
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
        # Stored values are HU + 1024 (unsigned), undone by the rescale, as on many scanners.
        ds.RescaleIntercept, ds.RescaleSlope, ds.RescaleType = -1024, 1, "HU"
        ds.KVP = 120
        ds.PixelData = (hu[k].astype(np.int32) + 1024).astype("<u2").tobytes()
        out.append(ds)
    return out


def _segmentation(ct: list[Any], masks: dict[str, np.ndarray], patient: str, seed: int) -> Any:
    """A BINARY DICOM SEG (highdicom) over the CT, one segment per mask, in the given order."""
    import highdicom as hd
    from pydicom.sr.codedict import codes
    from pydicom.valuerep import DA, TM

    kinds = {
        "GTV-1": (codes.SCT.MorphologicallyAbnormalStructure, codes.SCT.Neoplasm),
        "Lungs-Total": (codes.SCT.Organ, codes.SCT.Lung),
    }
    descriptions = [
        hd.seg.SegmentDescription(
            segment_number=i + 1,
            segment_label=name,
            segmented_property_category=kinds[name][0],
            segmented_property_type=kinds[name][1],
            algorithm_type=hd.seg.SegmentAlgorithmTypeValues.MANUAL,
        )
        for i, name in enumerate(masks)
    ]
    # (slices, rows, columns, segments), slices in the order of `ct`.
    pixels = np.stack(list(masks.values()), axis=-1).astype(np.uint8)
    seg = hd.seg.Segmentation(
        source_images=ct,
        pixel_array=pixels,
        segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
        segment_descriptions=descriptions,
        series_instance_uid=_uid(seed, patient, "seg"),
        series_number=300,
        sop_instance_uid=_uid(seed, patient, "seg", 1),
        instance_number=1,
        manufacturer="accelpipe",
        manufacturer_model_name="synthetic",
        software_versions="1",
        device_serial_number="0",
        series_description="Segmentation",
    )
    # highdicom stamps the current time and fresh UIDs on these; fix them for same-seed files.
    seg.SeriesDate = seg.ContentDate = seg.InstanceCreationDate = DA("20080101")
    seg.SeriesTime = seg.ContentTime = seg.InstanceCreationTime = TM("120000")
    for item in seg.get("ContributingEquipmentSequence", []):
        item.ContributionDateTime = "20080101120000"
    dim_uid = _uid(seed, patient, "dimensions")
    seg.DimensionOrganizationSequence[0].DimensionOrganizationUID = dim_uid
    for item in seg.DimensionIndexSequence:
        item.DimensionOrganizationUID = dim_uid
    return seg


def _write_patient(root: Path, patient: str, geo: Geometry, seed: int, index: int) -> None:
    """CT series + SEG series of one synthetic patient under root/<PatientID>/."""
    hu, tumour, lungs = phantom(np.random.default_rng([seed, index]), geo)
    ct = _ct_slices(patient, hu, geo, seed)
    # Lungs-Total first: GTV-1 is segment 2, so selection must go by label, not number.
    seg = _segmentation(ct, {"Lungs-Total": lungs, "GTV-1": tumour}, patient, seed)
    ct_dir = root / patient / ct[0].SeriesInstanceUID
    ct_dir.mkdir(parents=True)
    for ds in ct:
        ds.save_as(ct_dir / f"1-{int(ds.InstanceNumber):03d}.dcm", enforce_file_format=True)
    seg_dir = root / patient / seg.SeriesInstanceUID
    seg_dir.mkdir()
    seg.save_as(seg_dir / "1-1.dcm", enforce_file_format=True)


def synthesize(
    raw_dir: str | Path,
    *,
    patients: int = 8,
    shape: Sequence[int] = (64, 64, 32),
    pixel_spacing: float = 1.0,
    slice_thickness: float = 3.0,
    seed: int = 0,
) -> Path:
    """Write synthetic patients (CT + SEG) as `<raw_dir>/NSCLC-Radiomics`; return that folder.

    `shape` is (rows, columns, slices). Deterministic by `seed`: patient i uses the generator
    seeded with (seed, i) and UIDs derived from (seed, patient). Built in a temporary sibling
    and renamed, so the folder is either complete or absent.
    """
    dims = tuple(int(s) for s in shape)
    spacing, thickness = float(pixel_spacing), float(slice_thickness)
    if patients < 1 or len(dims) != 3 or any(map(int.__lt__, dims, _MIN_SHAPE)):
        raise DataError(
            f"synthetic {COLLECTION}: need patients >= 1 and shape (rows, columns, slices) "
            f">= {list(_MIN_SHAPE)}, got patients={patients}, shape={list(shape)}"
        )
    geo = Geometry(dims, spacing, thickness)
    final = Path(raw_dir) / COLLECTION
    with atomic_path(final) as tmp, _quiet_highdicom():
        for i in range(patients):
            _write_patient(tmp, f"LUNG1-{i + 1:03d}", geo, seed, i)
    return final


@contextlib.contextmanager
def _quiet_highdicom() -> Iterator[None]:
    """highdicom logs every copied module at INFO and warns about harmless source details."""
    logger = logging.getLogger("highdicom")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        logger.setLevel(level)
