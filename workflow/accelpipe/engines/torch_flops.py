"""FLOPs of one real PyTorch training step, counted by `torch.utils.flop_counter`.

`count_step_flops` runs the step once under `FlopCounterMode`, which sees every aten op the
step dispatches (forward, autograd's backward, the optimizer) and counts those it has a formula
for: matrix multiplies (mm, addmm, bmm, baddbmm), convolutions and their backward, and the
fused attention kernels, at 2 FLOPs per multiply-add. Everything else counts 0: activations,
normalisation, pooling, the loss, elementwise arithmetic and the optimizer's update (SGD's and
AdamW's are elementwise: nothing of the step's counted FLOPs is the optimizer's). Composite ops
are counted through what they decompose into (linear -> addmm, einsum -> bmm), so a model's
count does not depend on how its layers are written.

What the counter does with a training step, as measured by the tests:
- A convolution's backward is its input gradient plus its weight gradient, each as many
  FLOPs as its forward; autograd computes no gradient for the input batch, so the first
  layer's backward is its weight gradient alone (1x its forward, not 2x). A ResNet-50
  training step is thus a little under 3x its forward.
- torch 2.13 has no formula for the CPU's fused attention kernels
  (`_scaled_dot_product_flash_attention_for_cpu` and its backward): without one a CPU run's
  attention would count 0. They are added here with the counts torch gives the CUDA kernels
  (forward: the two products QK^T and PV; backward: five, the scores recomputed), so that
  CPU and GPU runs of one model count the same. Attention that falls back to the math path
  (dropout inside `scaled_dot_product_attention` on the CPU) is counted as its bmm's (forward
  2, backward 4 products).
- Autocast (bf16/fp16) changes the dtypes, not the ops: the count is the same.

The step must run eagerly (not a torch.compile'd module: the counter sees the compiled
graph's ops only where they fall back to eager) and on one process (a DDP replica's backward
all-reduces: every rank would have to count). Counting runs the step for real, so it changes
what the step changes; `state` lists those objects, and they are put back as they were
(restoring rather than counting on a deep copy: the step closes over the live model and
optimizer, and a copy would double the model's memory on the device for every object, not
only the tensors): each nn.Module's parameters, buffers (BatchNorm's running statistics and
counters included), gradients and train/eval flags; every other object (optimizer, LR
scheduler, GradScaler) through its state_dict; and torch's CPU and CUDA random generators
(dropout draws from them). Copies of the parameters, buffers and optimizer state are held on
their device while the step runs.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from accelpipe.core.flops import FlopCount, flop_count

COUNTED_BY = "torch.utils.flop_counter.FlopCounterMode (matmul/conv/attention; forward+backward)"
NOTES = (
    "counts matrix multiplies, convolutions and attention at 2 FLOPs per multiply-add; "
    "elementwise ops, normalisation, activations, pooling, the loss and the optimizer's "
    "update count 0",
    "no gradient is computed for the input batch: the first layer's backward is its weight "
    "gradient alone",
    "the CPU's fused attention kernels are counted with the formulas torch gives the CUDA "
    "kernels (added by accelpipe)",
)


def _sdpa_forward(query, key, value, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """QK^T and PV: 2 * b * heads * q_len * k_len * (qk_dim + v_dim)."""
    b, heads, q_len, qk_dim = query
    k_len, v_dim = key[2], value[3]
    return 2 * b * heads * q_len * k_len * (qk_dim + v_dim)


def _sdpa_backward(
    grad_out, query, key, value, *args: Any, out_shape: Any = None, **kwargs: Any
) -> int:
    """Scores recomputed (QK^T), dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q."""
    b, heads, q_len, qk_dim = query
    k_len, v_dim = key[2], value[3]
    return 2 * b * heads * q_len * k_len * (3 * qk_dim + 2 * v_dim)


def _extra_formulas() -> dict[Any, Callable[..., int]]:
    """The CPU attention kernels' formulas, where this torch has the ops and no formula."""
    ops: dict[str, Callable[..., int]] = {
        "_scaled_dot_product_flash_attention_for_cpu": _sdpa_forward,
        "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_backward,
    }
    found: dict[Any, Callable[..., int]] = {}
    for name, formula in ops.items():
        op = getattr(torch.ops.aten, name, None)
        if op is not None and op not in flop_registry:
            found[op] = formula
    return found


