"""A small synthetic ImageNet (the `synthetic` source's archives, imported by make_raw) and
its `index` variant, shared by the tests of accelpipe.datasets.imagenet, imagenet_synthetic
and imagenet_tars (their fixtures: tests/accelpipe/datasets/conftest.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from accelpipe.datasets import imagenet
from accelpipe.datasets.sources import make_raw
from tests.helpers.archives import limits_block

SYNTH = {"classes": 4, "train_per_class": 5, "val_per_class": 3, "size": [40, 32], "seed": 3}


def imagenet_config(source: str = "synthetic", **import_keys: object) -> dict:
    """The `datasets.imagenet` config block of a source, with SYNTH and these import keys."""
    block = {"train_tar": None, "val_tar": None, "devkit": None, "val_labels": None, "md5": {}}
    block["archive"] = limits_block()
    return {"source": source, "synthetic": dict(SYNTH), "import": {**block, **import_keys}}


def build_synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """(raw folder, folder of the generated archives, make_raw facts) of SYNTH."""
    base = tmp_path_factory.mktemp("imagenet")
    facts = make_raw(imagenet.SOURCES, imagenet_config(), base / "raw", base / "downloads")
    return base / "raw", base / "downloads" / "imagenet-synthetic", facts


def build_index(raw: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `index` variant of the raw folder `raw`."""
    out = tmp_path_factory.mktemp("prepared") / "index"
    return imagenet.prepare_variant("index", raw, out, {"prepare": {}}, workers=1)


def index_rows(path: Path) -> list[dict[str, str]]:
    """An index CSV's rows."""
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))
