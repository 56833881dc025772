"""Batch augmentations for 2D training, in torch: the reference nnU-Net (NVIDIA) set.

Every function takes a whole batch, image (B, C, H, W) float and, where geometry changes,
label (B, 1, H, W) integer, plus explicit per-sample parameters, so each one is unit-testable.
`BatchAugment` draws the parameters from a `torch.Generator` and applies, in the reference
order: zoom, flips, gaussian noise, gaussian blur, brightness, contrast.

Draws are PER SAMPLE (each slice of a 2D batch gets its own coin flips and magnitudes), as the
reference does per sample; this costs no more than one draw per batch because every transform
is vectorised over the selected samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def flip(image: Tensor, label: Tensor, mask: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Flip the samples selected by the bool `mask` (B,) along spatial `dim` (-2: H, -1: W)."""
    if not bool(mask.any()):
        return image, label
    sel = mask.view(-1, 1, 1, 1)
    return (
        torch.where(sel, image.flip(dim), image),
        torch.where(sel, label.flip(dim), label),
    )


def zoom(image: Tensor, label: Tensor, scale: Tensor, offset: Tensor) -> tuple[Tensor, Tensor]:
    """Crop a window of relative size `scale` (B,) and resize it back to (H, W).

    `offset` (B, 2) in [0, 1] places the window along (H, W): 0 at the top/left edge, 1 at the
    bottom/right. Bilinear for the image, nearest for the label (its values stay in the set).
    """
    b = image.shape[0]
    theta = torch.zeros(b, 2, 3, dtype=torch.float32, device=image.device)
    theta[:, 0, 0] = scale
    theta[:, 1, 1] = scale
    # The window centre can move by (1 - scale) in normalised [-1, 1] coordinates; theta's
    # translation column is (x, y) = (W, H).
    theta[:, 0, 2] = (2 * offset[:, 1] - 1) * (1 - scale)
    theta[:, 1, 2] = (2 * offset[:, 0] - 1) * (1 - scale)
    grid = F.affine_grid(theta, list(image.shape), align_corners=False)
    img = F.grid_sample(image, grid.to(image.dtype), mode="bilinear", align_corners=False)
    lab = F.grid_sample(label.float(), grid, mode="nearest", align_corners=False)
    return img, lab.round().to(label.dtype)


def gaussian_noise(image: Tensor, std: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Add N(0, std^2) noise, `std` per sample (B,)."""
    # Drawn where the generator lives (CPU in loader workers), then moved to the image.
    noise = torch.randn(image.shape, generator=generator, dtype=image.dtype).to(image.device)
    return image + noise * std.view(-1, 1, 1, 1).to(image.dtype)


def _gauss_kernels(sigma: Tensor) -> Tensor:
    """(B, K) normalised 1D Gaussian kernels, radius ceil(3 * max sigma)."""
    radius = max(1, math.ceil(3 * float(sigma.max())))
    x = torch.arange(-radius, radius + 1, dtype=torch.float32, device=sigma.device)
    k = torch.exp(-0.5 * (x / sigma.view(-1, 1).float()) ** 2)
    return k / k.sum(dim=1, keepdim=True)


def gaussian_blur(image: Tensor, sigma: Tensor) -> Tensor:
    """Separable Gaussian blur with `sigma` (B,) in pixels, reflect-padded at the borders."""
    b, c, h, w = image.shape
    k = _gauss_kernels(sigma).to(image.dtype)  # (B, K)
    r = k.shape[1] // 2
    weight = k.repeat_interleave(c, dim=0)  # one kernel per (sample, channel) group
    x = image.reshape(1, b * c, h, w)
    mode = "reflect" if min(h, w) > r else "replicate"
    x = F.conv2d(F.pad(x, (r, r, 0, 0), mode=mode), weight.view(b * c, 1, 1, -1), groups=b * c)
    x = F.conv2d(F.pad(x, (0, 0, r, r), mode=mode), weight.view(b * c, 1, -1, 1), groups=b * c)
    return x.view(b, c, h, w)


def brightness(image: Tensor, factor: Tensor) -> Tensor:
    """Multiply each sample by `factor` (B,)."""
    return image * factor.view(-1, 1, 1, 1).to(image.dtype)


def contrast(image: Tensor, factor: Tensor) -> Tensor:
    """Scale around each (sample, channel) mean by `factor` (B,), clipped to the original range."""
    mean = image.mean(dim=(2, 3), keepdim=True)
    lo = image.amin(dim=(2, 3), keepdim=True)
    hi = image.amax(dim=(2, 3), keepdim=True)
    out = (image - mean) * factor.view(-1, 1, 1, 1).to(image.dtype) + mean
    return torch.minimum(torch.maximum(out, lo), hi)


def _uniform(n: int, lo: float, hi: float, g: torch.Generator | None) -> Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float32)


class BatchAugment:
    """The reference augmentation set, applied to a (B, C, H, W) batch and its (B, 1, H, W) label.

    Each transform hits a sample with probability `p` (flips: `flip_p` per axis). Parameters
    are drawn from the given CPU generator, so results are reproducible per seed; meant for CPU
    tensors in loader workers.
    """

    def __init__(
        self,
        p: float = 0.15,
        flip_p: float = 0.33,
        zoom_range: Sequence[float] = (0.7, 1.0),
        noise_std: Sequence[float] = (0.0, 0.33),
        blur_sigma: Sequence[float] = (0.5, 1.5),
        brightness_range: Sequence[float] = (0.7, 1.3),
        contrast_range: Sequence[float] = (0.65, 1.5),
    ) -> None:
        self.p, self.flip_p = p, flip_p
        self.zoom_range, self.noise_std, self.blur_sigma = zoom_range, noise_std, blur_sigma
        self.brightness_range, self.contrast_range = brightness_range, contrast_range

    def _pick(self, n: int, p: float, g: torch.Generator | None) -> Tensor:
        """Indices of the samples a transform applies to."""
        return torch.nonzero(torch.rand(n, generator=g) < p).flatten()

    def __call__(
        self, image: Tensor, label: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        g, b = generator, image.shape[0]
        image, label = image.clone(), label.clone()  # the sub-batch updates below are in place
        idx = self._pick(b, self.p, g)
        scale, offset = (
            _uniform(len(idx), *self.zoom_range, g),
            torch.rand(len(idx), 2, generator=g),
        )
        if len(idx):
            image[idx], label[idx] = zoom(image[idx], label[idx], scale, offset)
        for dim in (-2, -1):
            image, label = flip(image, label, torch.rand(b, generator=g) < self.flip_p, dim)
        idx = self._pick(b, self.p, g)
        std = _uniform(len(idx), *self.noise_std, g)
        if len(idx):
            image[idx] = gaussian_noise(image[idx], std, g)
        idx = self._pick(b, self.p, g)
        sigma = _uniform(len(idx), *self.blur_sigma, g)
        if len(idx):
            image[idx] = gaussian_blur(image[idx], sigma)
        idx = self._pick(b, self.p, g)
        factor = _uniform(len(idx), *self.brightness_range, g)
        if len(idx):
            image[idx] = brightness(image[idx], factor)
        idx = self._pick(b, self.p, g)
        factor = _uniform(len(idx), *self.contrast_range, g)
        if len(idx):
            image[idx] = contrast(image[idx], factor)
        return image, label
