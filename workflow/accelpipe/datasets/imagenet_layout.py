"""ImageNet 2012 (ILSVRC2012) layouts: the official archives and the raw ImageFolder.

Official archives (what `source: import` reads and `source: synthetic` writes)::

    ILSVRC2012_img_train.tar       n01440764.tar ...            one tar per class
        n01440764.tar              n01440764_10026.JPEG ...     flat
    ILSVRC2012_img_val.tar         ILSVRC2012_val_00000001.JPEG ...   flat
    ILSVRC2012_devkit_t12.tar.gz   ILSVRC2012_devkit_t12/data/meta.mat   `synsets` struct array
                                   ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt

Raw layout (every source)::

    <raw>/ILSVRC2012/train/<wnid>/*.JPEG
    <raw>/ILSVRC2012/val/<wnid>/*.JPEG
    <raw>/ILSVRC2012/classes.json    {"wnids": [sorted], "words": {wnid: name}} (words may be {})
"""

from __future__ import annotations

from collections.abc import Sequence

KEY = "datasets.imagenet"  # the dataset's config block, named in errors
ROOT = "ILSVRC2012"
SPLITS = ("train", "val")
TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"


def val_name(number: int) -> str:
    """The file name of validation image `number` (from 1), in the val tar and in val/<wnid>/."""
    return f"ILSVRC2012_val_{number:08d}.JPEG"


def known_words(words: dict[str, str], wnids: Sequence[str]) -> dict[str, str]:
    """The class names of `wnids` that `words` has (classes.json's `words`)."""
    return {w: words[w] for w in wnids if w in words}
