"""ADE20K's raw layout (SceneParsing, ADEChallengeData2016), as the official zip unpacks::

    <raw>/images/training/ADE_train_00000001.jpg ...       20210 in the real set
    <raw>/images/validation/ADE_val_00000001.jpg ...       2000
    <raw>/annotations/training/ADE_train_00000001.png ...  8-bit single channel, 0..150
    <raw>/annotations/validation/ADE_val_00000001.png ...

Annotation values: 0 = unlabelled ("other"), k = class k in 1..150 (CLASS_NAMES[k - 1]).
The synthesizer writes this layout, the sources check it, the TFRecord converter reads it, and
the input pipeline and the workload take the classes and the ignore index from here.
"""

from __future__ import annotations

from pathlib import Path

NUM_CLASSES = 150
IGNORE_INDEX = 255
ROOT = "ADEChallengeData2016"  # the zip's top-level folder
SPLITS = ("train", "val")
SPLIT_FOLDERS = {"train": "training", "val": "validation"}

# objectInfo150 names in order (mmseg ADE20KDataset.CLASSES, whose 'bed ' has a stray space);
# CLASS_NAMES[c] is the name of training label c (raw value c + 1).
CLASS_NAMES: tuple[str, ...] = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane",
    "grass", "cabinet", "sidewalk", "person", "earth", "door", "table", "mountain", "plant",
    "curtain", "chair", "car", "water", "painting", "sofa", "shelf", "house", "sea", "mirror",
    "rug", "field", "armchair", "seat", "fence", "desk", "rock", "wardrobe", "lamp", "bathtub",
    "railing", "cushion", "base", "box", "column", "signboard", "chest of drawers", "counter",
    "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand", "path", "stairs",
    "runway", "case", "pool table", "pillow", "screen door", "stairway", "river", "bridge",
    "bookcase", "blind", "coffee table", "toilet", "flower", "book", "hill", "bench",
    "countertop", "stove", "palm", "kitchen island", "computer", "swivel chair", "boat", "bar",
    "arcade machine", "hovel", "bus", "towel", "light", "truck", "tower", "chandelier",
    "awning", "streetlight", "booth", "television receiver", "airplane", "dirt track",
    "apparel", "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet",
    "poster", "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer",
    "plaything", "swimming pool", "stool", "barrel", "basket", "waterfall", "tent", "bag",
    "minibike", "cradle", "oven", "ball", "food", "step", "tank", "trade name", "microwave",
    "pot", "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture", "hood",
    "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen", "plate",
    "monitor", "bulletin board", "shower", "radiator", "glass", "clock", "flag",
)  # fmt: skip


def image_dir(raw: Path, split: str) -> Path:
    return Path(raw) / "images" / SPLIT_FOLDERS[split]


def annotation_dir(raw: Path, split: str) -> Path:
    return Path(raw) / "annotations" / SPLIT_FOLDERS[split]


def file_stem(split: str, index: int) -> str:
    """ADE_train_00000001 (index from 1), the stem both files of an image share."""
    return f"ADE_{split}_{index:08d}"
