"""BraTS and other MSD tasks: synthetic data, raw check, dim-2 preprocessing, folds, NIfTI
variants (real files from nibabel's test data), failure modes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets import brats, brats_layout
from tests.helpers.nifti_variants import (
    HIPPOCAMPUS_LABELS,
    label_for,
    real,
    save,
    variant_task,
    write_task,
)

SMALL = (32, 32, 16)


def _write_task(task: Path, cases: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    """A raw MSD folder from hand-made (X, Y, Z, C) images and (X, Y, Z) labels."""
    for sub in ("imagesTr", "labelsTr", "imagesTs"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    training = []
    for name, (image, label) in cases.items():
        nib.save(nib.Nifti1Image(image, np.eye(4)), task / "imagesTr" / f"{name}.nii.gz")
        nib.save(nib.Nifti1Image(label, np.eye(4)), task / "labelsTr" / f"{name}.nii.gz")
        training.append(
            {"image": f"./imagesTr/{name}.nii.gz", "label": f"./labelsTr/{name}.nii.gz"}
        )
    meta = {
        "name": "BRATS",
        "modality": brats_layout.MODALITIES,
        "labels": brats_layout.LABELS,
        "numTraining": len(cases),
        "training": training,
        "test": [],
    }
    (task / "dataset.json").write_text(json.dumps(meta))
    return task


def _hand_case(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(10, 8, 6, 4) image, non-zero exactly on x 2:7, y 1:5, z 1:4; channel 3 constant there."""
    image = np.zeros((10, 8, 6, 4), dtype=np.float32)
    image[2:7, 1:5, 1:4, :3] = rng.uniform(1, 100, (5, 4, 3, 3))
    image[2:7, 1:5, 1:4, 3] = 5.0
    image[5, 3, 3, 2] = 1000.0  # a spike to find again in the output
    label = np.zeros((10, 8, 6), dtype=np.uint8)
    label[4, 2, 2] = 3
    label[3, 3, 1] = 1
    label[5, 1, 3] = 2
    return image, label


