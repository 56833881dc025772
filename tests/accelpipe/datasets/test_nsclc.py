"""NSCLC-Radiomics: raw check, synthetic and path: sources, preparation to NIfTI, failure modes.

What the synthetic source writes is tested in test_nsclc_synthetic.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
import pytest

from accelpipe import datasets
from accelpipe.core.errors import DataError
from accelpipe.datasets import nsclc
from accelpipe.datasets.nsclc_layout import COLLECTION
from accelpipe.datasets.nsclc_synthetic import Geometry, phantom
from accelpipe.datasets.sources import make_raw
from tests.helpers.dataset_config import run_raw
from tests.helpers.nsclc_raw import SHAPE, SYNTH, series_dir, synth_tree

PREPARE = {"prepare": {"label": "GTV-1", "val_fraction": 0.2, "split_seed": 0}}


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic raw tree shared by read-only tests (copied by tests that damage it)."""
    return synth_tree(tmp_path_factory.mktemp("raw"))


@pytest.fixture
def raw_copy(synth_root: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(synth_root, tmp_path / "raw" / COLLECTION))


# --------------------------------------------------------------------------------- prepare


@pytest.fixture(scope="module")
def prepared(synth_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nsclc.prepare(synth_root, tmp_path_factory.mktemp("prep") / "nifti")


def test_prepared_layout_and_datalist(prepared: Path) -> None:
    names = ["LUNG1-001", "LUNG1-002", "LUNG1-003"]
    assert sorted(p.name for p in prepared.iterdir()) == [
        "config.json",
        "datalist.json",
        "images",
        "labels",
    ]
    for sub in ("images", "labels"):
        assert sorted(p.name for p in (prepared / sub).iterdir()) == [f"{n}.nii.gz" for n in names]
    datalist = json.loads((prepared / "datalist.json").read_text())
    assert datalist["label"] == "GTV-1"
    entries = datalist["training"] + datalist["validation"]
    assert len(datalist["validation"]) == 1 and sorted(e["patient"] for e in entries) == names
    assert entries[0] == {
        "image": f"images/{entries[0]['patient']}.nii.gz",
        "label": f"labels/{entries[0]['patient']}.nii.gz",
        "patient": entries[0]["patient"],
    }
    config = json.loads((prepared / "config.json").read_text())
    assert (config["label"], config["patients"], config["training"], config["validation"]) == (
        "GTV-1",
        3,
        2,
        1,
    )
    assert config["spacing"]["median"] == [1.5, 1.5, 3.0]
    assert config["shape"] == {"min": [28, 24, 8], "max": [28, 24, 8]}
    assert all(c["label_voxels"] > 0 for c in config["cases"])


def test_image_and_label_align_on_the_tumour(prepared: Path) -> None:
    geo = Geometry(SHAPE, 1.5, 3.0)
    for i in range(3):
        image = nib.load(prepared / "images" / f"LUNG1-00{i + 1}.nii.gz")
        label = nib.load(prepared / "labels" / f"LUNG1-00{i + 1}.nii.gz")
        assert image.shape == label.shape == (28, 24, 8)  # (columns, rows, slices)
        np.testing.assert_array_equal(image.affine, label.affine)
        assert image.get_data_dtype() == np.int16 and label.get_data_dtype() == np.uint8
        hu, tumour, _ = phantom(np.random.default_rng([0, i]), geo)
        x, y = np.asarray(image.dataobj), np.asarray(label.dataobj)
        np.testing.assert_array_equal(x, hu.transpose(2, 1, 0))
        np.testing.assert_array_equal(y, tumour.transpose(2, 1, 0))
        assert x[y == 1].mean() > 0 > x[y == 0].mean()  # the mask sits on dense tissue


def test_nifti_orientation_matches_dicom_positions(synth_root: Path, prepared: Path) -> None:
    image = nib.load(prepared / "images" / "LUNG1-001.nii.gz")
    assert nib.aff2axcodes(image.affine) == ("L", "P", "S")  # DICOM LPS axes, RAS-signed affine
    assert image.header["sform_code"] == image.header["qform_code"] == 1
    files = sorted(series_dir(synth_root, "LUNG1-001", "CT").iterdir())
    top, bottom = (pydicom.dcmread(f) for f in (files[0], files[-1]))  # instance 1 is on top
    x0, y0, z0 = (float(v) for v in bottom.ImagePositionPatient)
    np.testing.assert_allclose(image.affine @ [0, 0, 0, 1], [-x0, -y0, z0, 1])
    # Column index 27 is 27 * 1.5 mm further to the patient's left (LPS +x, RAS -x).
    np.testing.assert_allclose(image.affine @ [27, 23, 7, 1], [-x0 - 40.5, -y0 - 34.5, z0 + 21, 1])
    x = np.asarray(image.dataobj)
    assert x[5, 7, 7] == int(top.pixel_array[7, 5]) - 1024  # (row 7, column 5) of the top slice


def test_workers_give_same_output(synth_root: Path, prepared: Path, tmp_path: Path) -> None:
    two = nsclc.prepare(synth_root, tmp_path / "w2", workers=2)
    for rel in ("datalist.json", "config.json"):
        assert (two / rel).read_text() == (prepared / rel).read_text()
    for path in sorted(prepared.glob("*/*.nii.gz")):
        other = nib.load(two / path.relative_to(prepared))
        np.testing.assert_array_equal(np.asarray(other.dataobj), np.asarray(nib.load(path).dataobj))


def test_split_is_seeded_and_keeps_one_validation_case() -> None:
    names = [f"P{i}" for i in range(10)]
    train, val = nsclc.split(names, 0.2, 0)
    assert len(val) == 2 and sorted(train + val) == names
    assert nsclc.split(list(reversed(names)), 0.2, 0) == (train, val)
    assert nsclc.split(names, 0.2, 1) != (train, val)
    assert len(nsclc.split(names[:2], 0.0, 0)[1]) == 1
    assert len(nsclc.split(names[:2], 0.9, 0)[0]) == 1
    with pytest.raises(DataError, match="at least 2 patients"):
        nsclc.split(names[:1], 0.2, 0)


def test_label_is_chosen_by_name(synth_root: Path, tmp_path: Path) -> None:
    out = nsclc.prepare(synth_root, tmp_path / "lungs", label="Lungs-Total")
    geo = Geometry(SHAPE, 1.5, 3.0)
    _, _, lungs = phantom(np.random.default_rng([0, 1]), geo)
    label = np.asarray(nib.load(out / "labels" / "LUNG1-002.nii.gz").dataobj)
    np.testing.assert_array_equal(label, lungs.transpose(2, 1, 0))
    assert json.loads((out / "datalist.json").read_text())["label"] == "Lungs-Total"


def test_nbia_retriever_layout_is_found(raw_copy: Path, tmp_path: Path) -> None:
    # <PatientID>/<study>/<series-description-uid>/: series found by headers, not folder names.
    for folder in sorted(raw_copy.glob("*/*")):
        folder.rename(folder.parent / f"x-{folder.name[-6:]}")
        deeper = folder.parent / "01-01-2008-NA-study" / f"x-{folder.name[-6:]}"
        deeper.parent.mkdir(exist_ok=True)
        (folder.parent / f"x-{folder.name[-6:]}").rename(deeper)
    out = nsclc.prepare(raw_copy, tmp_path / "out")
    assert len(list((out / "labels").iterdir())) == 3


# --------------------------------------------------------------------------------- failures


def _assert_untouched(out: Path) -> None:
    assert sorted(p.name for p in out.iterdir()) == ["marker.txt"]
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []


@pytest.fixture
def old_out(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "marker.txt").write_text("old")
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_missing_ct_series(raw_copy: Path, old_out: Path, workers: int) -> None:
    ct_dir = series_dir(raw_copy, "LUNG1-002", "CT")
    seg_dir = series_dir(raw_copy, "LUNG1-002", "SEG")
    shutil.rmtree(ct_dir)
    with pytest.raises(DataError) as err:
        nsclc.prepare(raw_copy, old_out, workers=workers)
    assert f"SEG series {seg_dir.name} references image series {ct_dir.name}" in str(err.value)
    _assert_untouched(old_out)


@pytest.mark.parametrize("workers", [1, 2])
def test_truncated_ct_slice(raw_copy: Path, old_out: Path, workers: int) -> None:
    bad = sorted(series_dir(raw_copy, "LUNG1-003", "CT").iterdir())[4]
    bad.write_bytes(bad.read_bytes()[:-100])
    with pytest.raises(DataError, match=f"{bad}: unreadable or truncated DICOM file"):
        nsclc.prepare(raw_copy, old_out, workers=workers)
    _assert_untouched(old_out)


def test_unreadable_seg_header(raw_copy: Path, old_out: Path) -> None:
    bad = next(series_dir(raw_copy, "LUNG1-001", "SEG").iterdir())
    bad.write_bytes(b"not a dicom file")
    with pytest.raises(DataError, match=f"{bad}: unreadable or truncated DICOM file"):
        nsclc.prepare(raw_copy, old_out)
    _assert_untouched(old_out)


def test_geometry_mismatch_names_series(raw_copy: Path, old_out: Path) -> None:
    seg_file = next(series_dir(raw_copy, "LUNG1-001", "SEG").iterdir())
    seg = pydicom.dcmread(seg_file)
    seg.SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0].PixelSpacing = [0.5, 0.5]
    seg.save_as(seg_file)
    with pytest.raises(DataError, match=r"pixel spacing .* differs from CT series") as err:
        nsclc.prepare(raw_copy, old_out)
    assert seg.SeriesInstanceUID in str(err.value) and str(seg_file) in str(err.value)
    _assert_untouched(old_out)


