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
from collections.abc import Mapping
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
