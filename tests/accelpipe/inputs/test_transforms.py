"""Batch augmentations: invariants of each transform and of the composed BatchAugment."""

from __future__ import annotations

import pytest
import torch

from accelpipe.inputs import transforms as T

pytestmark = pytest.mark.torch


def _batch(b: int = 4, c: int = 2, h: int = 16, w: int = 12, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    image = torch.randn(b, c, h, w, generator=g)
    label = torch.randint(0, 4, (b, 1, h, w), generator=g, dtype=torch.uint8)
    return image, label


def test_flip_twice_is_identity():
    image, label = _batch()
    for dim in (-2, -1):
        once_i, once_l = T.flip(image, label, dim)
        assert torch.equal(once_i, image.flip(dim)) and torch.equal(once_l, label.flip(dim))
        assert not torch.equal(once_i, image)
        twice_i, twice_l = T.flip(once_i, once_l, dim)
        assert torch.equal(twice_i, image) and torch.equal(twice_l, label)


def test_batch_augment_flips_image_and_label_together():
    image, _ = _batch(b=32)
    label = (image[:, :1] > 0).to(torch.uint8)  # label tied to the image content
    out_i, out_l = T.BatchAugment(p=0.0, flip_p=0.5)(image, label, torch.Generator().manual_seed(2))
    assert torch.equal(out_l, (out_i[:, :1] > 0).to(torch.uint8))
    flipped = [i for i in range(32) if not torch.equal(out_i[i], image[i])]
    assert 8 < len(flipped) < 32  # per sample: some flipped, some not


def test_zoom_identity_at_scale_one():
    image, label = _batch()
    out_i, out_l = T.zoom(image, label, torch.ones(4), torch.rand(4, 2))
    torch.testing.assert_close(out_i, image, atol=1e-5, rtol=0)
    assert torch.equal(out_l, label) and out_l.dtype == torch.uint8


@pytest.mark.parametrize(
    ("offset", "rows", "cols"),
    [((0.0, 0.0), slice(0, 8), slice(0, 6)), ((0.0, 1.0), slice(0, 8), slice(6, 12)),
     ((1.0, 0.0), slice(8, 16), slice(0, 6)), ((1.0, 1.0), slice(8, 16), slice(6, 12))],
)  # fmt: skip
def test_zoom_crops_the_window_given_by_offset(offset, rows, cols):
    image = torch.zeros(1, 1, 16, 12)
    label = torch.zeros(1, 1, 16, 12, dtype=torch.uint8)
    image[..., rows, cols] = 1.0
    label[..., rows, cols] = 2
    out_i, out_l = T.zoom(image, label, torch.tensor([0.5]), torch.tensor([offset]))
    assert torch.all(out_l == 2)  # the half-size window is exactly the marked quadrant
    assert torch.all(out_i[..., 1:-1, 1:-1] == 1)  # bilinear: only the rim blends outside
    assert out_i.min() >= 0.5


def test_zoom_keeps_shape_and_label_set():
    image, label = _batch()
    label[label == 2] = 3  # label set {0, 1, 3}: no new values may appear by interpolation
    out_i, out_l = T.zoom(image, label, torch.tensor([0.7, 0.8, 0.9, 0.75]), torch.rand(4, 2))
    assert out_i.shape == image.shape and out_l.shape == label.shape
    assert set(out_l.unique().tolist()) <= {0, 1, 3}
    assert not torch.equal(out_i, image)


def test_noise_changes_image_with_given_std():
    image = torch.zeros(2, 3, 64, 64)
    g = torch.Generator().manual_seed(0)
    out = T.gaussian_noise(image, torch.tensor([0.0, 0.3]), g)
    assert torch.equal(out[0], image[0])
    assert abs(out[1].std().item() - 0.3) < 0.02
    again = T.gaussian_noise(image, torch.tensor([0.0, 0.3]), torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


def test_blur_keeps_constants_and_smooths_noise():
    const = torch.full((2, 2, 10, 9), 3.0)
    torch.testing.assert_close(T.gaussian_blur(const, torch.tensor([0.5, 1.5])), const)
    image, _ = _batch(b=2, h=32, w=32)
    out = T.gaussian_blur(image, torch.tensor([0.5, 1.5]))
    assert out.shape == image.shape
    assert out[0].std() < image[0].std() and out[1].std() < out[0].std()  # larger sigma, smoother
    torch.testing.assert_close(out.mean(dim=(2, 3)), image.mean(dim=(2, 3)), atol=0.05, rtol=0)


def test_brightness_multiplies():
    image, _ = _batch()
    factor = torch.tensor([0.7, 1.0, 1.3, 1.1])
    torch.testing.assert_close(T.brightness(image, factor), image * factor.view(-1, 1, 1, 1))


def test_contrast_clips_to_original_range_and_keeps_mean_when_reducing():
    image, _ = _batch()
    out = T.contrast(image, torch.tensor([1.5, 1.5, 0.65, 1.0]))
    lo, hi = image.amin(dim=(2, 3)), image.amax(dim=(2, 3))
    assert torch.all(out.amin(dim=(2, 3)) >= lo) and torch.all(out.amax(dim=(2, 3)) <= hi)
    assert torch.any(out[0] == image[0].amax())  # stretched values were clipped
    torch.testing.assert_close(out[2].mean(dim=(1, 2)), image[2].mean(dim=(1, 2)))
    assert out[2].std() < image[2].std()
    torch.testing.assert_close(out[3], image[3])


def test_batch_augment_identity_when_disabled():
    image, label = _batch()
    aug = T.BatchAugment(p=0.0, flip_p=0.0)
    out_i, out_l = aug(image, label, torch.Generator().manual_seed(0))
    assert torch.equal(out_i, image) and torch.equal(out_l, label)


def test_batch_augment_always_on_changes_image_keeps_labels_valid_and_inputs_intact():
    image, label = _batch(b=8)
    before_i, before_l = image.clone(), label.clone()
    aug = T.BatchAugment(p=1.0, flip_p=0.5)
    out_i, out_l = aug(image, label, torch.Generator().manual_seed(1))
    assert torch.equal(image, before_i) and torch.equal(label, before_l)  # no in-place edits
    assert out_i.shape == image.shape and out_i.dtype == image.dtype
    assert out_l.shape == label.shape and out_l.dtype == torch.uint8
    assert set(out_l.unique().tolist()) <= {0, 1, 2, 3}
    assert torch.isfinite(out_i).all()
    assert all(not torch.equal(out_i[i], image[i]) for i in range(8))


def test_batch_augment_deterministic_per_generator_seed():
    image, label = _batch(b=16)
    aug = T.BatchAugment(p=0.5)
    a = aug(image, label, torch.Generator().manual_seed(3))
    b = aug(image, label, torch.Generator().manual_seed(3))
    c = aug(image, label, torch.Generator().manual_seed(4))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_batch_augment_probability_is_per_sample():
    image, label = _batch(b=200, h=8, w=8)
    aug = T.BatchAugment(p=0.15, flip_p=0.0)
    out, _ = aug(image, label, torch.Generator().manual_seed(0))
    changed = sum(not torch.equal(out[i], image[i]) for i in range(200))
    # 1 - 0.85**5 ~ 0.56 of the samples get at least one of the five transforms.
    assert 80 < changed < 145