def test_missing_label_lists_labels(synth_root: Path, old_out: Path) -> None:
    with pytest.raises(
        DataError, match=r"no segment labelled 'Heart' \(it has: GTV-1, Lungs-Total\)"
    ):
        nsclc.prepare(synth_root, old_out, label="Heart")
    _assert_untouched(old_out)


def test_empty_or_missing_raw_tree(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no DICOM SEG series found"):
        nsclc.prepare(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(DataError, match="raw NSCLC-Radiomics folder not found"):
        nsclc.prepare(tmp_path / "nothing", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unknown_variant(synth_root: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no prepared variant '3d' \(known: nifti\)"):
        nsclc.prepare_variant("3d", synth_root.parent, tmp_path / "out", PREPARE, 1)


# --------------------------------------------------------------------------------- make_raw


def test_registered_dataset() -> None:
    assert datasets.get("nsclc") is nsclc


def test_make_raw_synthetic_then_prepare_variant(tmp_path: Path) -> None:
    out = tmp_path / "raw"
    # 2 small patients, below the schema's minimums: the block as the stage would get it
    cfg = {"source": "synthetic", "synthetic": {**SYNTH, "patients": 2, "seed": 4}}
    facts = make_raw(nsclc.SOURCES, cfg, out, tmp_path / "downloads")
    assert facts == {"source": "synthetic", "patients": 2}
    assert sorted(p.name for p in out.iterdir()) == [COLLECTION]
    prep = nsclc.prepare_variant("nifti", out, tmp_path / "prep", PREPARE, workers=1)
    assert len(json.loads((prep / "datalist.json").read_text())["training"]) == 1


@pytest.mark.parametrize("container", [True, False])
def test_make_raw_path_links_existing_copy(synth_root: Path, tmp_path: Path, container: bool):
    location = synth_root.parent if container else synth_root
    facts = run_raw("nsclc", {"source": f"path:{location}"}, tmp_path / "raw", tmp_path / "dl")
    assert facts == {"source": "path", "patients": 3}
    link = tmp_path / "raw" / COLLECTION
    assert link.is_symlink() and link.resolve() == synth_root.resolve()


def test_make_raw_path_errors(raw_copy: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=f"{tmp_path / 'nope'}: dataset path"):
        run_raw("nsclc", {"source": f"path:{tmp_path / 'nope'}"}, tmp_path / "r1", tmp_path)
    for patient in ("LUNG1-001", "LUNG1-002", "LUNG1-003"):
        shutil.rmtree(series_dir(raw_copy, patient, "SEG"))
    with pytest.raises(DataError, match=f"{raw_copy}: no DICOM SEG series found"):
        run_raw("nsclc", {"source": f"path:{raw_copy}"}, tmp_path / "r2", tmp_path)
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()
