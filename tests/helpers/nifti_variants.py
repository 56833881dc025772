"""NIfTI files in the variants nibabel reads, and MSD task folders made of them.

Starts from the real files shipped in nibabel's test data folder (`real`); `save` writes array
data again as NIfTI-1 or -2, little- or big-endian, scaled (int16 with scl_slope/scl_inter) or
not, `.nii` or `.nii.gz`, and checks that the file on disk is that variant.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np

NIBABEL_DATA = Path(nib.__file__).parent / "tests" / "data"
HIPPOCAMPUS_LABELS = {"0": "background", "1": "left hippocampus", "2": "right"}


def real(name: str) -> Path:
    """A file of nibabel's test data (e.g. `example_nifti2.nii.gz`)."""
    path = NIBABEL_DATA / name
    assert path.is_file(), path
    return path


def save(
    path: Path,
    data: np.ndarray,
    *,
    nifti2: bool = False,
    big_endian: bool = False,
    scaled: bool = False,
) -> Path:
    """Write `data` as the asked variant (the suffix of `path` picks .nii or .nii.gz)."""
    header = (nib.Nifti2Header if nifti2 else nib.Nifti1Header)(
        endianness=">" if big_endian else "<"
    )
    image_class = nib.Nifti2Image if nifti2 else nib.Nifti1Image
    img = image_class(np.asarray(data, np.float32) if scaled else data, np.eye(4), header)
    # The header's dtype wins over the array's: int16 scaled, else the array's own.
    img.set_data_dtype(np.int16 if scaled else np.asarray(data).dtype)
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(img, path)
    back = nib.load(path)
    assert isinstance(back, nib.Nifti2Image) == nifti2, path
    assert back.header.endianness == (">" if big_endian else "<"), path
    assert (back.dataobj.slope != 1.0) == scaled, path
    return path


def label_for(shape: tuple[int, ...], n_labels: int = 3) -> np.ndarray:
    """A uint8 label map of `shape` (X, Y, Z) with a block of each value 1..n_labels-1."""
    label = np.zeros(shape, dtype=np.uint8)
    x, y, z = (max(s // 2, 1) for s in shape)
    for value in range(1, n_labels):
        label[x - 1 : x + 1, y - 1 : y + 1, max(z - 2 + value, 0)] = value
    return label


def write_task(
    task: Path,
    cases: dict[str, tuple[Path, Path]],
    *,
    modality: dict[str, str],
    labels: dict[str, str] = HIPPOCAMPUS_LABELS,
) -> Path:
    """dataset.json for image/label files already under task/imagesTr and task/labelsTr."""
    (task / "imagesTs").mkdir(parents=True, exist_ok=True)
    training = [
        {"image": f"./imagesTr/{image.name}", "label": f"./labelsTr/{label.name}"}
        for image, label in cases.values()
    ]
    meta = {
        "name": task.name,
        "tensorImageSize": "3D" if len(modality) == 1 else "4D",
        "modality": modality,
        "labels": labels,
        "numTraining": len(training),
        "numTest": 0,
        "training": training,
        "test": [],
    }
    (task / "dataset.json").write_text(json.dumps(meta, indent=2))
    return task


def variant_task(task: Path, kind: str) -> dict[str, tuple[Path, Path]]:
    """An MSD task folder of real nibabel files (copied as they are) and variants made from them.

    kind "3d": one modality, images (X, Y, Z): NIfTI-1 big-endian int16 and float32 .nii,
    little-endian uint8 .nii.gz, NIfTI-2 big-endian scaled .nii.gz, NIfTI-2 .nii, scaled NIfTI-1.
    kind "4d": two modalities, images (X, Y, Z, 2): NIfTI-1 .nii.gz and NIfTI-2 .nii.gz as
    shipped, and NIfTI-2 big-endian scaled .nii. Labels: uint8 NIfTI-1 .nii.gz, one NIfTI-2
    int16 .nii and one stored 4D (X, Y, Z, 1).
    """
    images, labels = task / "imagesTr", task / "labelsTr"
    images.mkdir(parents=True)
    if kind == "3d":
        anatomical = np.asanyarray(nib.load(real("anatomical.nii")).dataobj)
        functional = nib.load(real("functional.nii")).get_fdata()[..., 0]
        made = {
            "anat_be": shutil.copy(real("anatomical.nii"), images / "anat_be.nii"),
            "moved_be_f32": shutil.copy(
                real("reoriented_anat_moved.nii"), images / "moved_be_f32.nii"
            ),
            "standard_u8": shutil.copy(real("standard.nii.gz"), images / "standard_u8.nii.gz"),
            "anat_n2_be_scaled": save(
                images / "anat_n2_be_scaled.nii.gz",
                anatomical,
                nifti2=True,
                big_endian=True,
                scaled=True,
            ),
            "anat_n2": save(images / "anat_n2.nii", anatomical, nifti2=True),
            "func_scaled": save(images / "func_scaled.nii.gz", functional, scaled=True),
        }
    else:
        nifti2 = nib.load(real("example_nifti2.nii.gz")).get_fdata()
        made = {
            "example4d": shutil.copy(real("example4d.nii.gz"), images / "example4d.nii.gz"),
            "nifti2": shutil.copy(real("example_nifti2.nii.gz"), images / "nifti2.nii.gz"),
            "nifti2_be_scaled": save(
                images / "nifti2_be_scaled.nii", nifti2, nifti2=True, big_endian=True, scaled=True
            ),
        }
    cases = {}
    for i, (case, image) in enumerate(made.items()):
        label = label_for(nib.load(image).shape[:3])
        if i == 1:
            path = save(labels / f"{case}.nii", label.astype(np.int16), nifti2=True)
        elif i == 2:
            path = save(labels / f"{case}.nii.gz", label[..., None])
        else:
            path = save(labels / f"{case}.nii.gz", label)
        cases[case] = (Path(image), path)
    modality = {"0": "MRI"} if kind == "3d" else {"0": "T1", "1": "T2"}
    write_task(task, cases, modality=modality, labels=HIPPOCAMPUS_LABELS)
    return cases
