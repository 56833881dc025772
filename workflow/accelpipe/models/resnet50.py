"""ResNet-50 v1.5 in plain torch (He et al. 2016, with the v1.5 stride placement).

Bottleneck blocks (1x1 -> 3x3 -> 1x1, expansion 4) in four stages after a 7x7/2 conv +
3x3/2 max-pool stem; BatchNorm + ReLU after every conv; a 1x1 conv + BN projection on the
shortcut wherever the block changes shape; global average pool and a linear classifier.

v1.5 (the NVIDIA, Habana and MLPerf reference model) puts the stride-2 of the first block of
stages 2-4 on the 3x3 conv instead of the first 1x1 conv: a strided 1x1 conv skips 3 of every
4 input pixels, while the strided 3x3 still sees all of them. It is a little slower and
about 0.5% top-1 more accurate than v1.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

EXPANSION = 4


def _conv(in_ch: int, out_ch: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    # No conv bias: the BatchNorm that follows every conv has its own shift.
    return nn.Conv2d(in_ch, out_ch, kernel, stride=stride, padding=kernel // 2, bias=False)


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (carries the stride) -> 1x1 expand, plus the shortcut."""

    def __init__(self, in_ch: int, mid_ch: int, stride: int) -> None:
        super().__init__()
        out_ch = mid_ch * EXPANSION
        self.conv1, self.bn1 = _conv(in_ch, mid_ch, 1), nn.BatchNorm2d(mid_ch)
        self.conv2, self.bn2 = _conv(mid_ch, mid_ch, 3, stride), nn.BatchNorm2d(mid_ch)
        self.conv3, self.bn3 = _conv(mid_ch, out_ch, 1), nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        needs_projection = stride != 1 or in_ch != out_ch
        self.shortcut: nn.Module = (
            nn.Sequential(_conv(in_ch, out_ch, 1, stride), nn.BatchNorm2d(out_ch))
            if needs_projection
            else nn.Identity()
        )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """Bottleneck ResNet; ``layers`` blocks per stage, stage ``i`` is ``width * 2**i`` wide.

    ``width`` is the stem and first-stage width (64 for ResNet-50); stage outputs are
    ``EXPANSION`` times wider. The stages are the attributes ``layer1`` .. ``layerN``.
    """

    def __init__(
        self,
        layers: Sequence[int] = (3, 4, 6, 3),
        num_classes: int = 1000,
        width: int = 64,
        zero_init_residual: bool = True,
    ) -> None:
        super().__init__()
        if not layers or any(n < 1 for n in layers) or width < 1 or num_classes < 1:
            raise ValueError(
                f"need blocks >= 1 per stage, width and num_classes >= 1, got "
                f"{layers=}, {width=}, {num_classes=}"
            )
        self.stem = nn.Sequential(
            _conv(3, width, 7, stride=2),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        in_ch = width
        self.stage_names = tuple(f"layer{i + 1}" for i in range(len(layers)))
        for i, (name, n_blocks) in enumerate(zip(self.stage_names, layers, strict=True)):
            mid_ch = width * 2**i
            stride = 1 if i == 0 else 2  # the stem's max-pool already downsampled stage 1
            blocks = [Bottleneck(in_ch, mid_ch, stride)]
            blocks += [Bottleneck(mid_ch * EXPANSION, mid_ch, 1) for _ in range(n_blocks - 1)]
            self.add_module(name, nn.Sequential(*blocks))
            in_ch = mid_ch * EXPANSION
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        self._init_weights(zero_init_residual)

    def _init_weights(self, zero_init_residual: bool) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        # Goyal et al. 2017 (large-minibatch ImageNet): classifier from N(0, 0.01), zero bias.
        nn.init.normal_(self.fc.weight, std=0.01)
        nn.init.zeros_(self.fc.bias)
        if zero_init_residual:
            # Each residual branch starts as zero, so every block is the identity at step 0:
            # the large-batch recipes (NVIDIA, Habana, Goyal et al.) train more stably so.
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.zeros_(m.bn3.weight)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        for name in self.stage_names:
            x = getattr(self, name)(x)
        return self.fc(torch.flatten(self.pool(x), 1))


def resnet50(num_classes: int = 1000, width: int = 64) -> ResNet:
    """ResNet-50 v1.5 (25,557,032 parameters at 1000 classes, width 64)."""
    return ResNet((3, 4, 6, 3), num_classes=num_classes, width=width)
