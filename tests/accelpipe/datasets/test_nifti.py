"""read_nifti: every NIfTI variant nibabel reads, the fast path where it applies, one DataError
naming the file for anything unreadable; gunzip."""

from __future__ import annotations

import gzip
import itertools
import re
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets import nifti
from accelpipe.datasets.nifti import gunzip, read_nifti
from tests.helpers.nifti_variants import real, save

# Real files of nibabel's test data: NIfTI-1 and -2, 3D and 4D, .nii and .nii.gz, big- and
# little-endian, int16/uint8/float32, scaled (functional.nii), NaNs (resampled_anat_moved.nii).
REAL = (
    "anatomical.nii",
    "example4d.nii.gz",
    "example_nifti2.nii.gz",
    "functional.nii",
    "reoriented_anat_moved.nii",
    "resampled_anat_moved.nii",
    "standard.nii.gz",
)
# (nifti2, big_endian, scaled, suffix): every combination.
VARIANTS = list(itertools.product((False, True), (False, True), (False, True), (".nii", ".nii.gz")))


def _variant_id(v: tuple) -> str:
    nifti2, big, scaled, suffix = v
    return (
        f"nifti{2 if nifti2 else 1}-{'be' if big else 'le'}-{'scaled' if scaled else 'raw'}{suffix}"
    )


def _anatomical() -> np.ndarray:
    return np.asanyarray(nib.load(real("anatomical.nii")).dataobj)


def _as_nibabel(path: Path) -> np.ndarray:
    return nib.load(path).get_fdata()


@pytest.mark.parametrize("name", REAL)
def test_real_nibabel_files_read_as_nibabel_reads_them(name: str) -> None:
    arr = read_nifti(real(name))
    ref = _as_nibabel(real(name))
    assert arr.shape == ref.shape
    np.testing.assert_allclose(arr, ref, rtol=1e-6, equal_nan=True)


def test_nifti2_is_read_not_refused() -> None:
    """The reported bug: the fast reader parsed every header as NIfTI-1 (data code 0)."""
    arr = read_nifti(real("example_nifti2.nii.gz"))
    assert arr.shape == (32, 20, 12, 2) and arr.dtype == np.int16


def test_scaled_file_applies_slope_and_intercept() -> None:
    proxy = nib.load(real("functional.nii")).dataobj
    assert (proxy.slope, proxy.inter) != (1.0, 0.0)
    arr = read_nifti(real("functional.nii"))
    assert arr.dtype.kind == "f"
    np.testing.assert_allclose(arr, np.asanyarray(proxy), rtol=1e-6)


@pytest.mark.parametrize("variant", VARIANTS, ids=_variant_id)
def test_every_variant_reads_on_the_fast_path(variant, tmp_path, monkeypatch) -> None:
    nifti2, big, scaled, suffix = variant
    data = _anatomical()
    path = save(tmp_path / f"image{suffix}", data, nifti2=nifti2, big_endian=big, scaled=scaled)
    ref = _as_nibabel(path)

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("single-file NIfTI must not go through nibabel.load")

    monkeypatch.setattr(nifti.nib, "load", no_load)
    arr = read_nifti(path)
    assert arr.shape == data.shape
    np.testing.assert_allclose(arr, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())
    if not scaled:  # stored dtype, a view on the decompressed bytes (no copy)
        assert arr.dtype == data.dtype.newbyteorder(">" if big else "<")
        assert not arr.flags.owndata


@pytest.mark.parametrize(
    "image_class", [nib.Nifti1Pair, nib.Nifti2Pair, nib.AnalyzeImage], ids=lambda c: c.__name__
)
def test_pairs_and_analyze_go_through_nibabel(image_class, tmp_path) -> None:
    data = _anatomical()
    path = tmp_path / "image.hdr"
    nib.save(image_class(data, np.eye(4)), path)
    np.testing.assert_array_equal(read_nifti(path), data)


def test_gzip_detected_by_content_not_name(tmp_path) -> None:
    plain = tmp_path / "image.nii.gz"  # mislabelled: not compressed
    plain.write_bytes(gzip.decompress(real("standard.nii.gz").read_bytes()))
    np.testing.assert_array_equal(read_nifti(plain), _as_nibabel(real("standard.nii.gz")))


def _truncated_gz(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _truncated_nii(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _wrong_magic(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[344:348] = b"xyz\0"
    path.write_bytes(bytes(data))


def _corrupt_deflate(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    path.write_bytes(bytes(data))


def _bad_datatype(path: Path) -> None:  # the header's datatype code 0 ("unknown")
    data = bytearray(path.read_bytes())
    data[70:72] = (0).to_bytes(2, "little")
    path.write_bytes(bytes(data))


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not an image at all" * 40)


def _empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.parametrize(
    ("suffix", "damage", "needle"),
    [
        (".nii.gz", _truncated_gz, "truncated"),
        (".nii", _truncated_nii, "shorter than its header"),
        (".nii", _wrong_magic, ""),
        (".nii.gz", _corrupt_deflate, ""),
        (".nii", _bad_datatype, "data code 0"),
        (".nii.gz", _garbage, ""),
        (".nii", _empty, ""),
    ],
    ids=[
        "truncated-gz",
        "truncated-nii",
        "wrong-magic",
        "corrupt-deflate",
        "bad-datatype",
        "garbage",
        "empty",
    ],
)
def test_unreadable_file_is_one_dataerror_naming_it(tmp_path, suffix, damage, needle) -> None:
    path = save(tmp_path / f"case_007{suffix}", _anatomical())
    damage(path)
    with pytest.raises(DataError, match=re.escape(str(path))) as err:
        read_nifti(path)
    assert needle in str(err.value)


def test_complex_voxels_are_refused_naming_the_file(tmp_path) -> None:
    path = tmp_path / "complex.nii.gz"
    nib.save(nib.Nifti1Image(np.ones((4, 4, 4), np.complex64), np.eye(4)), path)
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}: unsupported .*complex64"):
        read_nifti(path)


def test_missing_file_names_it(tmp_path) -> None:
    with pytest.raises(DataError, match=re.escape(str(tmp_path / "absent.nii.gz"))):
        read_nifti(tmp_path / "absent.nii.gz")


def test_gunzip_matches_gzip_for_single_and_multi_member() -> None:
    payload = bytes(range(256)) * 1000
    single = gzip.compress(payload)
    assert gunzip(single) == payload
    multi = gzip.compress(payload[:1000]) + gzip.compress(payload[1000:])  # bgzip-like
    assert gunzip(multi) == payload
    with pytest.raises(EOFError):
        gunzip(single[: len(single) // 2])