@pytest.fixture
def hand_task(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    image, label = _hand_case(rng)
    other = _hand_case(rng)
    task = _write_task(
        tmp_path / "raw" / brats_layout.TASK, {"BRATS_001": (image, label), "BRATS_002": other}
    )
    return task, image, label


def test_prepare_crop_zscore_pad_and_axis_order(hand_task, tmp_path):
    task, image, _ = hand_task
    out = brats.prepare(task, tmp_path / "prep", patch_size=(6, 3), n_folds=2)
    x, y = np.load(out / "BRATS_001_x.npy"), np.load(out / "BRATS_001_y.npy")
    assert x.dtype == np.float32 and y.dtype == np.uint8
    # Crop to (Z, Y, X) = (3, 4, 5); H=Y padded 4 -> 6 (1 each side); W=X cropped 5 -> 3 (from 1).
    assert x.shape == (4, 3, 6, 3) and y.shape == (1, 3, 6, 3)

    crop = image[2:7, 1:5, 1:4].transpose(3, 2, 1, 0).astype(np.float64)  # (C, Z, Y, X)
    mean = crop.mean(axis=(1, 2, 3), keepdims=True)
    std = crop.std(axis=(1, 2, 3), keepdims=True)
    z = np.where(std > 0, (crop - mean) / np.where(std > 0, std, 1), 0)
    # Before the pad/centre-crop, the z-scored crop is standard over the whole bounding box ...
    np.testing.assert_allclose(z[:3].mean(axis=(1, 2, 3)), 0, atol=1e-9)
    np.testing.assert_allclose(z[:3].std(axis=(1, 2, 3)), 1, atol=1e-9)
    # ... and the output holds exactly its window (stats NOT recomputed on the window).
    np.testing.assert_allclose(x[:, :, 1:5, :], z[:, :, :, 1:4], rtol=1e-5, atol=1e-5)
    window = crop[0, :, :, 1:4]  # stats over the centre-cropped window would differ
    assert not np.allclose(x[0, :, 1:5, :], (window - window.mean()) / window.std(), atol=1e-3)
    assert np.all(x[:, :, 0, :] == 0) and np.all(x[:, :, 5, :] == 0)  # zero padding rows
    assert np.all(x[3] == 0)  # constant channel: std 0 guarded, centred to 0
    assert np.all(np.isfinite(x))

    # A voxel at (x, y, z) lands at (c, z - 1, y - 1 + 1, x - 2 - 1).
    assert np.unravel_index(np.argmax(x[2]), x[2].shape) == (2, 3, 2)  # spike at (5, 3, 3)
    assert y[0, 1, 2, 1] == 3  # label 3 at (4, 2, 2)
    assert y[0, 0, 3, 0] == 1  # label 1 at (3, 3, 1)
    assert y[0, 2, 1, 2] == 2  # label 2 at (5, 1, 3)
    assert np.count_nonzero(y) == 3

    config = json.loads((out / "config.json").read_text())
    assert config == {
        "patch_size": [6, 3],
        "n_class": 4,
        "in_channels": 4,
        "labels": brats_layout.LABELS,
        "cases": ["BRATS_001", "BRATS_002"],
    }


def test_prepare_pads_symmetrically_when_larger_patch(hand_task, tmp_path):
    task = hand_task[0]
    out = brats.prepare(task, tmp_path / "prep", patch_size=(9, 8), n_folds=2)
    x = np.load(out / "BRATS_001_x.npy")
    assert x.shape == (4, 3, 9, 8)
    # H: 4 -> 9 pads 2 before, 3 after; W: 5 -> 8 pads 1 before, 2 after.
    nonzero = np.argwhere(np.any(x[:3] != 0, axis=(0, 1)))
    assert nonzero.min(axis=0).tolist() == [2, 1]
    assert nonzero.max(axis=0).tolist() == [5, 5]


def test_kfold_matches_hand_derived_sklearn_split():
    # RandomState(0).shuffle(arange(7)) -> [6, 2, 1, 3, 0, 5, 4]; chunks of 3, 2, 2; sorted.
    order = np.arange(7)
    np.random.RandomState(0).shuffle(order)
    assert order.tolist() == [6, 2, 1, 3, 0, 5, 4]
    folds = brats.kfold(7, 3, 0)
    assert [val for _, val in folds] == [[1, 2, 6], [0, 3], [4, 5]]
    assert folds[0][0] == [0, 3, 4, 5]
    # The reference's seed on 10 cases: permutation [0, 7, 3, 9, 6, 4, 1, 8, 5, 2].
    assert [val for _, val in brats.kfold(10, 5, 12345)] == [[0, 7], [3, 9], [4, 6], [1, 8], [2, 5]]


def test_make_folds_disjoint_and_cover():
    names = [f"BRATS_{i:03d}" for i in range(23, 0, -1)]  # unsorted on purpose
    folds = brats.make_folds(names, 5, 12345)
    assert folds["n_folds"] == 5 and folds["seed"] == 12345
    vals = [f["val"] for f in folds["folds"]]
    assert sorted(n for v in vals for n in v) == sorted(names)
    assert [len(v) for v in vals] == [5, 5, 5, 4, 4]
    for f in folds["folds"]:
        assert not set(f["train"]) & set(f["val"])
        assert sorted(f["train"] + f["val"]) == sorted(names)
    # Indices refer to the SORTED names.
    expected = brats.kfold(23, 5, 12345)[0][1]
    assert vals[0] == [sorted(names)[i] for i in expected]
    with pytest.raises(DataError, match="3 cases into 5 folds"):
        brats.make_folds(names[:3], 5, 0)


def _decoded(task: Path) -> dict[str, np.ndarray]:
    return {
        str(p.relative_to(task)): np.asanyarray(nib.load(p).dataobj)
        for p in sorted(task.rglob("*.nii.gz"))
    }


def test_synthesize_layout_deterministic_and_complete(tmp_path):
    task = brats.synthesize(tmp_path / "a", cases=3, shape=SMALL, seed=5)
    assert task == tmp_path / "a" / brats_layout.TASK
    meta = json.loads((task / "dataset.json").read_text())
    assert meta["modality"] == {"0": "FLAIR", "1": "T1w", "2": "t1gd", "3": "T2w"}
    assert meta["labels"]["3"] == "enhancing tumour" and meta["tensorImageSize"] == "4D"
    assert meta["numTraining"] == 3 and meta["numTest"] == 0 and meta["test"] == []
    assert meta["training"][0] == {
        "image": "./imagesTr/BRATS_001.nii.gz",
        "label": "./labelsTr/BRATS_001.nii.gz",
    }
    assert (task / "imagesTs").is_dir()
    entries = brats.check_raw(task)
    assert [e["case"] for e in entries] == ["BRATS_001", "BRATS_002", "BRATS_003"]

    arrays = _decoded(task)
    for e in entries:
        img = arrays[f"imagesTr/{e['case']}.nii.gz"]
        lab = arrays[f"labelsTr/{e['case']}.nii.gz"]
        assert img.shape == (*SMALL, 4) and img.dtype == np.float32
        assert lab.shape == SMALL and lab.dtype == np.uint8
        assert set(np.unique(lab)) == {0, 1, 2, 3}
        assert np.all(img[0] == 0) and np.all(img[:, :, -1] == 0)  # zero background margin
        assert np.all(lab[np.all(img == 0, axis=-1)] == 0)  # tumour only inside the brain

    same = _decoded(brats.synthesize(tmp_path / "b", cases=3, shape=SMALL, seed=5))
    other = _decoded(brats.synthesize(tmp_path / "c", cases=3, shape=SMALL, seed=6))
    assert same.keys() == arrays.keys()
    assert all(np.array_equal(arrays[k], same[k]) for k in arrays)
    assert not np.array_equal(
        arrays["imagesTr/BRATS_001.nii.gz"], other["imagesTr/BRATS_001.nii.gz"]
    )
    # Same seed -> byte-identical prepared arrays.
    pa = brats.prepare(task, tmp_path / "pa", patch_size=(32, 32), n_folds=3)
    pb = brats.prepare(
        tmp_path / "b" / brats_layout.TASK, tmp_path / "pb", patch_size=(32, 32), n_folds=3
    )
    for f in sorted(pa.glob("*.npy")):
        assert f.read_bytes() == (pb / f.name).read_bytes()


def test_synthetic_tumour_regions_differ_in_intensity(tmp_path):
    """The sub-regions are separable by intensities (what makes them learnable)."""
    task = brats.synthesize(tmp_path, cases=2, shape=(48, 48, 24), seed=1)
    out = brats.prepare(task, tmp_path / "prep", patch_size=(48, 48), n_folds=2)
    x, y = np.load(out / "BRATS_001_x.npy"), np.load(out / "BRATS_001_y.npy")[0]
    mean = {k: x[:, y == k].mean(axis=1) for k in range(4)}  # per channel
    flair, t1, t1gd, t2 = range(4)
    assert mean[1][flair] > mean[0][flair] + 0.5 and mean[1][t2] > mean[0][t2] + 0.3  # edema
    assert mean[3][t1gd] > mean[1][t1gd] + 0.5 and mean[3][t1gd] > mean[2][t1gd] + 0.5  # rim
    assert mean[2][t1] < mean[1][t1] and mean[2][t2] > mean[1][t2]  # core


def test_workers_2_matches_workers_1(tmp_path):
    task = brats.synthesize(tmp_path / "raw", cases=4, shape=SMALL, seed=2)
    one = brats.prepare(task, tmp_path / "w1", patch_size=(24, 20), n_folds=2, workers=1)
    two = brats.prepare(task, tmp_path / "w2", patch_size=(24, 20), n_folds=2, workers=2)
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir())
    assert len(names) == 2 * 4 + 2
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    folds = json.loads((one / "folds.json").read_text())
    assert folds == brats.make_folds([f"BRATS_00{i}" for i in range(1, 5)], 2, 12345)


