"""Medical Segmentation Decathlon (MSD) task archives: download, safe extraction, layout check.

Each task is one tar holding a top-level `<task>/` folder with `dataset.json`,
`imagesTr/`, `labelsTr/` (and `imagesTs/`). `fetch_task` downloads it (resumable,
md5-verified) into a downloads folder kept outside the task folder, extracts it and
moves `<task>/` into `<raw_dir>` atomically, so `<raw_dir>/<task>` is either complete
or absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path
from accelpipe.datasets.archives import ArchiveLimits, safe_extract
from accelpipe.datasets.download import download

_BASE_URL = "https://msd-for-monai.s3-us-west-2.amazonaws.com"
# Official archives (the AWS mirror MONAI uses) and their md5 sums.
MSD_TASKS: dict[str, dict[str, str]] = {
    task: {"url": f"{_BASE_URL}/{task}.tar", "md5": md5}
    for task, md5 in {
        "Task01_BrainTumour": "240a19d752f0d9e9101544901065d872",
        "Task02_Heart": "06ee59366e1e5124267b774dbd654057",
        "Task03_Liver": "a90ec6c4aa7f6a3d087205e23d4e6397",
        "Task04_Hippocampus": "9d24dba78a72977dbd1d2e110310f31b",
        "Task05_Prostate": "35138f08b1efaef89d7424d2bcc928db",
        "Task06_Lung": "8afd997733c7fc0432f71255ba4e52dc",
        "Task07_Pancreas": "4f7080cfca169fa8066d17ce6eb061e4",
        "Task08_HepaticVessel": "641d79e80ec66453921d997fbf12a29c",
        "Task09_Spleen": "410d4a301da4e5b2f6f86ec3ddba524e",
        "Task10_Colon": "bad7a188931dc2f6acf72b08eb6202d0",
    }.items()
}


def fetch_task(
    task: str,
    raw_dir: str | os.PathLike[str],
    *,
    url: str | None = None,
    md5: str | None = None,
    download_dir: str | os.PathLike[str] | None = None,
    limits: ArchiveLimits,
    progress: bool = True,
) -> Path:
    """Make `<raw_dir>/<task>` a complete MSD task folder and return it.

    Idempotent: an existing folder with a valid layout is returned without any network
    access; an invalid one is rebuilt from the (cached, re-verified) archive. `url`
    overrides the official archive location; `md5` defaults to the official sum even
    then, since a mirror must serve the same bytes. Unknown tasks need `url` (and
    should pass `md5`). AppleDouble `._*` files shipped in some MSD tars are dropped.
    """
    known = MSD_TASKS.get(task, {})
    url = url or known.get("url")
    md5 = md5 if md5 is not None else known.get("md5")
    if not url:
        raise DataError(f"unknown MSD task {task!r} (known: {', '.join(MSD_TASKS)}); pass a url")
    task_dir = Path(raw_dir) / task
    if task_dir.is_dir() and layout_problem(task_dir) is None:
        return task_dir
    downloads = Path(download_dir) if download_dir is not None else Path(raw_dir) / ".downloads"
    archive_name = Path(urlsplit(url).path).name or f"{task}.tar"
    archive = download(url, downloads / archive_name, md5=md5, progress=progress)
    _install(archive, task, task_dir, limits)
    return task_dir


def layout_problem(task_dir: Path) -> str | None:
    """Describe what is wrong with an MSD task folder, or None if it looks complete."""
    for sub in ("imagesTr", "labelsTr"):
        if not (task_dir / sub).is_dir():
            return f"missing folder {sub}/"
    meta = task_dir / "dataset.json"
    if not meta.is_file():
        return "missing dataset.json"
    try:
        training = json.loads(meta.read_text()).get("training")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return "dataset.json is not a valid JSON object"
    if not isinstance(training, list):
        return "dataset.json has no 'training' list"
    return _missing_cases(task_dir, training)


def _missing_cases(task_dir: Path, training: list[object]) -> str | None:
    missing = []
    for entry in training:
        if not isinstance(entry, dict) or not {"image", "label"} <= entry.keys():
            return f"dataset.json training entry {entry!r} lacks 'image'/'label'"
        missing += [p for p in (entry["image"], entry["label"]) if not (task_dir / p).is_file()]
    if missing:
        return f"{len(missing)} file(s) listed in dataset.json are missing, e.g. {missing[0]}"
    return None


def _install(archive: Path, task: str, task_dir: Path, limits: ArchiveLimits) -> None:
    """Extract `archive` and move its `<task>/` folder onto `task_dir` once it checks out."""
    with atomic_path(task_dir) as tmp_task:
        # Extract beside tmp_task: atomic_path's private temp folder is removed in any case.
        staging = safe_extract(archive, tmp_task.parent / "extracted", limits=limits)
        extracted = staging / task
        if not extracted.is_dir():
            found = ", ".join(sorted(p.name for p in staging.iterdir())) or "nothing"
            raise DataError(
                f"{archive}: no top-level folder {task}/ in the archive (found {found})"
            )
        _drop_appledouble(extracted)
        problem = layout_problem(extracted)
        if problem is not None:
            raise DataError(f"{archive}: {task}: {problem}")
        extracted.rename(tmp_task)


def _drop_appledouble(root: Path) -> None:
    # macOS "._name" resource forks are not NIfTI files; they break imagesTr/*.nii.gz globs.
    for junk in root.rglob("._*"):
        if junk.is_file() and not junk.is_symlink():
            junk.unlink()
