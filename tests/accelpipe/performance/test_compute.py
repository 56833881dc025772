"""Compute figures: model TFLOP/s, MFU and the fraction of the measured matmul ceiling."""

from __future__ import annotations

import pytest

from accelpipe.performance.compute import compute
from tests.helpers.performance_runs import TRAIN

GEMM = {"gemm_tflops": 800.0, "size": 8192, "repeats": 20, "tf32_switches": {"matmul": False}}
FLOPS = {
    "flops_per_sample": 24.3e9,
    "counted_by": "torch.utils.flop_counter.FlopCounterMode",
    "by_kind": {"conv": 24e9, "matmul": 0.3e9, "attention": 0},
}


def test_compute_gives_model_tflops_mfu_and_the_fraction_of_the_measured_ceiling() -> None:
    train = TRAIN | {
        "backend": "cuda",
        "device": "NVIDIA H100 80GB HBM3",
        "world_size": 2,
        "flops": FLOPS,
        "gemm": GEMM,
    }
    figures = compute(train, 10_000.0)  # samples/s of both devices
    model = 24.3e9 * 10_000 / 1e12  # 243 TFLOP/s
    assert figures["model_tflops"] == pytest.approx(model, rel=1e-3)
    assert figures["peak_tflops_per_device"] == 989.0  # H100 SXM, bf16 dense
    assert figures["mfu"] == pytest.approx(model / (2 * 989.0), rel=1e-3)
    assert figures["gemm_fraction"] == pytest.approx(model / (2 * 800.0), rel=1e-3)
    assert figures["not_measured"] is None


def test_compute_on_the_cpu_has_a_ceiling_fraction_and_no_mfu() -> None:
    train = TRAIN | {"backend": "cpu", "device": "cpu (x86_64)", "world_size": 1}
    figures = compute(train | {"flops": FLOPS, "gemm": GEMM | {"gemm_tflops": 0.2}}, 2.0)
    assert figures["mfu"] is None and figures["peak_note"] == "cpu: no published dense peak"
    assert figures["gemm_fraction"] == pytest.approx(24.3e9 * 2 / 1e12 / 0.2, rel=1e-3)


def test_compute_without_a_measured_throughput_says_why() -> None:
    figures = compute(TRAIN | {"flops": FLOPS, "gemm": GEMM}, None)
    assert figures["model_tflops"] is None and figures["gemm_fraction"] is None
    assert "no measured throughput" in figures["not_measured"]["model_tflops"]
