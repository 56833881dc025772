"""Tests for accelpipe.datasets.coco's raw sources: small zips in the real layout on 127.0.0.1."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelpipe.core.errors import ConfigError, DataError
from accelpipe.datasets import coco
from accelpipe.datasets.coco_synthetic import synthesize
from accelpipe.datasets.download import VERIFIED_SUFFIX
from tests.helpers.dataset_config import run_raw
from tests.helpers.http_server import Faults, FileServer

# zip name -> the folder of the synthetic layout it holds, as the official zips do
CONTENT = {
    "train2017.zip": "train2017",
    "val2017.zip": "val2017",
    "annotations_trainval2017.zip": "annotations",
}
CONFIG_KEY = {name: key for key, name in coco.ZIP_KEYS.items()}


def _zip(folder: Path, archive: Path) -> str:
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, path.relative_to(folder.parent).as_posix())
    return hashlib.md5(archive.read_bytes()).hexdigest()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[FileServer, dict]]:
    """The three zips served locally, and the `download` config block pointing at them."""
    src = synthesize(tmp_path / "src", train_images=4, val_images=2, seed=1)
    www = tmp_path / "www"
    www.mkdir()
    # The annotations zip of the real site also holds captions and keypoints files.
    (src / "annotations" / "captions_val2017.json").write_text("{}")
    with FileServer(www) as server:
        block = {}
        for name, folder in CONTENT.items():
            md5 = _zip(src / folder, www / name)
            block[CONFIG_KEY[name]] = {"url": server.url(name), "md5": md5}
        yield server, block


def _cfg(block: dict) -> dict:
    return {"source": "coco", "download": block}


def test_official_table_has_the_three_zips_with_md5s() -> None:
    assert set(coco.ZIPS) == set(CONTENT)
    for name, entry in coco.ZIPS.items():
        assert entry["url"].startswith("http://images.cocodataset.org/")
        assert entry["url"].endswith("/" + name)
        assert len(entry["md5"]) == 32 and int(entry["md5"], 16) >= 0
        assert entry["folder"] == CONTENT[name]


def test_zip_table_overrides_and_rejects_unknown_keys() -> None:
    table = coco.zip_table({"val": {"url": "http://127.0.0.1/v.zip", "md5": None}})
    assert table["val2017.zip"]["url"] == "http://127.0.0.1/v.zip"
    assert table["val2017.zip"]["md5"] == coco.ZIPS["val2017.zip"]["md5"]
    assert table["train2017.zip"] == coco.ZIPS["train2017.zip"]
    with pytest.raises(ConfigError, match=r"datasets\.coco\.download\.test"):
        coco.zip_table({"test": {"url": "x"}})


def test_coco_source_downloads_checks_and_extracts(site, tmp_path: Path) -> None:
    server, block = site
    raw, downloads = tmp_path / "raw", tmp_path / "downloads"
    facts = run_raw("coco", _cfg(block), raw, downloads)
    assert facts == {"source": "coco", "images": {"train": 4, "val": 2}}
    assert sorted(p.name for p in raw.iterdir()) == ["annotations", "train2017", "val2017"]
    src = tmp_path / "src"
    for path in src.rglob("*.jpg"):
        assert (raw / path.relative_to(src)).read_bytes() == path.read_bytes()
    assert (raw / "annotations" / "captions_val2017.json").is_file()
    # each zip and the record that its md5 matched (datasets.download.VERIFIED_SUFFIX)
    records = [name + VERIFIED_SUFFIX for name in CONTENT]
    assert sorted(p.name for p in downloads.iterdir()) == sorted([*CONTENT, *records])
    # A second raw reuses the verified zips: no new request.
    requests = len(server.log)
    run_raw("coco", _cfg(block), tmp_path / "raw2", downloads)
    assert len(server.log) == requests


def test_interrupted_download_resumes_with_range(site, tmp_path: Path) -> None:
    server, block = site
    server.faults = Faults(cut_after_bytes=300, cut_first=1)
    run_raw("coco", _cfg(block), tmp_path / "raw", tmp_path / "downloads")
    first, second = server.log[0], server.log[1]
    assert first.path == second.path == "/train2017.zip"
    assert first.body_bytes <= 300 and first.range is None
    assert second.range == f"bytes={first.body_bytes}-" and second.status == 206


def test_wrong_checksum_is_one_error_naming_the_file(site, tmp_path: Path) -> None:
    _, block = site
    block["val"]["md5"] = "0" * 32
    downloads = tmp_path / "downloads"
    with pytest.raises(DataError, match=r"val2017\.zip: md5 mismatch") as err:
        run_raw("coco", _cfg(block), tmp_path / "raw", downloads)
    assert "\n" not in str(err.value)
    assert not (downloads / "val2017.zip").exists()
    assert not (downloads / "val2017.zip.part").exists()


def test_truncated_zip_is_one_error(site, tmp_path: Path) -> None:
    server, block = site
    archive = server.root / "annotations_trainval2017.zip"
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    block["annotations"]["md5"] = hashlib.md5(archive.read_bytes()).hexdigest()
    with pytest.raises(DataError, match=r"annotations_trainval2017\.zip: truncated or corrupt"):
        run_raw("coco", _cfg(block), tmp_path / "raw", tmp_path / "downloads")


def test_annotations_zip_without_the_train_instances_is_named(site, tmp_path: Path) -> None:
    server, block = site
    (tmp_path / "src" / "annotations" / "instances_train2017.json").unlink()
    archive = server.root / "annotations_trainval2017.zip"
    block["annotations"]["md5"] = _zip(tmp_path / "src" / "annotations", archive)
    raw = tmp_path / "raw"
    with pytest.raises(DataError) as err:
        run_raw("coco", _cfg(block), raw, tmp_path / "downloads")
    missing = raw / "annotations" / "instances_train2017.json"
    assert str(err.value) == f"{missing}: annotation file not found"


def test_zip_without_its_folder_is_refused(site, tmp_path: Path) -> None:
    server, block = site
    archive = server.root / "val2017.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("images/000000000001.jpg", b"not here")
    block["val"]["md5"] = hashlib.md5(archive.read_bytes()).hexdigest()
    with pytest.raises(DataError, match=r"val2017\.zip: has no top-level folder val2017/"):
        run_raw("coco", _cfg(block), tmp_path / "raw", tmp_path / "downloads")


def test_synthetic_source(tmp_path: Path) -> None:
    cfg = {"source": "synthetic", "synthetic": {"train_images": 3, "val_images": 2, "seed": 0}}
    facts = run_raw("coco", cfg, tmp_path / "raw", tmp_path / "downloads")
    assert facts == {"source": "synthetic", "images": {"train": 3, "val": 2}}
    assert not (tmp_path / "downloads").exists()


@pytest.mark.parametrize("given", ["root", "parent"])
def test_path_source_links_an_existing_copy(tmp_path: Path, given: str) -> None:
    copy = synthesize(tmp_path / "data" / "coco", train_images=2, val_images=1)
    location = copy if given == "root" else copy.parent
    facts = run_raw("coco", {"source": f"path:{location}"}, tmp_path / "raw", tmp_path / "dl")
    assert facts == {"source": "path", "images": {"train": 2, "val": 1}}
    for folder in ("train2017", "val2017", "annotations"):
        assert (tmp_path / "raw" / folder).resolve() == (copy / folder).resolve()


@pytest.mark.parametrize("split", ["train", "val"])
def test_path_source_names_a_missing_annotation_file(tmp_path: Path, split: str) -> None:
    copy = synthesize(tmp_path / "coco", train_images=2, val_images=1)
    missing = coco.annotation_file(copy, split)
    missing.unlink()
    with pytest.raises(DataError) as err:
        run_raw("coco", {"source": f"path:{copy}"}, tmp_path / "raw", tmp_path / "dl")
    assert str(err.value) == f"{missing}: annotation file not found"  # one line, the file
    assert not (tmp_path / "raw").exists()


def test_path_source_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"datasets\.coco\.source does not exist"):
        run_raw("coco", {"source": f"path:{tmp_path / 'nope'}"}, tmp_path / "raw", tmp_path / "dl")


def test_check_raw_names_a_missing_image_folder(tmp_path: Path) -> None:
    copy = synthesize(tmp_path / "coco", train_images=2, val_images=1)
    for f in (copy / "train2017").iterdir():
        f.unlink()
    (copy / "train2017").rmdir()
    with pytest.raises(DataError, match=r"train2017: COCO image folder not found"):
        coco.check_raw(copy)


def _split_bytes(raw: Path, split: str, sizes: list[int]) -> None:
    folder = raw / f"{split}2017"
    folder.mkdir(parents=True)
    for k, size in enumerate(sizes):
        with (folder / f"{k:012d}.jpg").open("wb") as f:
            f.truncate(size)  # sparse: the size without the disk


def test_shard_counts_follow_a_target_size_with_the_counts_as_the_fewest(tmp_path: Path) -> None:
    """Full COCO (train2017 ~19.3 GB, val2017 ~816 MB) at 150 MB a shard: 129 + 6 files, not
    config.yaml's 4 + 2 (~4.8 GB each); synthetic data keeps the fewest."""
    full, small = tmp_path / "full", tmp_path / "small"
    _split_bytes(full, "train", [9_650_000_000, 9_650_000_000])
    _split_bytes(full, "val", [816_000_000])
    _split_bytes(small, "train", [5000] * 48)
    _split_bytes(small, "val", [5000] * 16)
    shipped = {"train_shards": 4, "val_shards": 2, "shard_mb": 150}
    assert coco.shard_counts(full, shipped) == (129, 6)
    assert coco.shard_counts(small, shipped) == (4, 2)
    reference = {"train_shards": 256, "val_shards": 32, "shard_mb": None}
    assert coco.shard_counts(full, reference) == (256, 32)
