"""TCIA NBIA REST client (API v1, public collections, no login): SEG series and their images.

The flow MONAI's TciaDataset follows, written for resumable pipeline runs::

    GET {url}getSeries?Collection=<c>&Modality=SEG      -> JSON list of series
    GET {url}getImage?SeriesInstanceUID=<uid>           -> zip of the series' DICOM files

Each SEG names the image (CT) series it was drawn on in ReferencedSeriesSequence; that series
is fetched the same way.

The downloads folder (kept between runs) holds `<uid>.zip` (and its `.part` while it arrives,
so `download` resumes it with a Range request) and, once the zip is extracted and checked,
`series/<uid>/*.dcm`. That folder is renamed into place complete, so its existence is the
completion mark: a rerun skips the series without a request, and the zip is then deleted. The
raw tree gets hard links to those files (copies across file systems), so it takes no extra
space and stays valid if the downloads folder is removed. Two processes sharing the folder
fetch a series one at a time (`series/<uid>.lock`): the second finds it made. URLs in
messages are redacted (accelpipe.core.redact).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path
from accelpipe.core.redact import redact
from accelpipe.datasets import dicom
from accelpipe.datasets.archives import ArchiveLimits, safe_extract
from accelpipe.datasets.download import configured_watch, download, exclusive

log = logging.getLogger(__name__)

_UID = re.compile(r"[0-9]+(\.[0-9]+)*")
RETRIES = 5
RETRY_BACKOFF_S = 1.0  # first retry delay; doubles each time (tests set it to 0)


def _endpoint(url: str, method: str, **params: str) -> str:
    return f"{url.rstrip('/')}/{method}?{urlencode(params)}"


def _fetch(url: str, dest: Path, *, progress: bool) -> Path:
    return download(url, dest, retries=RETRIES, backoff_s=RETRY_BACKOFF_S, progress=progress)


def list_series(url: str, collection: str, modality: str, scratch: Path) -> list[dict[str, Any]]:
    """The getSeries answer: one dict per series (SeriesInstanceUID, PatientID, ...)."""
    endpoint = _endpoint(url, "getSeries", Collection=collection, Modality=modality)
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:  # a listing is never cached
        body = _fetch(endpoint, Path(tmp) / "series.json", progress=False).read_bytes()
    try:
        series = json.loads(body) if body.strip() else []  # NBIA answers nothing for no match
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{redact(endpoint)}: answer is not JSON ({err})") from None
    if not isinstance(series, list) or not all(
        isinstance(s, dict) and s.get("SeriesInstanceUID") and s.get("PatientID") for s in series
    ):
        raise DataError(
            f"{redact(endpoint)}: expected a JSON list of series with SeriesInstanceUID and "
            "PatientID"
        )
    return series


def _check_uid(uid: str, where: str) -> str:
    # UIDs become file names: refuse anything but a well-formed UID (no "..", no "/").
    if not _UID.fullmatch(uid):
        raise DataError(f"{where}: {uid!r} is not a valid DICOM UID")
    return uid


def fetch_series(url: str, uid: str, downloads: Path, limits: ArchiveLimits) -> Path:
    """`<downloads>/series/<uid>/`, the series' DICOM files; downloaded and extracted if absent."""
    _check_uid(uid, redact(url))
    done = downloads / "series" / uid
    archive = downloads / f"{uid}.zip"
    done.parent.mkdir(parents=True, exist_ok=True)
    # One process at a time per series: another one sharing the downloads folder waits,
    # then finds `done` made (and its zip gone) instead of downloading it again.
    with exclusive(done, wait_s=configured_watch().lock_wait_s, job=f"series:{uid}"):
        if done.is_dir():  # renamed into place only when complete
            archive.unlink(missing_ok=True)  # left by a run killed between rename and unlink
            return done
        endpoint = _endpoint(url, "getImage", SeriesInstanceUID=uid)
        _fetch(endpoint, archive, progress=True)
        _install(archive, done, redact(endpoint), limits)
        archive.unlink()  # its files now live in `done`
    return done


