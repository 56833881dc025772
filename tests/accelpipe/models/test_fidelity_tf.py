"""The TensorFlow networks are the references' networks, at the schema defaults (issue 31
item 5), built as their workloads build them.

SSD-ResNet34: MLPerf's SSD (training v0.7-v1.1 reference, and Habana's TF port): 8732 default
boxes and 19,972,534 parameters for COCO's 80 classes and background (an independent audit's
figures, issue 31, counted as PyTorch counts parameters: without BatchNorm's statistics).

Segmenter: Seg-B-Mask/16 at 512x512 on ADE20K's 150 classes has 102,497,580 parameters (the
audit's, and rstrudel/segmenter's model by its formula: see test_segmenter.py); the other
encoders and decoders the schema offers were measured once with this code (keras
count_params) and are pinned so a change to them cannot pass unseen. L/16, L/32 and B/32 are
not built here: a third of a billion parameters is no cheap test.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from accelpipe.config.schema import validate
from accelpipe.models import ssd_boxes
from accelpipe.workloads.segmenter import workload as segmenter
from accelpipe.workloads.ssd import workload as ssd

pytestmark = pytest.mark.tensorflow

COCO_CLASSES = 80  # the prepared dataset's categories, not a config key

# encoder/decoder -> parameters at the schema's image_size (512) and 150 classes; B_16/mask is
# the audit's figure, the others measured with this code (keras count_params) when these tests
# were written: every encoder but the large ones once, and both decoders
SEGMENTER_PARAMS = {
    ("B_16", "mask"): 102_497_580,
    ("S_16", "linear"): 22_041_366,
    ("Ti_16", "mask"): 6_713_388,
    ("tiny", "mask"): 464_044,
    ("tiny", "linear"): 351_446,
}


@pytest.fixture(scope="module")
def defaults() -> dict[str, Any]:
    return validate({})


def test_ssd_has_mlperfs_boxes_and_size(defaults: dict[str, Any]) -> None:
    width = defaults["ssd"]["model"]["width"]
    model = ssd._build({"classes": COCO_CLASSES, "width": width})
    # the reference's (PyTorch) parameters; keras counts the backbone's BatchNorm statistics
    # too: a moving mean and variance for each of its 4,928 channels
    statistics = sum(
        int(np.prod(w.shape)) for w in model.weights if "moving_" in w.name.rsplit("/", 1)[-1]
    )
    assert model.count_params() - statistics == 19_972_534
    assert statistics == 2 * 4_928
    cls_logits, box_deltas = (tuple(t.shape) for t in model.outputs)
    assert cls_logits == (None, 8732, COCO_CLASSES + 1) and box_deltas == (None, 8732, 4)
    assert ssd_boxes.NUM_BOXES == 8732 and ssd_boxes.default_boxes().shape == (8732, 4)


@pytest.mark.parametrize(("encoder", "decoder"), list(SEGMENTER_PARAMS))
def test_segmenter_has_each_variants_size(
    defaults: dict[str, Any], encoder: str, decoder: str
) -> None:
    model_cfg = {**defaults["segmenter"]["model"], "encoder": encoder, "decoder": decoder}
    keys = segmenter._ARCHITECTURE_KEYS
    model = segmenter._build({"classes": segmenter.NUM_CLASSES} | {k: model_cfg[k] for k in keys})
    assert model.count_params() == SEGMENTER_PARAMS[encoder, decoder]


def test_the_segmenter_default_is_the_audited_model(defaults: dict[str, Any]) -> None:
    model_cfg = defaults["segmenter"]["model"]
    assert (model_cfg["encoder"], model_cfg["decoder"], model_cfg["image_size"]) == (
        "B_16",
        "mask",
        512,
    )
    assert segmenter.NUM_CLASSES == 150
