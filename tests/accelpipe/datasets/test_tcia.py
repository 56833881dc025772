"""TCIA NBIA client and the nsclc `tcia` source, against a fake NBIA API on 127.0.0.1."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydicom
import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets import nsclc, tcia
from accelpipe.datasets.nsclc_layout import COLLECTION
from accelpipe.datasets.nsclc_synthetic import synthesize
from tests.helpers.dataset_config import run_raw
from tests.helpers.http_server import FileServer, Handler, Request

API = "nbia-api/services/v1/"
SYNTH = {"patients": 3, "shape": [16, 20, 4], "pixel_spacing": 2.0, "slice_thickness": 3.0}


class FakeNbia:
    """getSeries and getImage over a raw tree; `script[uid]` lists misbehaviour per request."""

    def __init__(self, root: Path, server: FileServer) -> None:
        self.zips: dict[str, bytes] = {}
        self.listing: list[dict[str, Any]] = []
        self.script: dict[str, list[int | tuple[str, int] | bytes]] = {}
        for folder in sorted(root.glob("*/*")):
            ds = pydicom.dcmread(next(folder.iterdir()), stop_before_pixels=True)
            self.zips[folder.name] = _flat_zip(folder)
            self.listing.append(
                {
                    "SeriesInstanceUID": folder.name,
                    "PatientID": str(ds.PatientID),
                    "Modality": str(ds.Modality),
                    "Collection": COLLECTION,
                    "ImageCount": len(list(folder.iterdir())),
                }
            )
        self.listing.reverse()  # NBIA's order is not the patients' order
        server.routes[f"/{API}getSeries"] = self.get_series
        server.routes[f"/{API}getImage"] = self.get_image

    def uids(self, modality: str) -> list[str]:
        return sorted(s["SeriesInstanceUID"] for s in self.listing if s["Modality"] == modality)

    def get_series(self, h: Handler) -> None:
        match = [
            s
            for s in self.listing
            if s["Modality"] == h.query.get("Modality") and s["Collection"] == h.query["Collection"]
        ]
        h.send_bytes(200, json.dumps(match).encode(), {"Content-Type": "application/json"})

    def get_image(self, h: Handler) -> None:
        uid = h.query.get("SeriesInstanceUID", "")
        action = self.script[uid].pop(0) if self.script.get(uid) else None
        if isinstance(action, int):
            return h.send_bytes(action, b"scripted error\n")
        if uid not in self.zips:
            return h.send_bytes(404, b"no such series\n")
        if isinstance(action, bytes):
            return h.send_data(action)
        h.send_data(self.zips[uid], cut=action[1] if action else None)


def _flat_zip(folder: Path) -> bytes:
    """A series zip as NBIA serves it: the DICOM files at the top level."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, path.name)
    return buf.getvalue()


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(tmp_path_factory.mktemp("synth"), seed=7, **SYNTH)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FileServer]:
    (tmp_path / "www").mkdir()
    with FileServer(tmp_path / "www") as srv:
        yield srv


@pytest.fixture
def nbia(synth_root: Path, server: FileServer) -> FakeNbia:
    return FakeNbia(synth_root, server)


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tcia, "RETRY_BACKOFF_S", 0.0)


def _make_raw(
    server: FileServer, tmp_path: Path, out: str = "raw", download_len: int | None = None
) -> dict[str, Any]:
    tcia_cfg = {"url": server.url(API), "collection": COLLECTION}
    cfg = {"source": "tcia", "tcia": {**tcia_cfg, "download_len": download_len}}
    return run_raw("nsclc", cfg, tmp_path / out, tmp_path / "downloads")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.dcm"))}


def _images(log: list[Request]) -> list[str]:
    return [r.query["SeriesInstanceUID"] for r in log if r.path.endswith("/getImage")]


