"""SwinUNETR as configured from `swinunetr.model`: shape checks named by key, one sigmoid logit."""

from __future__ import annotations

import pytest
import torch

from accelpipe.core.errors import ConfigError
from accelpipe.models.swinunetr import build_model, check_roi

pytestmark = pytest.mark.torch

TINY = {
    "roi": [64, 32, 32],
    "feature_size": 12,
    "depths": [1, 1, 1, 1],
    "num_heads": [3, 6, 12, 24],
    "window_size": 4,
    "use_checkpoint": False,
}


def test_one_output_channel_for_a_sigmoid() -> None:
    model = build_model(TINY)
    with torch.no_grad():
        out = model(torch.randn(1, 1, 64, 32, 32))
    assert out.shape == (1, 1, 64, 32, 32)


@pytest.mark.parametrize(
    ("roi", "needle"), [([64, 48, 32], "multiple of 32"), ([32, 32, 32], "1x1x1 bottleneck")]
)
def test_bad_roi_is_named(roi: list[int], needle: str) -> None:
    with pytest.raises(ConfigError, match=r"swinunetr\.model\.roi") as err:
        check_roi(roi)
    assert needle in str(err.value)


def test_heads_that_do_not_divide_the_width_are_named() -> None:
    with pytest.raises(ConfigError, match=r"swinunetr\.model\.num_heads"):
        build_model(TINY | {"num_heads": [5, 6, 12, 24]})
