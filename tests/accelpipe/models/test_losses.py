"""Tests for DiceCELoss and DeepSupervisionLoss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from accelpipe.models.losses import (
    DeepSupervisionLoss,
    DiceCELoss,
    downsample_labels,
    soft_dice_per_class,
)

pytestmark = pytest.mark.torch


def _target(seed: int = 0, shape: tuple[int, ...] = (2, 1, 16, 16)) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 4, shape, generator=gen)


def _confident_logits(target: torch.Tensor, n_class: int = 4, scale: float = 20.0) -> torch.Tensor:
    onehot = F.one_hot(target[:, 0], n_class).movedim(-1, 1).float()
    return scale * onehot - scale / 2


def _manual_dice_terms(logits: torch.Tensor, target: torch.Tensor, smooth: float) -> torch.Tensor:
    """Per-class batch soft Dice loss written out class by class."""
    probs = logits.float().softmax(1)
    terms = []
    for c in range(logits.shape[1]):
        p, y = probs[:, c], (target[:, 0] == c).float()
        terms.append(1 - (2 * (p * y).sum() + smooth) / (p.sum() + y.sum() + smooth))
    return torch.stack(terms)


def test_perfect_logits_give_near_zero_loss_random_do_not() -> None:
    target = _target()
    loss_fn = DiceCELoss()
    perfect = loss_fn(_confident_logits(target), target)
    random = loss_fn(torch.randn(2, 4, 16, 16, generator=torch.Generator().manual_seed(1)), target)
    assert perfect.ndim == 0
    assert perfect.item() < 1e-4
    assert random.item() > 1.0  # CE alone is about log(4) + dice about 0.75


def test_dice_term_matches_manual_formula_and_excludes_background() -> None:
    target = _target()
    logits = torch.randn(2, 4, 16, 16, generator=torch.Generator().manual_seed(2))
    manual = _manual_dice_terms(logits, target, 1e-5)
    excl, incl = DiceCELoss(include_background=False), DiceCELoss(include_background=True)
    assert torch.allclose(excl.dice_term(logits, target), manual[1:].mean(), atol=1e-6)
    assert torch.allclose(incl.dice_term(logits, target), manual.mean(), atol=1e-6)
    expected_ce = F.cross_entropy(logits, target[:, 0])
    assert torch.allclose(excl(logits, target), manual[1:].mean() + expected_ce, atol=1e-6)


def test_background_channel_does_not_enter_excluded_dice() -> None:
    # At probability level only the background channel's quality changes: it goes from
    # perfect to entirely wrong. The excluded Dice must not move; the included one must.
    target = _target()
    onehot = F.one_hot(target[:, 0], 4).movedim(-1, 1).float()
    good, bad = onehot.clone(), onehot.clone()
    bad[:, 0] = 1 - onehot[:, 0]
    good_terms, bad_terms = soft_dice_per_class(good, onehot), soft_dice_per_class(bad, onehot)
    assert torch.allclose(good_terms[1:], bad_terms[1:])
    assert bad_terms[0] > 0.99 and good_terms[0] < 1e-6


def test_accepts_bf16_logits_and_returns_float32() -> None:
    target = _target()
    logits = torch.randn(2, 4, 16, 16, generator=torch.Generator().manual_seed(3))
    loss_fn = DiceCELoss()
    bf16 = loss_fn(logits.bfloat16(), target)
    assert bf16.dtype == torch.float32
    assert torch.allclose(bf16, loss_fn(logits.bfloat16().float(), target))


def test_accepts_three_dim_target_and_rejects_mismatch() -> None:
    target = _target()
    logits = torch.randn(2, 4, 16, 16)
    loss_fn = DiceCELoss()
    assert torch.allclose(loss_fn(logits, target[:, 0]), loss_fn(logits, target))
    with pytest.raises(ValueError, match="does not match"):
        loss_fn(logits, target[..., :8])


class _ConstantLoss(torch.nn.Module):
    """Returns each head's constant prediction value and records the targets it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[torch.Tensor] = []

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        self.targets.append(target)
        return pred.mean()


def test_deep_supervision_uses_the_reference_normalisation() -> None:
    target = _target(shape=(2, 1, 16, 16))
    preds = [torch.full((2, 4, 16 // 2**i, 16 // 2**i), c) for i, c in enumerate((3.0, 5.0, 7.0))]
    inner = _ConstantLoss()
    loss = DeepSupervisionLoss(inner)(preds, target)
    # (L0 + 0.5 L1 + 0.25 L2) / (2 - 2^-3), as REFERENCE.md and NVIDIA's compute_loss
    expected = (3.0 + 0.5 * 5.0 + 0.25 * 7.0) / (2 - 2**-3)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    two_heads = DeepSupervisionLoss(_ConstantLoss())(preds[:2], target)
    assert two_heads.item() == pytest.approx((3.0 + 0.5 * 5.0) / (2 - 2**-2), rel=1e-6)


def test_deep_supervision_downsamples_targets_by_nearest() -> None:
    target = _target(shape=(2, 1, 16, 16))
    preds = [torch.zeros(2, 4, 16 // 2**i, 16 // 2**i) for i in range(3)]
    inner = _ConstantLoss()
    DeepSupervisionLoss(inner)(preds, target)
    assert [tuple(t.shape) for t in inner.targets] == [(2, 1, 16, 16), (2, 1, 8, 8), (2, 1, 4, 4)]
    assert torch.equal(inner.targets[0], target)
    assert torch.equal(inner.targets[1], target[..., ::2, ::2])
    assert torch.equal(inner.targets[2], target[..., ::4, ::4])
    assert inner.targets[1].dtype == target.dtype


def test_deep_supervision_single_tensor_is_plain_loss() -> None:
    target = _target()
    logits = torch.randn(2, 4, 16, 16)
    inner = DiceCELoss()
    assert torch.equal(DeepSupervisionLoss(inner)(logits, target), inner(logits, target))


def test_deep_supervision_with_real_loss_backpropagates() -> None:
    target = _target(shape=(2, 1, 16, 16))
    preds = [torch.randn(2, 4, 16 // 2**i, 16 // 2**i, requires_grad=True) for i in range(3)]
    DeepSupervisionLoss(DiceCELoss())(preds, target).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in preds)


def test_downsample_labels_keeps_same_size_untouched() -> None:
    target = _target()
    assert downsample_labels(target, (16, 16)) is target


def test_deep_supervision_rejects_an_empty_list() -> None:
    with pytest.raises(ValueError, match="empty"):
        DeepSupervisionLoss(DiceCELoss())([], _target())
