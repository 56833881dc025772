"""Tests for the nnU-Net 2D network: shapes, layouts, gradients, size and a tiny overfit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch

from accelpipe.models.dynunet2d import DynUNet2D
from accelpipe.models.losses import DeepSupervisionLoss, DiceCELoss
from accelpipe.models.metrics import dice_per_class

pytestmark = pytest.mark.torch

SMALL = {"filters": (8, 16, 32, 64), "strides": (1, 2, 2, 2)}


def _n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _expected_params(
    in_ch: int, n_class: int, filters: Sequence[int], strides: Sequence[int], n_ds: int
) -> int:
    """Parameter count derived from the architecture description, independently of the code."""

    def block(cin: int, cout: int) -> int:  # two bias-free 3x3 convs + two affine norms
        return 9 * cin * cout + 2 * cout + 9 * cout * cout + 2 * cout

    total = sum(block(cin, cout) for cin, cout in zip((in_ch, *filters[:-1]), filters, strict=True))
    for i in range(1, len(filters)):
        s = strides[i]
        total += s * s * filters[i] * filters[i - 1] + filters[i - 1]  # transposed conv + bias
        total += block(2 * filters[i - 1], filters[i - 1])
    heads = [filters[0]] + [filters[k] for k in range(1, n_ds + 1)]
    return total + sum(c * n_class + n_class for c in heads)


def test_default_output_shapes_train_and_eval() -> None:
    torch.manual_seed(0)
    model = DynUNet2D()
    x = torch.randn(2, 4, 192, 160)
    model.train()
    with torch.no_grad():
        outs = model(x)
    assert isinstance(outs, list)
    assert [tuple(o.shape) for o in outs] == [(2, 4, 192, 160), (2, 4, 96, 80), (2, 4, 48, 40)]
    model.eval()
    with torch.no_grad():
        out = model(x)
    assert isinstance(out, torch.Tensor)
    assert out.shape == (2, 4, 192, 160)


def test_no_deep_supervision_returns_tensor_in_train_mode() -> None:
    model = DynUNet2D(in_channels=3, n_class=2, deep_supervision=False, **SMALL).train()
    out = model(torch.randn(1, 3, 32, 32))
    assert isinstance(out, torch.Tensor)
    assert out.shape == (1, 2, 32, 32)


def test_small_config_shapes() -> None:
    model = DynUNet2D(in_channels=2, n_class=4, **SMALL).train()
    outs = model(torch.randn(3, 2, 32, 32))
    assert [tuple(o.shape) for o in outs] == [(3, 4, 32, 32), (3, 4, 16, 16), (3, 4, 8, 8)]


def test_default_parameter_count() -> None:
    model = DynUNet2D()
    expected = _expected_params(4, 4, (32, 64, 128, 256, 512, 512), (1, 2, 2, 2, 2, 2), 2)
    assert expected == 20_613_868
    assert _n_params(model) == expected


def test_small_parameter_count_without_deep_supervision() -> None:
    model = DynUNet2D(in_channels=2, n_class=4, deep_supervision=False, **SMALL)
    assert _n_params(model) == _expected_params(2, 4, SMALL["filters"], SMALL["strides"], 0)


def test_init_is_kaiming_with_zero_bias() -> None:
    torch.manual_seed(0)
    model = DynUNet2D()
    conv = model.encoder[3][0]  # 128 -> 256, 3x3: fan_in 1152
    gain = (2.0 / (1 + 0.01**2)) ** 0.5
    assert conv.weight.std().item() == pytest.approx(gain / 1152**0.5, rel=0.02)
    biases = [m.bias for m in model.modules() if isinstance(m, torch.nn.ConvTranspose2d)]
    assert biases and all(torch.count_nonzero(b) == 0 for b in biases)


def test_channels_last_matches_contiguous() -> None:
    torch.manual_seed(0)
    model = DynUNet2D(in_channels=4, n_class=4, **SMALL).train()
    x = torch.randn(2, 4, 64, 64)
    ref = model(x)
    model_cl = model.to(memory_format=torch.channels_last)
    out = model_cl(x.contiguous(memory_format=torch.channels_last))
    for a, b in zip(ref, out, strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_backward_reaches_every_parameter() -> None:
    torch.manual_seed(0)
    model = DynUNet2D(in_channels=4, n_class=4, **SMALL).train()
    outs = model(torch.randn(2, 4, 32, 32))
    sum(o.square().mean() for o in outs).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
    assert any(p.grad.abs().sum() > 0 for p in model.ds_heads.parameters())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"filters": (8, 16, 32), "strides": (1, 2, 2, 2)}, "equal length"),
        ({"filters": (8, 16, 32, 64), "strides": (2, 2, 2, 2)}, r"strides\[0\]"),
        ({"filters": (8,), "strides": (1,)}, "at least 2"),
        ({**SMALL, "deep_supr_num": 3}, "deep_supr_num"),
        ({**SMALL, "deep_supr_num": 0}, "deep_supr_num"),
        ({"filters": (8, 16), "strides": (1, 0)}, "positive"),
    ],
)
def test_invalid_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DynUNet2D(**kwargs)


def test_deep_supr_num_ignored_without_deep_supervision() -> None:
    # the default deep_supr_num (2) is out of range for two levels, but nothing reads it here
    model = DynUNet2D(filters=(8, 16), strides=(1, 2), deep_supervision=False).train()
    assert len(model.ds_heads) == 0
    assert _n_params(model) == _expected_params(4, 4, (8, 16), (1, 2), 0)
    out = model(torch.randn(1, 4, 8, 8))
    assert isinstance(out, torch.Tensor) and out.shape == (1, 4, 8, 8)


def test_indivisible_input_raises() -> None:
    model = DynUNet2D(**SMALL)
    with pytest.raises(ValueError, match="divisible"):
        model(torch.randn(1, 4, 36, 32))


def _pattern_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two 32x32 images with three rectangles (classes 1-3) whose intensities encode the label."""
    labels = torch.zeros(2, 1, 32, 32, dtype=torch.long)
    labels[0, 0, 4:14, 4:14] = 1
    labels[0, 0, 18:28, 6:26] = 2
    labels[0, 0, 6:12, 20:30] = 3
    labels[1, 0, 16:30, 2:12] = 1
    labels[1, 0, 2:10, 8:30] = 2
    labels[1, 0, 20:28, 18:26] = 3
    gen = torch.Generator().manual_seed(0)
    noise = 0.1 * torch.randn(2, 2, 32, 32, generator=gen)
    image = torch.cat([labels.float() / 3, (labels % 2).float()], dim=1) + noise
    return image, labels


@pytest.mark.main_suite_only
def test_small_model_overfits_one_batch() -> None:
    torch.manual_seed(0)
    image, labels = _pattern_batch()
    model = DynUNet2D(in_channels=2, n_class=4, **SMALL)
    criterion = DeepSupervisionLoss(DiceCELoss())
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(150):
        optimizer.zero_grad()
        loss = criterion(model(image), labels)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(image).argmax(dim=1).numpy()
    dices = [dice_per_class(pred[i], labels[i, 0].numpy()) for i in range(2)]
    assert loss.item() < 0.2
    assert float(np.mean(dices)) > 0.8
