"""Tests for the shared optimizers (AdamW, SGD, LARS) and the warmup + decay LR schedules."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
from torch import nn

from accelpipe.config.settings import TorchTrain
from accelpipe.core.errors import ConfigError
from accelpipe.devices.torch_device import resolve
from accelpipe.models.optim import LARS, WarmupDecay, build_optimizer, make_scheduler, split_decay
from tests.helpers.settings import torch_train

pytestmark = pytest.mark.torch

CPU = resolve("cpu")


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(16, 2))


def _lrs(cfg: TorchTrain, total: int, steps_per_epoch: int) -> list[float]:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    sched = make_scheduler(opt, cfg, total, steps_per_epoch)
    lrs = []
    for _ in range(total + 2):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


# -- schedules ----------------------------------------------------------------


def test_without_warmup_reproduces_the_previous_trainer_schedules() -> None:
    total = 10
    cosine = _lrs(torch_train(lr=0.2, scheduler="cosine"), total, 5)
    expected = [0.2 * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)) for s in range(12)]
    assert cosine == pytest.approx(expected, abs=1e-12)
    assert _lrs(torch_train(lr=0.2, scheduler="constant"), total, 5) == [0.2] * 12


def test_linear_warmup_then_constant() -> None:
    lrs = _lrs(torch_train(lr=1.0, warmup_epochs=1.0, scheduler="constant"), 12, 4)
    assert lrs[:5] == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])


def test_warmup_steps_round_fractional_epochs() -> None:
    assert make_scheduler(
        torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0),
        torch_train(warmup_epochs=0.5, scheduler="cosine"),
        100,
        7,
    ).lr_lambdas[0] == WarmupDecay("cosine", 100, 4, 2.0)


def test_cosine_after_warmup_ends_at_zero() -> None:
    lrs = _lrs(torch_train(lr=1.0, warmup_epochs=1.0, scheduler="cosine"), 12, 4)
    assert lrs[3] == pytest.approx(1.0)  # last warmup step
    assert lrs[4] == pytest.approx(1.0)  # t = 0 of the decay
    assert lrs[8] == pytest.approx(0.5)  # halfway through the 8 decay steps
    assert lrs[12] == pytest.approx(0.0, abs=1e-12)
    assert lrs[13] == pytest.approx(0.0, abs=1e-12)  # clamped past the end
    assert all(a >= b for a, b in itertools.pairwise(lrs[4:]))


def test_poly_decay_shape() -> None:
    cfg = torch_train(lr=2.0, warmup_epochs=0.5, scheduler="poly", poly_power=2.0)
    lrs = _lrs(cfg, 12, 4)  # 2 warmup steps, then 10 decay steps
    assert lrs[:2] == pytest.approx([1.0, 2.0])
    expected = [2.0 * (1 - t / 10) ** 2 for t in range(11)]
    assert lrs[2:13] == pytest.approx(expected)
    cubic = _lrs(torch_train(lr=1.0, scheduler="poly", poly_power=3.0), 10, 4)
    assert cubic[5] == pytest.approx(0.5**3)


def test_unknown_scheduler_names_the_key() -> None:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ConfigError, match=r"train\.scheduler.*'step'"):
        make_scheduler(opt, torch_train(scheduler="step"), 10, 2)


# -- optimizers -----------------------------------------------------------------


def test_split_decay_separates_bn_and_biases() -> None:
    net = _net()
    decay, no_decay = split_decay(net)
    assert {id(p) for p in decay} == {id(net[0].weight), id(net[3].weight)}
    assert len(no_decay) == 4  # conv bias, BN weight + bias, linear bias


def test_build_adamw_uses_the_device_optimizer() -> None:
    opt = build_optimizer(_net(), torch_train(optimizer="adamw", lr=3e-4), CPU)
    assert isinstance(opt, torch.optim.AdamW)
    assert opt.param_groups[0]["lr"] == 3e-4


def test_build_sgd_puts_bn_and_biases_in_a_no_decay_group() -> None:
    net = _net()
    cfg = torch_train(optimizer="sgd", lr=0.1, momentum=0.8, weight_decay=5e-5)
    opt = build_optimizer(net, cfg, CPU)
    assert isinstance(opt, torch.optim.SGD)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 5e-5 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim > 1 for p in decay["params"])
    assert all(p.ndim == 1 for p in no_decay["params"])
    assert all(g["momentum"] == 0.8 and not g["nesterov"] for g in opt.param_groups)


def test_build_lars_groups() -> None:
    opt = build_optimizer(_net(), torch_train(optimizer="lars", lr=2.5), CPU)
    assert isinstance(opt, LARS)
    assert [g["lars"] for g in opt.param_groups] == [True, False]


def test_unknown_optimizer_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"train\.optimizer.*'adam'"):
        build_optimizer(_net(), torch_train(optimizer="adam"), CPU)


def test_lars_one_step_hand_computed() -> None:
    w = nn.Parameter(torch.tensor([3.0, 4.0]))  # |w| = 5
    w.grad = torch.tensor([0.6, 0.8])  # |g| = 1
    opt = LARS([w], lr=0.5, momentum=0.9, weight_decay=0.1, eta=0.02)
    opt.step()
    trust = 0.02 * 5 / (1 + 0.1 * 5)  # = 1/15
    update = 0.5 * trust * (torch.tensor([0.6, 0.8]) + 0.1 * torch.tensor([3.0, 4.0]))
    torch.testing.assert_close(w.detach(), torch.tensor([3.0, 4.0]) - update)
    # Second step: the buffer carries momentum of the first update.
    before = w.detach().clone()
    w.grad = torch.tensor([0.6, 0.8])
    opt.step()
    w_norm = before.norm()
    trust2 = 0.02 * w_norm / (1 + 0.1 * w_norm)
    update2 = 0.9 * update + 0.5 * trust2 * (torch.tensor([0.6, 0.8]) + 0.1 * before)
    torch.testing.assert_close(w.detach(), before - update2)


def test_lars_trust_is_one_for_zero_norms() -> None:
    zero_w = nn.Parameter(torch.zeros(3))
    zero_w.grad = torch.ones(3)
    zero_g = nn.Parameter(torch.ones(3))
    zero_g.grad = torch.zeros(3)
    LARS([zero_w, zero_g], lr=0.1, momentum=0.0, weight_decay=0.5, eta=0.001).step()
    torch.testing.assert_close(zero_w.detach(), torch.full((3,), -0.1))  # lr * 1 * (g + 0)
    torch.testing.assert_close(zero_g.detach(), torch.full((3,), 1 - 0.1 * 0.5))  # lr * wd * w


def _train(opt: torch.optim.Optimizer, params: list[nn.Parameter], steps: int) -> None:
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()


def test_lars_non_lars_group_is_plain_momentum_sgd_without_decay() -> None:
    torch.manual_seed(0)
    bn = [nn.Parameter(torch.randn(5)), nn.Parameter(torch.randn(5))]
    ref = [nn.Parameter(p.detach().clone()) for p in bn]
    lars = LARS([{"params": bn, "lars": False}], lr=0.05, momentum=0.9, weight_decay=0.1)
    sgd = torch.optim.SGD(ref, lr=0.05, momentum=0.9, weight_decay=0.0)
    _train(lars, bn, 4)
    _train(sgd, ref, 4)
    for a, b in zip(bn, ref, strict=True):
        torch.testing.assert_close(a.detach(), b.detach())


def test_lars_built_from_a_model_excludes_bn_and_bias() -> None:
    net = _net()
    opt = build_optimizer(net, torch_train(optimizer="lars", lr=0.1, momentum=0.9), CPU)
    bn_before = net[1].bias.detach().clone()
    conv_before = net[0].weight.detach().clone()
    net[1].bias.grad = torch.ones(4)
    net[0].weight.grad = torch.ones_like(net[0].weight)
    opt.step()
    torch.testing.assert_close(net[1].bias.detach(), bn_before - 0.1)  # lr * g, nothing else
    assert not torch.allclose(net[0].weight.detach(), conv_before - 0.1)  # scaled by trust


@pytest.mark.parametrize("name", ["sgd", "lars", "adamw"])
def test_state_dict_round_trip_continues_identically(name: str) -> None:
    cfg = torch_train(optimizer=name, lr=0.1, warmup_epochs=1.0, scheduler="cosine")

    def setup(net: nn.Module) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        opt = build_optimizer(net, cfg, CPU)
        return opt, make_scheduler(opt, cfg, total_steps=12, steps_per_epoch=3)

    def run(net: nn.Module, opt, sched, steps: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            x = torch.randn(4, 3, 4, 4, generator=gen)
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
            sched.step()

    net = _net()
    opt, sched = setup(net)
    run(net, opt, sched, 5, seed=0)
    saved = copy.deepcopy(
        {"model": net.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}
    )
    assert saved["sched"]["lr_lambdas"][0]["warmup_steps"] == 3  # the multiplier is saved
    run(net, opt, sched, 4, seed=1)

    resumed = _net()
    resumed.load_state_dict(saved["model"])
    opt2, sched2 = setup(resumed)
    opt2.load_state_dict(saved["opt"])
    sched2.load_state_dict(saved["sched"])
    run(resumed, opt2, sched2, 4, seed=1)
    for a, b in zip(net.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert sched2.get_last_lr() == sched.get_last_lr()
