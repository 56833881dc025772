"""Shared pieces of the synthetic photo datasets (COCO, ADE20K): image sizes and backgrounds.

Both stand-ins draw each image's size the same way, so the TFRecord pipelines see the mix of
aspect ratios and areas the real sets have, and paint objects or regions on the same noisy
grey background. Every draw comes from the caller's generator: deterministic by its seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from PIL import Image

# Width / height ratios of the images (COCO's and ADE20K's are mostly 4:3 and 3:4, some
# square and wide).
ASPECTS = (4 / 3, 3 / 4, 1.0, 16 / 9)


def image_size(rng: np.random.Generator, size: Sequence[int]) -> tuple[int, int]:
    """(width, height): the nominal area of `size` (width, height) at one of ASPECTS, +-20 %."""
    area = size[0] * size[1] * rng.uniform(0.8, 1.2)
    aspect = ASPECTS[int(rng.integers(len(ASPECTS)))]
    width = max(16, round(math.sqrt(area * aspect)))
    return width, max(16, round(area / width))


def noisy_background(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """An RGB image of one random grey level plus gaussian noise."""
    base = rng.integers(90, 170)
    noise = rng.normal(0, 12, (height, width, 3))
    pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels, "RGB")