def _install(archive: Path, done: Path, endpoint: str, limits: ArchiveLimits) -> None:
    """Extract a series zip and move its .dcm files (flattened) into `done`, atomically."""
    with atomic_path(done) as tmp:
        try:
            staging = safe_extract(archive, tmp.parent / "extracted", limits=limits)
        except DataError as err:
            archive.unlink()  # a finished but corrupt zip would fail every rerun
            raise DataError(f"{err} (from {endpoint}; removed, rerun to download again)") from None
        files = sorted(p for p in staging.rglob("*") if p.is_file() and _is_dicom_name(p))
        if not files:
            archive.unlink()
            raise DataError(f"{endpoint}: the series zip holds no DICOM files")
        tmp.mkdir()
        for path in files:
            # NBIA zips are flat; join any sub-folders into the name so names stay unique.
            path.rename(tmp / "_".join(path.relative_to(staging).parts))


def _is_dicom_name(path: Path) -> bool:
    return path.suffix.lower() == ".dcm"


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link (or copy, across file systems) the files of src into a new folder dst."""
    dst.mkdir(parents=True)
    for path in sorted(src.iterdir()):
        try:
            os.link(path, dst / path.name)
        except OSError:
            shutil.copy2(path, dst / path.name)


def _choose(series: list[dict[str, Any]], download_len: int | None) -> list[dict[str, Any]]:
    """The series of the first `download_len` patients by PatientID (all if None)."""
    patients = sorted({str(s["PatientID"]) for s in series})
    keep = set(patients if download_len is None else patients[:download_len])
    chosen = [s for s in series if str(s["PatientID"]) in keep]
    return sorted(chosen, key=lambda s: (str(s["PatientID"]), str(s["SeriesInstanceUID"])))


def _referenced_uid(seg_dir: Path, where: str) -> str:
    files = sorted(seg_dir.iterdir())
    return dicom.referenced_series_uid(dicom.read_dicom(files[0], pixels=False), where)


def fetch_collection(
    url: str,
    collection: str,
    raw_root: Path,
    downloads: Path,
    download_len: int | None = None,
    *,
    limits: ArchiveLimits,
) -> dict[str, int]:
    """Fill `raw_root/<PatientID>/<SeriesInstanceUID>/` with SEG series and their CT series.

    Takes the SEG series of the first `download_len` patients (sorted by PatientID; all if
    None). Returns {"patients": ..., "series": ...}. A missing CT series is a DataError naming
    it and the SEG that references it.
    """
    segs = _choose(list_series(url, collection, "SEG", downloads), download_len)
    if not segs:
        raise DataError(f"{redact(url)}: no SEG series in collection {collection!r}")
    linked: set[str] = set()
    patients = sorted({str(s["PatientID"]) for s in segs})
    for n, item in enumerate(segs, 1):
        uid, patient = str(item["SeriesInstanceUID"]), str(item["PatientID"])
        log.info("series %d/%d: patient %s, SEG %s", n, len(segs), patient, uid)
        seg_dir = fetch_series(url, uid, downloads, limits)
        ct_uid = _referenced_uid(seg_dir, f"SEG series {uid} of patient {patient}")
        try:
            ct_dir = fetch_series(url, ct_uid, downloads, limits)
        except DataError as err:
            raise DataError(
                f"CT series {ct_uid} referenced by SEG series {uid} (patient {patient}) "
                f"is not available: {err}"
            ) from None
        for series_uid, folder in ((uid, seg_dir), (ct_uid, ct_dir)):
            if series_uid not in linked:  # several SEGs may share one CT
                _link_tree(folder, raw_root / dicom.safe_name(patient) / series_uid)
                linked.add(series_uid)
    return {"patients": len(patients), "series": len(linked)}
