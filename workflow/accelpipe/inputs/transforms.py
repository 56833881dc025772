"""Batch augmentations for 2D training, in torch: the reference nnU-Net (NVIDIA) set.

Every function takes a whole batch, image (B, C, H, W) float and, where geometry changes,
label (B, 1, H, W) integer, plus explicit per-sample parameters, so each one is unit-testable.
`BatchAugment` draws the parameters from a `torch.Generator` and applies, in the reference
order: zoom, flips, gaussian noise, gaussian blur, brightness, contrast.

Draws are PER SAMPLE (each slice of a 2D batch gets its own coin flips and magnitudes), as the
reference does per sample, rather than one draw for the whole block. It costs no more: each
transform runs once, vectorised, on just the selected samples (gather, transform, scatter), so
with p = 0.15 a transform costs ~15% of applying it to the whole batch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def flip(image: Tensor, label: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Flip image and label along spatial `dim` (-2: H, -1: W)."""
    return image.flip(dim), label.flip(dim)


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
    # Sampling in continuous coordinates: edge pixels of the window blend with their outside
    # neighbours (no replicated edge); "border" only matters where the window meets the image edge.
    img = F.grid_sample(
        image, grid.to(image.dtype), mode="bilinear", padding_mode="border", align_corners=False
    )
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
        zoom_range: tuple[float, float] = (0.7, 1.0),
        noise_std: tuple[float, float] = (0.0, 0.33),
        blur_sigma: tuple[float, float] = (0.5, 1.5),
        brightness_range: tuple[float, float] = (0.7, 1.3),
        contrast_range: tuple[float, float] = (0.65, 1.5),
    ) -> None:
        self.p, self.flip_p = p, flip_p
        self.zoom_range, self.noise_std, self.blur_sigma = zoom_range, noise_std, blur_sigma
        self.brightness_range, self.contrast_range = brightness_range, contrast_range

    def _pick(self, n: int, g: torch.Generator | None) -> Tensor:
        """Indices of the samples a transform applies to (each with probability p)."""
        return torch.nonzero(torch.rand(n, generator=g) < self.p).flatten()

    def __call__(
        self, image: Tensor, label: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        g, b = generator, image.shape[0]
        image, label = image.clone(), label.clone()  # the sub-batch updates below are in place
        idx = self._pick(b, g)
        scale = _uniform(len(idx), *self.zoom_range, g)
        offset = torch.rand(len(idx), 2, generator=g)
        if len(idx):
            image[idx], label[idx] = zoom(image[idx], label[idx], scale, offset)
        for dim in (-2, -1):
            idx = torch.nonzero(torch.rand(b, generator=g) < self.flip_p).flatten()
            if len(idx):
                image[idx], label[idx] = flip(image[idx], label[idx], dim)
        intensity = (
            (self.noise_std, lambda x, v: gaussian_noise(x, v, g)),
            (self.blur_sigma, gaussian_blur),
            (self.brightness_range, brightness),
            (self.contrast_range, contrast),
        )
        for bounds, transform in intensity:
            idx = self._pick(b, g)
            value = _uniform(len(idx), *bounds, g)
            if len(idx):  # only the selected samples pay for the transform
                image[idx] = transform(image[idx], value)
        return image, label
