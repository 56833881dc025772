"""Tests for ResNet-50 v1.5: size, shapes, stride placement, init, layouts, bf16 and tracing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accelpipe.models.resnet50 import Bottleneck, ResNet, resnet50

pytestmark = pytest.mark.torch

TINY = {"layers": (1, 1, 1, 1), "num_classes": 10, "width": 4}


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_resnet50_has_the_known_parameter_count() -> None:
    assert _n_params(resnet50(1000)) == 25_557_032


def test_output_shapes_and_stage_resolutions() -> None:
    torch.manual_seed(0)
    model = resnet50(num_classes=7, width=8).eval()
    x = torch.randn(2, 3, 64, 64)
    assert model(x).shape == (2, 7)
    sizes = []
    h = model.stem(x)
    for name in ("layer1", "layer2", "layer3", "layer4"):
        h = getattr(model, name)(h)
        sizes.append(tuple(h.shape[1:]))
    # Stem /4, then /1, /2, /2, /2; channels width * 2**i * 4.
    assert sizes == [(32, 16, 16), (64, 8, 8), (128, 4, 4), (256, 2, 2)]


def test_odd_input_size_still_gives_logits() -> None:
    assert ResNet(**TINY).eval()(torch.randn(1, 3, 45, 37)).shape == (1, 10)


def test_v15_stride_sits_on_the_3x3_conv() -> None:
    first = resnet50(width=8).layer2[0]
    assert isinstance(first, Bottleneck)
    assert first.conv1.stride == (1, 1) and first.conv1.kernel_size == (1, 1)
    assert first.conv2.stride == (2, 2) and first.conv2.kernel_size == (3, 3)
    assert first.conv3.stride == (1, 1)
    projection = first.shortcut[0]
    assert projection.kernel_size == (1, 1) and projection.stride == (2, 2)
    # Later blocks of a stage keep resolution and use the identity shortcut.
    assert isinstance(resnet50(width=8).layer2[1].shortcut, nn.Identity)


def test_first_stage_projects_channels_without_stride() -> None:
    first = resnet50(width=8).layer1[0]
    assert first.conv2.stride == (1, 1)
    assert first.shortcut[0].stride == (1, 1) and first.shortcut[0].out_channels == 32


def test_zero_init_residual_makes_last_bn_gamma_zero() -> None:
    model = ResNet(**TINY)
    blocks = [m for m in model.modules() if isinstance(m, Bottleneck)]
    assert len(blocks) == 4
    for block in blocks:
        assert torch.count_nonzero(block.bn3.weight) == 0
        assert torch.all(block.bn1.weight == 1) and torch.all(block.bn2.bias == 0)
    plain = ResNet(**TINY, zero_init_residual=False)
    assert all(torch.all(m.bn3.weight == 1) for m in plain.modules() if isinstance(m, Bottleneck))


def test_conv_init_is_kaiming_fan_out() -> None:
    torch.manual_seed(0)
    conv = resnet50().layer3[0].conv2  # 256 -> 256, 3x3: fan_out = 256 * 9
    expected_std = (2.0 / (256 * 9)) ** 0.5
    assert conv.weight.std().item() == pytest.approx(expected_std, rel=0.02)


def test_channels_last_matches_contiguous() -> None:
    torch.manual_seed(0)
    model = ResNet((1, 2, 1, 1), num_classes=10, width=8, zero_init_residual=False).eval()
    x = torch.randn(3, 3, 48, 48)
    with torch.no_grad():
        ref = model(x)
        model_cl = model.to(memory_format=torch.channels_last)
        out = model_cl(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_trains_one_step_under_bf16_autocast_channels_last() -> None:
    torch.manual_seed(0)
    model = ResNet(**TINY).to(memory_format=torch.channels_last)
    x = torch.randn(4, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, torch.arange(4))
    assert logits.dtype == torch.bfloat16
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_traces_as_one_graph() -> None:
    # Dynamo capture without a backend compiler: proves torch.compile sees no graph breaks.
    torch._dynamo.reset()
    model = ResNet(**TINY).eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="layers"):
        ResNet(layers=(3, 0, 6, 3))
    with pytest.raises(ValueError, match="width"):
        ResNet(width=0)