@pytest.fixture
def synth_task(tmp_path: Path) -> Path:
    return brats.synthesize(tmp_path / "raw", cases=3, shape=SMALL, seed=3)


def _assert_untouched(out: Path, marker: str) -> None:
    assert (out / "marker.txt").read_text() == marker
    assert sorted(p.name for p in out.iterdir()) == ["marker.txt"]
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []  # no temp left


@pytest.mark.parametrize("workers", [1, 2])
def test_truncated_gzip_names_file_and_keeps_old_output(synth_task, tmp_path, workers):
    bad = synth_task / "imagesTr" / "BRATS_002.nii.gz"
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    out = tmp_path / "prep"
    out.mkdir()
    (out / "marker.txt").write_text("earlier run")
    with pytest.raises(DataError, match=r"BRATS_002\.nii\.gz.*truncated"):
        brats.prepare(synth_task, out, patch_size=(16, 16), n_folds=2, workers=workers)
    _assert_untouched(out, "earlier run")


def test_truncated_label_is_reported(synth_task, tmp_path):
    bad = synth_task / "labelsTr" / "BRATS_003.nii.gz"
    bad.write_bytes(bad.read_bytes()[:-9])
    with pytest.raises(DataError, match=r"labelsTr/BRATS_003\.nii\.gz"):
        brats.prepare(synth_task, tmp_path / "prep", patch_size=(16, 16), n_folds=2)
    assert not (tmp_path / "prep").exists()