def _kind(op: Any) -> str:
    name = getattr(op, "__name__", str(op))
    if "attention" in name:
        return "attention"
    if "conv" in name:
        return "conv"
    return "matmul"


class _Snapshot:
    """What the counted step may change, put back by `restore`."""

    def __init__(self, objects: Iterable[object]) -> None:
        self._tensors: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._grads: list[tuple[torch.nn.Parameter, torch.Tensor | None]] = []
        self._modes: list[tuple[torch.nn.Module, bool]] = []
        self._states: list[tuple[Any, Any]] = []
        seen: set[int] = set()
        for obj in objects:
            if isinstance(obj, torch.nn.Module):
                self._take_module(obj, seen)
            elif hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
                self._states.append((obj, copy.deepcopy(obj.state_dict())))
            else:
                raise TypeError(
                    f"cannot restore a {type(obj).__name__}: state takes nn.Modules and "
                    "objects with state_dict/load_state_dict"
                )
        self._cpu_rng = torch.get_rng_state()
        self._cuda_rng = (
            torch.cuda.get_rng_state_all()
            if torch.cuda.is_available() and torch.cuda.is_initialized()
            else None
        )

    def _take_module(self, module: torch.nn.Module, seen: set[int]) -> None:
        self._modes.extend((m, m.training) for m in module.modules())
        with torch.no_grad():
            for tensor in (*module.parameters(), *module.buffers()):
                if id(tensor) in seen:
                    continue
                seen.add(id(tensor))
                self._tensors.append((tensor, tensor.detach().clone()))
                if isinstance(tensor, torch.nn.Parameter):
                    grad = tensor.grad
                    self._grads.append((tensor, None if grad is None else grad.detach().clone()))

    def restore(self) -> None:
        with torch.no_grad():
            for tensor, saved in self._tensors:
                tensor.copy_(saved)
        for param, grad in self._grads:
            param.grad = grad
        for module, training in self._modes:
            module.training = training
        for obj, state in self._states:
            obj.load_state_dict(state)
        torch.set_rng_state(self._cpu_rng)
        if self._cuda_rng is not None:
            torch.cuda.set_rng_state_all(self._cuda_rng)


@contextlib.contextmanager
def _restored(state: Iterable[object]) -> Iterator[None]:
    snapshot = _Snapshot(state)
    try:
        yield
    finally:
        snapshot.restore()


@contextlib.contextmanager
def counting(batch: int) -> Iterator[Callable[[], FlopCount]]:
    """Count the FLOPs of what runs inside the block (one real training step of `batch`
    samples, left as it ran: a trainer counts its first step); the yielded function gives the
    count once the block has ended."""
    counter = FlopCounterMode(display=False, custom_mapping=_extra_formulas())
    with counter:
        yield lambda: _count(counter, batch)


def _count(counter: FlopCounterMode, batch: int) -> FlopCount:
    by_kind: dict[str, int] = {}
    for op, flops in counter.get_flop_counts().get("Global", {}).items():
        kind = _kind(op)
        by_kind[kind] = by_kind.get(kind, 0) + int(flops)
    return flop_count(by_kind, batch, COUNTED_BY, NOTES)


def count_step_flops(
    step: Callable[[], object], batch: int, *, state: Iterable[object] = ()
) -> FlopCount:
    """The FLOPs of one call of `step` (one training step: forward, loss, backward, optimizer
    step, on one batch of `batch` samples) counted by FlopCounterMode, and per sample.

    `state`: every object the step changes (the model, optimizer, LR scheduler, GradScaler),
    put back as it was afterwards, with torch's random generators. The step runs for real,
    so pass the eager, single-process step (see the module's docstring).
    """
    with _restored(state), counting(batch) as result:
        step()
    return result()