def test_fetch_gives_the_raw_layout(nbia: FakeNbia, server: FileServer, synth_root: Path, tmp_path):
    facts = _make_raw(server, tmp_path)
    assert facts == {"source": "tcia", "patients": 3}
    raw = tmp_path / "raw" / COLLECTION
    assert _tree(raw) == _tree(synth_root)  # same <PatientID>/<SeriesInstanceUID>/ files
    listing = [r for r in server.log if r.path.endswith("/getSeries")]
    assert [r.query for r in listing] == [{"Collection": COLLECTION, "Modality": "SEG"}]
    # Each SEG, then the CT it references, in patient order.
    segs, cts = nbia.uids("SEG"), nbia.uids("CT")
    assert sorted(_images(server.log)) == sorted(segs + cts)
    by_patient = {
        s["PatientID"]: s["SeriesInstanceUID"] for s in nbia.listing if s["Modality"] == "SEG"
    }
    assert _images(server.log)[0::2] == [by_patient[p] for p in sorted(by_patient)]
    # Downloads keep only the extracted series; the raw tree hard-links to them.
    downloads = tmp_path / "downloads"
    assert sorted(p.name for p in downloads.iterdir()) == ["series"]
    assert sorted(p.name for p in (downloads / "series").iterdir()) == sorted(segs + cts)
    assert all(p.stat().st_nlink == 2 for p in raw.rglob("*.dcm"))
    prepared = nsclc.prepare(raw, tmp_path / "prep")
    assert len(list((prepared / "labels").iterdir())) == 3


def test_download_len_takes_first_patients(nbia: FakeNbia, server: FileServer, tmp_path) -> None:
    facts = _make_raw(server, tmp_path, download_len=2)
    assert facts["patients"] == 2
    raw = tmp_path / "raw" / COLLECTION
    assert sorted(p.name for p in raw.iterdir()) == ["LUNG1-001", "LUNG1-002"]
    assert len(_images(server.log)) == 4


def test_complete_series_are_not_fetched_again(nbia: FakeNbia, server: FileServer, tmp_path):
    _make_raw(server, tmp_path, "first")
    count = len(server.log)
    _make_raw(server, tmp_path, "second")
    assert [r.path for r in server.log[count:]] == [f"/{API}getSeries"]  # the listing only
    assert _tree(tmp_path / "first") == _tree(tmp_path / "second")


def test_cut_connection_resumes_with_range(nbia: FakeNbia, server: FileServer, tmp_path) -> None:
    ct = nbia.uids("CT")[1]
    nbia.script[ct] = [("cut", 3000)]
    _make_raw(server, tmp_path)
    tries = [r for r in server.log if r.query.get("SeriesInstanceUID") == ct]
    assert [(r.status, r.range, r.body_bytes) for r in tries[:1]] == [(200, None, 3000)]
    assert (tries[1].status, tries[1].range) == (206, "bytes=3000-")


