"""nnU-Net 2D network: a DynUNet-style U-Net with deep supervision, in plain torch.

Mirrors the network NVIDIA's nnU-Net builds through MONAI's ``DynUNet`` for 2D BraTS:
3x3 kernels, every block is (conv -> InstanceNorm(affine) -> LeakyReLU) twice with the
first conv carrying the downsampling stride, transposed-conv upsampling, skip
concatenation, a 1x1 output head and extra 1x1 heads on the coarser decoder levels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn


def _conv_norm_act(in_ch: int, out_ch: int, stride: int, negative_slope: float) -> list[nn.Module]:
    # No conv bias: InstanceNorm's affine shift makes it redundant.
    return [
        nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False),
        nn.InstanceNorm2d(out_ch, affine=True),
        nn.LeakyReLU(negative_slope, inplace=True),
    ]


class ConvBlock(nn.Sequential):
    """Two conv-norm-act layers; the first one downsamples by ``stride``."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, negative_slope: float) -> None:
        super().__init__(
            *_conv_norm_act(in_ch, out_ch, stride, negative_slope),
            *_conv_norm_act(out_ch, out_ch, 1, negative_slope),
        )


class UpBlock(nn.Module):
    """Transposed-conv upsampling, skip concatenation, then a :class:`ConvBlock`."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, negative_slope: float) -> None:
        super().__init__()
        # Bias on the transposed conv matches NVIDIA's DynUNet(trans_bias=True).
        self.up = nn.ConvTranspose2d(in_ch, out_ch, kernel_size=stride, stride=stride, bias=True)
        self.block = ConvBlock(2 * out_ch, out_ch, 1, negative_slope)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return self.block(torch.cat((self.up(x), skip), dim=1))


def _validate(
    filters: Sequence[int], strides: Sequence[int], deep_supervision: bool, deep_supr_num: int
) -> None:
    if len(filters) != len(strides):
        raise ValueError(
            f"filters and strides must have equal length, got {len(filters)} and {len(strides)}"
        )
    if len(strides) < 2:
        raise ValueError(f"need at least 2 levels (one downsampling), got strides={list(strides)}")
    if strides[0] != 1:
        raise ValueError(
            f"strides[0] must be 1 (the input block keeps resolution), got {strides[0]}"
        )
    if any(s < 1 for s in strides) or any(f < 1 for f in filters):
        raise ValueError(f"strides and filters must be positive, got {strides=}, {filters=}")
    n_up = len(strides) - 1
    if deep_supervision and not 1 <= deep_supr_num < n_up:
        raise ValueError(
            f"deep_supr_num must be in [1, {n_up - 1}] (fewer than the {n_up} decoder levels), "
            f"got {deep_supr_num}"
        )


class DynUNet2D(nn.Module):
    """nnU-Net 2D U-Net.

    In training mode with deep supervision ``forward`` returns
    ``[full-res logits, 1/s1 logits, ...]``, each at its own decoder resolution; otherwise
    a single ``(B, n_class, H, W)`` tensor of full-resolution logits.
    """

    def __init__(
        self,
        in_channels: int = 4,
        n_class: int = 4,
        filters: Sequence[int] = (32, 64, 128, 256, 512, 512),
        strides: Sequence[int] = (1, 2, 2, 2, 2, 2),
        deep_supervision: bool = True,
        deep_supr_num: int = 2,
        negative_slope: float = 0.01,
    ) -> None:
        super().__init__()
        _validate(filters, strides, deep_supervision, deep_supr_num)
        self.filters, self.strides = tuple(filters), tuple(strides)
        self.deep_supervision, self.deep_supr_num = deep_supervision, deep_supr_num
        self.divisor = math.prod(self.strides)
        in_chs = (in_channels, *self.filters[:-1])
        levels = zip(in_chs, filters, strides, strict=True)
        self.encoder = nn.ModuleList(ConvBlock(i, o, s, negative_slope) for i, o, s in levels)
        # Decoder runs deepest -> shallowest; decoder[j] produces level len(filters) - 2 - j.
        self.decoder = nn.ModuleList(
            UpBlock(filters[i], filters[i - 1], strides[i], negative_slope)
            for i in range(len(filters) - 1, 0, -1)
        )
        self.head = nn.Conv2d(filters[0], n_class, kernel_size=1)
        n_ds = deep_supr_num if deep_supervision else 0
        self.ds_heads = nn.ModuleList(
            nn.Conv2d(filters[level], n_class, kernel_size=1) for level in range(1, n_ds + 1)
        )
        self._init_weights(negative_slope)

    def _init_weights(self, negative_slope: float) -> None:
        # nnU-Net's He init: kaiming normal with the LeakyReLU slope, zero biases.
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight, a=negative_slope)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def _check_input(self, x: Tensor) -> None:
        if x.ndim != 4:
            raise ValueError(f"expected input of shape (B, C, H, W), got {tuple(x.shape)}")
        h, w = x.shape[-2:]
        if h % self.divisor or w % self.divisor:
            raise ValueError(
                f"input H, W ({h}, {w}) must be divisible by prod(strides) = {self.divisor}"
            )

    def forward(self, x: Tensor) -> Tensor | list[Tensor]:
        self._check_input(x)
        skips = []
        for block in self.encoder:
            x = block(x)
            skips.append(x)
        skips.pop()  # the bottleneck output is not a skip connection
        level_out: dict[int, Tensor] = {}
        for level, up in zip(range(len(skips) - 1, -1, -1), self.decoder, strict=True):
            x = up(x, skips[level])
            level_out[level] = x
        out = self.head(x)
        if not (self.training and self.deep_supervision):
            return out
        return [out] + [head(level_out[k + 1]) for k, head in enumerate(self.ds_heads)]
