"""Tests for accelpipe.datasets.ade20k's raw sources: the official zip's layout served on
127.0.0.1 (sha1 checked), the synthetic source and `path:` copies."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelpipe.core.errors import ConfigError, DataError
from accelpipe.datasets import ade20k, ade20k_layout
from accelpipe.datasets.ade20k_synthetic import synthesize
from accelpipe.datasets.download import VERIFIED_SUFFIX
from accelpipe.datasets.sources import make_raw
from tests.helpers.dataset_config import run_raw
from tests.helpers.http_server import Faults, FileServer

ZIP = "ADEChallengeData2016.zip"


def _zip(root: Path, archive: Path) -> str:
    """Zip `root` under the top-level folder ADEChallengeData2016/, as the official zip."""
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(root.rglob("*")):
            zf.write(path, f"{ade20k_layout.ROOT}/{path.relative_to(root).as_posix()}")
    return hashlib.sha1(archive.read_bytes()).hexdigest()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[FileServer, dict]]:
    """The zip served locally, and the `download` config block pointing at it."""
    src = synthesize(tmp_path / "src", train_images=3, val_images=2, size=(32, 24), seed=1)
    (src / "objectInfo150.txt").write_text("Idx\tRatio\tTrain\tVal\tName\n")  # as the real zip
    www = tmp_path / "www"
    www.mkdir()
    with FileServer(www) as server:
        sha1 = _zip(src, www / ZIP)
        yield server, {"url": server.url(ZIP), "sha1": sha1}


def _cfg(block: dict) -> dict:
    return {"source": "ade20k", "download": block}


def test_constants_are_the_official_ones() -> None:
    assert (ade20k_layout.NUM_CLASSES, ade20k_layout.IGNORE_INDEX) == (150, 255)
    assert len(ade20k_layout.CLASS_NAMES) == len(set(ade20k_layout.CLASS_NAMES)) == 150
    names = ade20k_layout.CLASS_NAMES
    assert names[:8] == ("wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed")
    assert (names[12], names[86], names[147], names[148], names[149]) == (
        "person",
        "awning",
        "glass",
        "clock",
        "flag",
    )


def test_ade20k_source_downloads_checks_and_extracts(site, tmp_path: Path) -> None:
    server, block = site
    raw, downloads = tmp_path / "raw", tmp_path / "downloads"
    facts = run_raw("ade20k", _cfg(block), raw, downloads)
    assert facts == {"source": "ade20k", "images": {"train": 3, "val": 2}}
    assert sorted(p.name for p in raw.iterdir()) == ["annotations", "images", "objectInfo150.txt"]
    src = tmp_path / "src"
    files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    assert sorted(p.relative_to(raw) for p in raw.rglob("*") if p.is_file()) == files
    for rel in files:
        assert (raw / rel).read_bytes() == (src / rel).read_bytes()
    # the zip and the record that its sha1 matched (datasets.download.VERIFIED_SUFFIX)
    assert sorted(p.name for p in downloads.iterdir()) == [ZIP, ZIP + VERIFIED_SUFFIX]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # A second raw reuses the verified zip: no new request.
    requests = len(server.log)
    run_raw("ade20k", _cfg(block), tmp_path / "raw2", downloads)
    assert len(server.log) == requests == 1


def test_interrupted_download_resumes_with_range(site, tmp_path: Path) -> None:
    server, block = site
    server.faults = Faults(cut_after_bytes=500, cut_first=1)
    run_raw("ade20k", _cfg(block), tmp_path / "raw", tmp_path / "downloads")
    first, second = server.log
    assert first.body_bytes <= 500 and first.range is None
    assert second.range == f"bytes={first.body_bytes}-" and second.status == 206


def test_wrong_sha1_is_one_error_and_no_raw_output(site, tmp_path: Path) -> None:
    server, block = site
    actual = block["sha1"]
    block["sha1"] = "0" * 40
    raw, downloads = tmp_path / "raw", tmp_path / "downloads"
    with pytest.raises(DataError) as err:
        run_raw("ade20k", _cfg(block), raw, downloads)
    assert str(err.value) == (
        f"{downloads / ZIP}: sha1 mismatch for download from {server.url(ZIP)}: expected "
        f"{'0' * 40}, got {actual} (partial file removed; rerun to download again)"
    )
    assert not raw.exists()
    assert list(downloads.iterdir()) == []  # neither the zip nor its .part


def test_the_official_url_and_sha1_are_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def fake_download(url: str, dest: Path, **kwargs: object) -> Path:
        calls.append((url, dest, kwargs["sha1"]))
        raise DataError("stop here")

    monkeypatch.setattr(ade20k, "download", fake_download)
    with pytest.raises(DataError, match="stop here"):
        run_raw("ade20k", {"source": "ade20k"}, tmp_path / "raw", tmp_path / "dl")
    official = "http://data.csail.mit.edu/places/ADEchallenge/" + ZIP
    assert calls == [(official, tmp_path / "dl" / ZIP, "219e1696abb36c8ba3a3afe7fb2f4b4606a897c7")]


def test_zip_without_its_top_folder_is_refused(site, tmp_path: Path) -> None:
    server, block = site
    archive = server.root / ZIP
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("images/training/ADE_train_00000001.jpg", b"not here")
    block["sha1"] = hashlib.sha1(archive.read_bytes()).hexdigest()
    downloads = tmp_path / "downloads"
    with pytest.raises(DataError) as err:
        run_raw("ade20k", _cfg(block), tmp_path / "raw", downloads)
    assert str(err.value) == f"{downloads / ZIP}: has no top-level folder ADEChallengeData2016/"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["downloads", "src", "www"]


def test_synthetic_source(tmp_path: Path) -> None:
    cfg = {"source": "synthetic", "synthetic": {"train_images": 3, "val_images": 2, "seed": 0}}
    facts = run_raw("ade20k", cfg, tmp_path / "raw", tmp_path / "downloads")
    assert facts == {"source": "synthetic", "images": {"train": 3, "val": 2}}
    assert not (tmp_path / "downloads").exists()


def test_synthetic_source_defaults(tmp_path: Path) -> None:
    facts = run_raw("ade20k", {}, tmp_path / "raw", tmp_path / "downloads")
    assert facts == {"source": "synthetic", "images": {"train": 24, "val": 8}}


@pytest.mark.parametrize("given", ["root", "parent"])
def test_path_source_links_an_existing_copy(tmp_path: Path, given: str) -> None:
    copy = synthesize(
        tmp_path / "data" / ade20k_layout.ROOT, train_images=2, val_images=1, size=(32, 24)
    )
    location = copy if given == "root" else copy.parent
    facts = run_raw("ade20k", {"source": f"path:{location}"}, tmp_path / "raw", tmp_path / "dl")
    assert facts == {"source": "path", "images": {"train": 2, "val": 1}}
    for folder in ("images", "annotations"):
        assert (tmp_path / "raw" / folder).resolve() == (copy / folder).resolve()


def test_path_source_names_an_image_without_annotation(tmp_path: Path) -> None:
    copy = synthesize(tmp_path / "ade", train_images=2, val_images=2, size=(32, 24))
    png = copy / "annotations" / "validation" / "ADE_val_00000002.png"
    png.unlink()
    with pytest.raises(DataError) as err:
        run_raw("ade20k", {"source": f"path:{copy}"}, tmp_path / "raw", tmp_path / "dl")
    jpg = copy / "images" / "validation" / "ADE_val_00000002.jpg"
    assert str(err.value) == f"{jpg}: image without its annotation {png}"
    assert not (tmp_path / "raw").exists()


def test_path_source_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"datasets\.ade20k\.source does not exist"):
        run_raw("ade20k", {"source": f"path:{tmp_path / 'nope'}"}, tmp_path / "raw", tmp_path)


def test_unknown_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"datasets\.ade20k\.source: unknown source 'coco'"):
        make_raw(ade20k.SOURCES, {"source": "coco"}, tmp_path / "raw", tmp_path / "dl")


def test_check_raw_names_a_missing_folder(tmp_path: Path) -> None:
    copy = synthesize(tmp_path / "ade", train_images=1, val_images=1, size=(32, 24))
    folder = copy / "annotations" / "training"
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    with pytest.raises(DataError) as err:
        ade20k.check_raw(copy)
    assert str(err.value) == f"{folder}: ADE20K folder not found"


def test_check_raw_names_an_empty_split(tmp_path: Path) -> None:
    copy = synthesize(tmp_path / "ade", train_images=1, val_images=1, size=(32, 24))
    for kind in ("images", "annotations"):
        for path in (copy / kind / "validation").iterdir():
            path.unlink()
    with pytest.raises(DataError) as err:
        ade20k.check_raw(copy)
    assert str(err.value) == f"{copy / 'images' / 'validation'}: no .jpg images"
