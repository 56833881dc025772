"""Optimizers and learning-rate schedules shared by the torch workloads.

``build_optimizer`` picks AdamW, SGD or LARS from ``train.optimizer``; on Gaudi it uses
Habana's fused kernels when ``habana_frameworks`` is importable (as ``Device.adamw`` does).
SGD and LARS follow the NVIDIA/Habana ResNet recipes: weight decay (and LARS's layer-wise
scaling) only on conv/linear weights; BatchNorm parameters and biases go into a group with
neither, since decaying them only shrinks the normalization's scale and shift.

``make_scheduler`` returns a ``LambdaLR``: linear warmup, then constant, cosine or polynomial
decay. Its multiplier is a small callable object (not a lambda) so the scheduler's
``state_dict`` carries it and a resumed run continues the same curve.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, overload

import torch
from torch import nn

from accelpipe.config.settings import TorchTrain
from accelpipe.core.errors import ConfigError
from accelpipe.devices.torch_device import Device

OPTIMIZERS = ("adamw", "sgd", "lars")
SCHEDULERS = ("constant", "cosine", "poly")


def split_decay(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(conv/linear weights, BN parameters and biases) of the trainable parameters.

    Tensors with more than one dimension are weight matrices/kernels; 1-D ones are norm
    scales/shifts and biases.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    return [p for p in params if p.ndim > 1], [p for p in params if p.ndim <= 1]


class LARS(torch.optim.Optimizer):
    """Layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017), MLPerf/Habana form.

    For a parameter ``w`` with gradient ``g`` in a group with ``lars=True``::

        trust = eta * |w| / (|g| + wd * |w| + eps)      (1 if |w| or |g| is 0)
        buf   = momentum * buf + lr * trust * (g + wd * w)
        w     = w - buf

    Groups with ``lars=False`` (BN, biases) get ``buf = momentum * buf + lr * g`` with no
    trust ratio and no weight decay. As in the TF/MLPerf reference the learning rate sits
    inside the momentum buffer; with a constant lr that is exactly ``torch.optim.SGD``.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        eta: float = 0.001,
        eps: float = 0.0,
    ) -> None:
        if lr < 0 or momentum < 0 or weight_decay < 0 or eta <= 0 or eps < 0:
            raise ValueError(
                f"LARS: bad hyperparameters {lr=}, {momentum=}, {weight_decay=}, {eta=}, {eps=}"
            )
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "eta": eta,
            "eps": eps,
            "lars": True,
        }
        super().__init__(params, defaults)

    @overload
    def step(self, closure: None = None) -> None: ...
    @overload
    def step(self, closure: Callable[[], float]) -> float: ...
    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group)
        return loss

    def _update(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        grad = p.grad
        assert grad is not None  # step updates only the parameters that have a gradient
        scale: torch.Tensor | float = group["lr"]
        if group["lars"]:
            wd = group["weight_decay"]
            w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(grad)
            trust = group["eta"] * w_norm / (g_norm + wd * w_norm + group["eps"])
            # torch.where, not `if`: no device-to-host sync per parameter.
            trust = torch.where((w_norm > 0) & (g_norm > 0), trust, torch.ones_like(trust))
            grad = grad.add(p, alpha=wd)
            scale = trust * group["lr"]
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
        buf = state["momentum_buffer"]
        buf.mul_(group["momentum"]).add_(grad * scale)
        p.sub_(buf)


def _habana(name: str) -> Any:
    """The class ``name`` from Habana's fused optimizers, or None when they are not installed."""
    with contextlib.suppress(ImportError):
        from habana_frameworks.torch.hpex import optimizers

        return getattr(optimizers, name, None)
    return None


def _sgd(model: nn.Module, cfg: TorchTrain, device: Device) -> torch.optim.Optimizer:
    decay, no_decay = split_decay(model)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = _habana("FusedSGD") if device.backend == "gaudi" else None
    cls = fused or torch.optim.SGD
    return cls(groups, lr=cfg.lr, momentum=cfg.momentum)


def _lars(model: nn.Module, cfg: TorchTrain, device: Device) -> torch.optim.Optimizer:
    decay, no_decay = split_decay(model)
    if device.backend == "gaudi":
        fused_lars, momentum = _habana("FusedLars"), _habana("FusedResourceApplyMomentum")
        if fused_lars is not None and momentum is not None:
            # Habana's recipe: one momentum optimizer wrapped by FusedLars, whose per-parameter
            # mask (True = scale this one) leaves BN and biases to plain momentum, no decay.
            params = decay + no_decay
            inner = momentum(
                params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
            )
            return fused_lars(inner, [p.ndim > 1 for p in params], eps=0.0)
    groups = [{"params": decay, "lars": True}, {"params": no_decay, "lars": False}]
    return LARS(groups, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def build_optimizer(model: nn.Module, cfg: TorchTrain, device: Device) -> torch.optim.Optimizer:
    """The optimizer named by ``cfg.optimizer`` over ``model``'s trainable parameters."""
    if cfg.optimizer == "adamw":
        params = [p for p in model.parameters() if p.requires_grad]
        return device.adamw(params, cfg.lr, cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return _sgd(model, cfg, device)
    if cfg.optimizer == "lars":
        return _lars(model, cfg, device)
    raise ConfigError(
        f"config key 'train.optimizer': unknown optimizer {cfg.optimizer!r} "
        f"({', '.join(OPTIMIZERS)})"
    )


@dataclass
class WarmupDecay:
    """LR multiplier at scheduler step ``step``: linear warmup, then ``kind`` decay.

    Warmup gives ``(step + 1) / warmup_steps`` for the first ``warmup_steps`` steps; then
    ``t`` runs from 0 to 1 over the remaining steps up to ``total_steps`` (and stays at 1):
    constant 1, cosine ``0.5 * (1 + cos(pi * t))``, poly ``(1 - t) ** power``.
    A dataclass of plain numbers: ``LambdaLR.state_dict`` saves its ``__dict__``.
    """

    kind: str
    total_steps: int
    warmup_steps: int = 0
    power: float = 2.0

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        decay_steps = max(1, self.total_steps - self.warmup_steps)
        t = min(step - self.warmup_steps, decay_steps) / decay_steps
        if self.kind == "cosine":
            return 0.5 * (1 + math.cos(math.pi * t))
        return (1 - t) ** self.power


def make_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TorchTrain, total_steps: int, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-step schedule (call ``step()`` after every optimizer step) for ``total_steps``."""
    if cfg.scheduler not in SCHEDULERS:
        raise ConfigError(
            f"config key 'train.scheduler': unknown scheduler {cfg.scheduler!r} "
            f"({', '.join(SCHEDULERS)})"
        )
    warmup = round(cfg.warmup_epochs * steps_per_epoch)
    multiplier = WarmupDecay(cfg.scheduler, total_steps, warmup, cfg.poly_power)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)