def test_missing_label_names_case(synth_task, tmp_path):
    (synth_task / "labelsTr" / "BRATS_002.nii.gz").unlink()
    with pytest.raises(DataError, match="case BRATS_002 has no label"):
        brats.check_raw(synth_task)
    with pytest.raises(DataError, match="case BRATS_002 has no label"):
        brats.prepare(synth_task, tmp_path / "prep", n_folds=2)
    meta = json.loads((synth_task / "dataset.json").read_text())
    del meta["training"][0]["label"]
    (synth_task / "dataset.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="case BRATS_001 has no label"):
        brats.check_raw(synth_task)


def test_missing_image_and_dataset_json(synth_task):
    (synth_task / "imagesTr" / "BRATS_003.nii.gz").unlink()
    with pytest.raises(DataError, match=r"imagesTr/BRATS_003\.nii\.gz"):
        brats.check_raw(synth_task)
    (synth_task / "dataset.json").unlink()
    with pytest.raises(DataError, match=r"dataset\.json"):
        brats.check_raw(synth_task)
    (synth_task / "dataset.json").write_text("{not json")
    with pytest.raises(DataError, match=r"dataset\.json"):
        brats.check_raw(synth_task)


def test_shape_mismatch_names_case(tmp_path):
    image, label = _hand_case(np.random.default_rng(0))
    task = _write_task(
        tmp_path / brats_layout.TASK,
        {"BRATS_001": (image, label), "BRATS_002": (image, label[:, :, :5])},
    )
    out = tmp_path / "prep"
    out.mkdir()
    (out / "marker.txt").write_text("old")
    with pytest.raises(DataError, match="case BRATS_002: image shape"):
        brats.prepare(task, out, patch_size=(4, 4), n_folds=2)
    _assert_untouched(out, "old")


def test_fewer_cases_than_folds(synth_task, tmp_path):
    with pytest.raises(DataError, match="3 cases is fewer than n_folds=5"):
        brats.prepare(synth_task, tmp_path / "prep", n_folds=5)
    assert not (tmp_path / "prep").exists()


def test_label_out_of_range(tmp_path):
    image, label = _hand_case(np.random.default_rng(0))
    bad = label.copy()
    bad[2, 2, 2] = 7
    task = _write_task(
        tmp_path / brats_layout.TASK, {"BRATS_001": (image, label), "BRATS_002": (image, bad)}
    )
    with pytest.raises(DataError, match=r"BRATS_002\.nii\.gz.*outside 0\.\.3"):
        brats.prepare(task, tmp_path / "prep", patch_size=(4, 4), n_folds=2)


def test_channel_count_must_match_dataset_json(tmp_path):
    image, label = _hand_case(np.random.default_rng(0))
    task = _write_task(
        tmp_path / brats_layout.TASK,
        {"BRATS_001": (image, label), "BRATS_002": (image[..., :3], label)},
    )
    with pytest.raises(DataError, match=r"BRATS_002\.nii\.gz: case BRATS_002 has 3 channels"):
        brats.prepare(task, tmp_path / "prep", patch_size=(4, 4), n_folds=2)


# --------------------------------------------------------------------------------------------
# Other MSD tasks from real NIfTI files of every variant (nibabel's test data)
# --------------------------------------------------------------------------------------------


def _reference_case(image_path: Path, label_path: Path, patch: tuple[int, int]):
    """prepare's output for one case, computed independently in float64 from nibabel's arrays."""
    image = nib.load(image_path).get_fdata()
    image = image[..., None] if image.ndim == 3 else image
    image = image.transpose(3, 2, 1, 0)  # (C, Z, Y, X)
    label = np.rint(nib.load(label_path).get_fdata()).reshape(image.shape[:0:-1]).T
    hit = np.argwhere(np.any(image != 0, axis=0))
    box = tuple(slice(lo, hi + 1) for lo, hi in zip(hit.min(0), hit.max(0), strict=True))
    crop, lab = image[(slice(None), *box)], label[box]
    mean = crop.mean(axis=(1, 2, 3), keepdims=True)
    std = crop.std(axis=(1, 2, 3), keepdims=True)
    crop = (crop - mean) / np.where(std > 1e-8, std, 1)
    x = np.zeros((crop.shape[0], crop.shape[1], *patch))
    y = np.zeros((1, crop.shape[1], *patch), dtype=np.uint8)
    src, dst = [], []
    for size, target in zip(crop.shape[2:], patch, strict=True):
        if size <= target:
            start = (target - size) // 2
            src.append(slice(0, size))
            dst.append(slice(start, start + size))
        else:
            start = (size - target) // 2
            src.append(slice(start, start + target))
            dst.append(slice(0, target))
    x[:, :, dst[0], dst[1]] = crop[:, :, src[0], src[1]]
    y[0, :, dst[0], dst[1]] = lab[:, src[0], src[1]]
    return x, y


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("kind", ["3d", "4d"])
def test_prepare_any_msd_task_of_real_nifti_variants(tmp_path, kind, workers):
    task = tmp_path / "Task04_Variants"
    cases = variant_task(task, kind)
    out = brats.prepare(task, tmp_path / "prep", patch_size=(32, 24), n_folds=2, workers=workers)
    config = json.loads((out / "config.json").read_text())
    channels = 1 if kind == "3d" else 2
    assert config == {
        "patch_size": [32, 24],
        "n_class": 3,
        "in_channels": channels,
        "labels": HIPPOCAMPUS_LABELS,
        "cases": sorted(cases),
    }
    for case, (image, label) in cases.items():
        x, y = np.load(out / f"{case}_x.npy"), np.load(out / f"{case}_y.npy")
        ref_x, ref_y = _reference_case(image, label, (32, 24))
        assert x.dtype == np.float32 and x.shape == ref_x.shape and x.shape[0] == channels, case
        np.testing.assert_allclose(x, ref_x, rtol=1e-4, atol=1e-4, err_msg=case)
        np.testing.assert_array_equal(y, ref_y, err_msg=case)
        assert set(np.unique(y)) <= {0, 1, 2}


def test_nifti2_image_prepares(tmp_path):
    """The report: a NIfTI-2 file in imagesTr stopped prepare with HeaderDataError."""
    task = tmp_path / brats_layout.TASK
    (task / "imagesTr").mkdir(parents=True)
    image = shutil.copy(real("example_nifti2.nii.gz"), task / "imagesTr" / "n2.nii.gz")
    label = save(task / "labelsTr" / "n2.nii.gz", label_for((32, 20, 12), 4))
    other = save(task / "imagesTr" / "n1.nii.gz", nib.load(image).get_fdata(), scaled=True)
    write_task(
        task,
        {"n2": (Path(image), label), "n1": (other, label)},
        modality={"0": "a", "1": "b"},
        labels=brats_layout.LABELS,
    )
    out = brats.prepare(task, tmp_path / "prep", patch_size=(16, 16), n_folds=2)
    assert np.load(out / "n2_x.npy").shape == (2, 12, 16, 16)


@pytest.mark.parametrize("workers", [1, 2])
def test_unreadable_image_is_one_dataerror_naming_it(tmp_path, workers):
    task = tmp_path / "Task04_Variants"
    cases = variant_task(task, "3d")
    bad = cases["anat_n2"][0]
    data = bytearray(bad.read_bytes())
    data[4:12] = b"n+3\0\r\n\x1a\n"  # a NIfTI-2 header with a wrong magic
    bad.write_bytes(bytes(data))
    out = tmp_path / "prep"
    out.mkdir()
    (out / "marker.txt").write_text("earlier run")
    with pytest.raises(DataError, match=re.escape(str(bad))):
        brats.prepare(task, out, patch_size=(16, 16), n_folds=2, workers=workers)
    _assert_untouched(out, "earlier run")


def test_image_with_nan_voxels_is_named(tmp_path):
    task = tmp_path / "Task04_Variants"
    variant_task(task, "3d")
    nan_image = real("resampled_anat_moved.nii")  # SPM output: NaN outside the brain
    save(task / "labelsTr" / "nan.nii.gz", label_for(nib.load(nan_image).shape))
    shutil.copy(nan_image, task / "imagesTr" / "nan.nii")
    meta = json.loads((task / "dataset.json").read_text())
    meta["training"].append({"image": "./imagesTr/nan.nii", "label": "./labelsTr/nan.nii.gz"})
    (task / "dataset.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"imagesTr/nan\.nii: case nan has NaN"):
        brats.prepare(task, tmp_path / "prep", patch_size=(16, 16), n_folds=2)


def test_label_shape_mismatch_names_both_files(tmp_path):
    task = tmp_path / "Task04_Variants"
    cases = variant_task(task, "4d")
    image, label = cases["nifti2"]
    save(label, label_for((32, 20, 11)).astype(np.int16), nifti2=True)
    with pytest.raises(DataError, match="case nifti2: image shape") as err:
        brats.prepare(task, tmp_path / "prep", patch_size=(16, 16), n_folds=2)
    assert str(image) in str(err.value) and str(label) in str(err.value)


def test_images_of_unusable_dimensions_are_named(tmp_path):
    task = tmp_path / "Task04_Variants"
    cases = variant_task(task, "3d")
    image, label = cases["standard_u8"]
    save(image, np.ones((4, 5), np.uint8))  # 2D
    with pytest.raises(DataError, match=rf"{re.escape(str(image))}: image of shape \(4, 5\)"):
        brats.prepare(task, tmp_path / "prep", patch_size=(16, 16), n_folds=2)
    save(image, np.ones((4, 5, 7), np.uint8))
    save(label, np.zeros((4, 5, 7, 2), np.uint8))  # two label maps in one file
    with pytest.raises(DataError, match=rf"{re.escape(str(label))}: label map of shape"):
        brats.prepare(task, tmp_path / "prep", patch_size=(16, 16), n_folds=2)


def test_vector_image_x_y_z_1_c_prepares(tmp_path):
    """NIfTI stores vector images as (X, Y, Z, 1, C) (dim[4] = time = 1, dim[5] = components)."""
    rng = np.random.default_rng(3)
    image, label = _hand_case(rng)
    vector = image[:, :, :, None, :]
    task = _write_task(
        tmp_path / brats_layout.TASK, {"BRATS_001": (vector, label), "BRATS_002": (image, label)}
    )
    out = brats.prepare(task, tmp_path / "prep", patch_size=(6, 3), n_folds=2)
    a, b = np.load(out / "BRATS_001_x.npy"), np.load(out / "BRATS_002_x.npy")
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "labels",
    [{"1": "a", "2": "b"}, {"0": "bg", "x": "a"}, {"0": "bg"}, ["background", "a"]],
    ids=["no-zero", "not-int", "one-label", "list"],
)
def test_malformed_labels_in_dataset_json_are_named(synth_task, labels):
    meta = json.loads((synth_task / "dataset.json").read_text())
    meta["labels"] = labels
    (synth_task / "dataset.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"dataset\.json: 'labels'"):
        brats.check_raw(synth_task)


def test_dataset_meta_orders_labels_by_value(synth_task):
    meta = json.loads((synth_task / "dataset.json").read_text())
    meta["labels"] = {"2": "right", "0": "background", "1": "left hippocampus"}
    meta["modality"] = {"0": "MRI"}
    (synth_task / "dataset.json").write_text(json.dumps(meta))
    labels, channels = brats.dataset_meta(synth_task)
    assert list(labels.items()) == list(HIPPOCAMPUS_LABELS.items()) and channels == 1
