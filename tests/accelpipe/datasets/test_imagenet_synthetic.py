"""Tests for accelpipe.datasets.imagenet_synthetic: the archives it writes, as the `synthetic`
source imports them, and that their classes can be learnt."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import scipy.io
from PIL import Image

from accelpipe.datasets import imagenet_layout, imagenet_synthetic
from accelpipe.datasets.download import md5sum
from tests.helpers.imagenet_raw import SYNTH, index_rows


def _ground_truth(tars: Path) -> dict[str, str]:
    """{val file name: wnid}, read from the devkit without the module's own reader."""
    with tarfile.open(tars / imagenet_layout.DEVKIT) as tf:
        top = "ILSVRC2012_devkit_t12/data"
        mat = io.BytesIO(tf.extractfile(f"{top}/meta.mat").read())
        truth = tf.extractfile(f"{top}/{imagenet_layout.GROUND_TRUTH}").read().decode().split()
    synsets = scipy.io.loadmat(mat, struct_as_record=False, squeeze_me=True)["synsets"]
    by_id = {int(s.ILSVRC2012_ID): s.WNID for s in synsets if s.num_children == 0}
    assert list(by_id.values()) != sorted(by_id.values())  # IDs are not in wnid order
    return {f"ILSVRC2012_val_{i:08d}.JPEG": by_id[int(t)] for i, t in enumerate(truth, 1)}


def test_synthetic_raw_layout_and_facts(imagenet_raw):
    raw, tars, facts = imagenet_raw
    assert facts == {"source": "synthetic", "classes": 4, "train": 20, "val": 12}
    root = raw / imagenet_layout.ROOT
    classes = json.loads((root / "classes.json").read_text())
    wnids = classes["wnids"]
    assert wnids == sorted(wnids) and len(wnids) == 4
    assert all(w.startswith("n0") and len(w) == 9 and w[1:].isdigit() for w in wnids)
    assert set(classes["words"]) == set(wnids)
    for split in imagenet_layout.SPLITS:
        assert sorted(p.name for p in (root / split).iterdir()) == wnids
    with tarfile.open(tars / imagenet_layout.TRAIN_TAR) as outer:
        assert outer.getnames() == [f"{w}.tar" for w in wnids]


def test_val_images_follow_the_devkit_ground_truth(imagenet_raw):
    raw, tars, _ = imagenet_raw
    truth = _ground_truth(tars)
    placed = {p.name: p.parent.name for p in (raw / imagenet_layout.ROOT / "val").glob("*/*")}
    assert placed == truth


def test_synthetic_archives_are_deterministic(imagenet_raw, tmp_path):
    _, tars, _ = imagenet_raw
    again = imagenet_synthetic.synthesize_tars(tmp_path / "again", **SYNTH)
    for path in again.values():
        assert md5sum(path) == md5sum(tars / path.name)


def test_classes_are_separable_by_mean_colour(imagenet_raw, imagenet_index):
    """A nearest-centroid classifier on mean chromaticity: what even a tiny CNN can learn."""
    root = imagenet_raw[0] / imagenet_layout.ROOT

    def features(split: str) -> tuple[np.ndarray, np.ndarray]:
        rows = index_rows(imagenet_index / f"{split}.csv")
        x = []
        for row in rows:
            rgb = np.asarray(Image.open(root / row["path"]).convert("RGB"), np.float64)
            mean = rgb.reshape(-1, 3).mean(axis=0)
            x.append(mean / mean.sum())
        return np.array(x), np.array([int(r["label"]) for r in rows])

    x_train, y_train = features("train")
    x_val, y_val = features("val")
    centroids = np.stack([x_train[y_train == c].mean(axis=0) for c in range(4)])
    pred = np.argmin(((x_val[:, None] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (pred == y_val).mean() >= 0.9