def test_failed_run_resumes_next_run(
    nbia: FakeNbia, server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ct = nbia.uids("CT")[0]
    nbia.script[ct] = [("cut", 2000)]
    monkeypatch.setattr(tcia, "RETRIES", 0)
    with pytest.raises(DataError, match="download failed after 1 attempts"):
        _make_raw(server, tmp_path)
    assert (tmp_path / "downloads" / f"{ct}.zip.part").stat().st_size == 2000
    first_run = len(server.log)
    finished = {u for u in _images(server.log) if u != ct}
    _make_raw(server, tmp_path, "again")
    again = _images(server.log[first_run:])
    assert ct in again and not finished & set(again)  # nothing fetched twice
    resumed = [r for r in server.log[first_run:] if r.query.get("SeriesInstanceUID") == ct]
    assert [(r.status, r.range) for r in resumed] == [(206, "bytes=2000-")]


def test_server_errors_are_retried(nbia: FakeNbia, server: FileServer, tmp_path: Path) -> None:
    server.faults.error_first = 1  # the listing
    seg = nbia.uids("SEG")[0]
    nbia.script[seg] = [500, 503]
    assert _make_raw(server, tmp_path)["patients"] == 3
    assert [r.status for r in server.log if r.query.get("SeriesInstanceUID") == seg] == [
        500,
        503,
        200,
    ]
    assert server.log[0].status == 500 and server.log[1].path.endswith("/getSeries")


def test_unavailable_ct_series_is_named(nbia: FakeNbia, server: FileServer, tmp_path) -> None:
    ct = nbia.uids("CT")[0]
    del nbia.zips[ct]
    with pytest.raises(DataError) as err:
        _make_raw(server, tmp_path)
    text = str(err.value)
    assert f"CT series {ct} referenced by SEG series" in text and "is not available" in text
    assert "HTTP 404" in text and "\n" not in text


def test_corrupt_zip_is_removed_then_fetched_again(nbia: FakeNbia, server: FileServer, tmp_path):
    seg = nbia.uids("SEG")[2]
    nbia.script[seg] = [b"PK\x03\x04 this is no zip"]
    with pytest.raises(DataError, match=r"truncated or corrupt archive.*removed, rerun"):
        _make_raw(server, tmp_path)
    assert not (tmp_path / "downloads" / f"{seg}.zip").exists()
    assert _make_raw(server, tmp_path, "again")["patients"] == 3


def test_zip_without_dicom_files(nbia: FakeNbia, server: FileServer, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("LICENSE", "nothing here")
    nbia.zips[nbia.uids("SEG")[0]] = buf.getvalue()
    with pytest.raises(DataError, match="the series zip holds no DICOM files"):
        _make_raw(server, tmp_path)


def test_bad_listings(server: FileServer, tmp_path: Path) -> None:
    answers = iter([b"[]", b"", b"<html>maintenance</html>", b'[{"SeriesInstanceUID": "1.2"}]'])
    server.routes[f"/{API}getSeries"] = lambda h: h.send_bytes(200, next(answers))
    for n, message in enumerate(
        [
            "no SEG series in collection",
            "no SEG series in collection",
            "getSeries.*answer is not JSON",
            "expected a JSON list of series with SeriesInstanceUID and PatientID",
        ]
    ):
        with pytest.raises(DataError, match=message):
            _make_raw(server, tmp_path, f"raw{n}")


def test_unsafe_uid_is_refused(server: FileServer, tmp_path: Path) -> None:
    listing = [{"SeriesInstanceUID": "../../evil", "PatientID": "P", "Modality": "SEG"}]
    server.routes[f"/{API}getSeries"] = lambda h: h.send_bytes(200, json.dumps(listing).encode())
    with pytest.raises(DataError, match=r"'\.\./\.\./evil' is not a valid DICOM UID"):
        _make_raw(server, tmp_path)
    assert len(server.log) == 1


def test_copy_when_hard_links_fail(
    nbia: FakeNbia, server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_link(src: object, dst: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(tcia.os, "link", no_link)
    _make_raw(server, tmp_path, download_len=1)
    files = list((tmp_path / "raw").rglob("*.dcm"))
    assert files and all(p.stat().st_nlink == 1 for p in files)
    shutil.rmtree(tmp_path / "downloads")
    assert _tree(tmp_path / "raw")  # the raw tree does not depend on the downloads


def test_symlink_bomb_zip_is_one_short_line(
    nbia: FakeNbia, server: FileServer, tmp_path: Path
) -> None:
    """NBIA publishes no checksum: a small zip whose "symlink" member inflates to 64 MiB
    once wrote a 64 MB log line. Now it is refused from its header in one short line."""
    buf = io.BytesIO()
    info = zipfile.ZipInfo("link.dcm")
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o120777 << 16
    with zipfile.ZipFile(buf, "w") as zf, zf.open(info, "w") as fh:
        for _ in range(64):
            fh.write(bytes(1 << 20))
    seg = nbia.uids("SEG")[0]
    nbia.zips[seg] = buf.getvalue()
    with pytest.raises(DataError) as err:
        _make_raw(server, tmp_path)
    message = str(err.value)
    assert "datasets.nsclc.tcia.archive.max_ratio" in message and f"{seg}.zip" in message
    assert "\n" not in message and len(message) < 600
