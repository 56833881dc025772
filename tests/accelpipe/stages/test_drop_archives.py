"""`accelpipe drop-archives` (issue 33 item 3): a downloaded archive is dropped only where the
raw folder's record shows it verified (its checksum matched) and extracted (the raw stage
finished and checked the folder); anything else is kept, and says why."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from accelpipe import cli
from accelpipe.core.io import read_json
from accelpipe.datasets.brats import synthesize
from accelpipe.datasets.download import VERIFIED_SUFFIX, download, verified_downloads
from tests.helpers.http_server import FileServer

TASK = "Task01_BrainTumour"


@pytest.fixture()
def fetched(tmp_path: Path) -> Path:
    """data_root after the raw stage fetched a tiny MSD tar, md5-checked, from 127.0.0.1."""
    task = synthesize(tmp_path / "user", cases=5, shape=(32, 32, 16), seed=3)
    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / f"{TASK}.tar", "w") as tar:
        tar.add(task, arcname=TASK)
    md5 = hashlib.md5((served / f"{TASK}.tar").read_bytes()).hexdigest()
    root = tmp_path / "data"
    with FileServer(served) as server:
        cfg = {"source": "msd", "msd": {"url": server.url(f"{TASK}.tar"), "md5": md5}}
        argv = ["raw", "--dataset", "brats", "--config-json", json.dumps(cfg)]
        argv += ["--out", str(root / "raw/brats"), "--downloads", str(root / "downloads/brats")]
        assert cli.main(argv) == 0
    return root


def drop(root: Path) -> tuple[int, str]:
    """The command's status and its log."""
    log = root / "drop.log"
    argv = ["--log", str(log), "drop-archives", "--dataset", "brats", "--data-root", str(root)]
    status = cli.main(argv)
    return status, log.read_text()


def test_a_verified_extracted_archive_is_dropped(fetched: Path) -> None:
    archive = fetched / "downloads/brats" / f"{TASK}.tar"
    recorded = read_json(fetched / "raw/brats/stage.json")["archives"]
    assert recorded[archive.name]["algorithm"] == "md5"
    assert recorded[archive.name]["bytes"] == archive.stat().st_size
    status, log = drop(fetched)
    assert status == 0
    assert not archive.exists() and not archive.with_name(archive.name + VERIFIED_SUFFIX).exists()
    assert len(list((fetched / "raw/brats" / TASK / "imagesTr").iterdir())) == 5  # untouched
    assert f"dropped {archive}" in log and "freed" in log


def test_an_archive_not_shown_verified_is_kept(fetched: Path) -> None:
    downloads = fetched / "downloads/brats"
    archive = downloads / f"{TASK}.tar"
    archive.write_bytes(archive.read_bytes() + b"changed since")  # not the file it verified
    placed = downloads / "placed-by-hand.tar"
    placed.write_bytes(b"no record")
    status, log = drop(fetched)
    assert status == 0 and archive.exists() and placed.exists()
    assert log.count("does not record it verified and extracted") == 2


def test_no_finished_raw_folder_drops_nothing(fetched: Path) -> None:
    (fetched / "raw/brats/stage.json").unlink()
    status, log = drop(fetched)
    assert status == 2 and "no finished raw folder (stage.json); nothing dropped" in log
    assert (fetched / "downloads/brats" / f"{TASK}.tar").exists()


def test_a_download_without_a_checksum_is_never_recorded_verified(tmp_path: Path) -> None:
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "a.zip").write_bytes(b"zip bytes")
    with FileServer(tmp_path / "served") as server:
        download(server.url("a.zip"), tmp_path / "dl" / "a.zip", progress=False)
        download(
            server.url("a.zip"),
            tmp_path / "dl" / "b.zip",
            md5=hashlib.md5(b"zip bytes").hexdigest(),
            progress=False,
        )
    assert list(verified_downloads(tmp_path / "dl")) == ["b.zip"]
