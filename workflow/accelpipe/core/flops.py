"""FLOPs per training sample and a measured matmul rate: one record shape for both engines.

The counters live with their framework (`engines.torch_flops`, `engines.tf_flops`); the matmul
probes with their device code (`devices.torch_gemm`, `devices.tf_gemm`). Both counters count
the same thing, so that a PyTorch and a TensorFlow run can be set side by side: the FLOPs of
matrix multiplies, convolutions and attention (2 per multiply-add) in one training step
(forward and backward), divided by the step's batch. Elementwise work (activations,
normalisation, the loss, the optimizer's update) is left out by both. No framework here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# What a counted FLOP was spent on; `FlopCount.by_kind` uses these keys.
KINDS = ("matmul", "conv", "attention")


@dataclass(frozen=True)
class FlopCount:
    """The FLOPs of one counted call (a training step, or a forward pass in the tests)."""

    flops_per_sample: float
    total_flops: int  # the whole call, all `batch` samples
    batch: int
    counted_by: str  # the framework facility that counted them
    notes: tuple[str, ...] = ()  # what the count leaves out or how it was taken
    by_kind: Mapping[str, int] = field(default_factory=dict)  # total_flops split by KINDS

    def as_dict(self) -> dict[str, Any]:
        return {
            "flops_per_sample": self.flops_per_sample,
            "total_flops": self.total_flops,
            "batch": self.batch,
            "counted_by": self.counted_by,
            "notes": list(self.notes),
            "by_kind": dict(self.by_kind),
        }


def flop_count(
    by_kind: Mapping[str, int], batch: int, counted_by: str, notes: tuple[str, ...] = ()
) -> FlopCount:
    """A FlopCount from the counted FLOPs per kind of one call over `batch` samples."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, not {batch}")
    unknown = sorted(set(by_kind) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown kind of FLOPs {', '.join(unknown)} ({', '.join(KINDS)})")
    kinds = {kind: int(by_kind.get(kind, 0)) for kind in KINDS}
    total = sum(kinds.values())
    return FlopCount(total / batch, total, batch, counted_by, notes, kinds)


@dataclass(frozen=True)
class GemmResult:
    """A measured square-matmul rate: `repeats` products of two `size` x `size` matrices of
    `dtype` in `seconds` (after warm-up), at 2 * size**3 FLOPs each."""

    gemm_tflops: float
    size: int
    repeats: int
    seconds: float
    dtype: str  # the operands' dtype as the framework names it: "bfloat16", "float32", ...
    precision: str  # the run's precision the probe stands for: bf16, fp16 or fp32
    tf32: bool  # fp32 products on TF32 tensor cores (what the framework allowed)
    measured_by: str  # the framework call that ran them

    def as_dict(self) -> dict[str, Any]:
        return {
            "gemm_tflops": self.gemm_tflops,
            "size": self.size,
            "repeats": self.repeats,
            "seconds": self.seconds,
            "dtype": self.dtype,
            "precision": self.precision,
            "tf32": self.tf32,
            "measured_by": self.measured_by,
        }


@dataclass(frozen=True)
class ProbePlan:
    """What a matmul probe (`devices.torch_gemm`, `devices.tf_gemm`) starts from on a backend:
    `repeats` timed products of one square `size`, halved (not below MIN_PROBE_SIZE) while a
    warm product says they would take longer than `budget_s`. The budget is what bounds the
    probe's cost: PyTorch's bf16 and fp16 matmuls on a CPU without bf16 instructions run near
    1 GFLOP/s, so 4 products of 2048 took about two minutes of every such train stage."""

    size: int
    repeats: int
    budget_s: float


PROBE_PLANS = {"cpu": ProbePlan(size=1024, repeats=4, budget_s=1.0)}
# cuBLAS and Habana's MME reach close to their best at 8192: a few ms a bf16 product on an
# H100, tens of ms in fp32 on an A100
ACCELERATOR_PROBE = ProbePlan(size=8192, repeats=20, budget_s=5.0)
MIN_PROBE_SIZE = 256


def probe_plan(backend: str) -> ProbePlan:
    return PROBE_PLANS.get(backend, ACCELERATOR_PROBE)


def smaller_probe(size: int, repeats: int, warm_product_s: float, budget_s: float) -> int | None:
    """The size to try next, half of `size`, when `repeats` products taking `warm_product_s`
    each would overrun `budget_s`; None when they fit or half is below MIN_PROBE_SIZE."""
    if warm_product_s * repeats <= budget_s or size // 2 < MIN_PROBE_SIZE:
        return None
    return size // 2


def fit_probe(
    backend: str,
    size: int | None,
    repeats: int | None,
    warmup: int,
    budget_s: float | None,
    warm: Callable[[int], float],
) -> tuple[int, int]:
    """The (size, repeats) a matmul probe times: those given, else the backend's plan, its
    size halved while `warm(size)` (the warm-up at that size, returning its last product's
    seconds) says the timed products would overrun the budget. A size given, or no warm-up,
    is kept as it is (`warm` still runs once: the probe times the operands it made)."""
    plan = probe_plan(backend)
    fixed = size is not None or warmup == 0  # nothing to shrink, or nothing to judge by
    size = size or plan.size
    repeats = repeats or plan.repeats
    budget = plan.budget_s if budget_s is None else budget_s
    while True:
        seconds = warm(size)
        smaller = None if fixed else smaller_probe(size, repeats, seconds, budget)
        if smaller is None:
            return size, repeats
        size = smaller


def gemm_flops(size: int) -> int:
    """FLOPs of one product of two size x size matrices: size**2 dot products of length
    size, each size multiplies and size adds (the usual 2 n^3; the exact count is
    n^2 (2n - 1))."""
    return 2 * size**3


def gemm_tflops(size: int, repeats: int, seconds: float) -> float:
    """TFLOP/s of `repeats` square products of `size` in `seconds`."""
    if size < 1 or repeats < 1:
        raise ValueError(f"size and repeats must be at least 1, not {size} and {repeats}")
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"the timed products took {seconds} s: no rate")
    return gemm_flops(size) * repeats / seconds / 1e12
