"""The PyTorch matmul ceiling on this machine's CPU, and its arithmetic against a fake clock."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from accelpipe.core import flops
from accelpipe.devices import torch_device, torch_gemm

pytestmark = pytest.mark.torch


def _clock(*times: float) -> Callable[[], float]:
    ticks = iter(times)
    return lambda: next(ticks)


@pytest.mark.parametrize(("precision", "dtype"), [("fp32", "float32"), ("bf16", "bfloat16")])
def test_cpu_probe_gives_a_positive_finite_rate_at_the_precision(
    precision: str, dtype: str
) -> None:
    device = torch_device.resolve("cpu", precision)
    result = torch_gemm.measure_gemm_tflops(device, size=128, repeats=3, warmup=1)
    assert math.isfinite(result.gemm_tflops) and result.gemm_tflops > 0
    assert (result.size, result.repeats, result.precision, result.dtype) == (
        128,
        3,
        precision,
        dtype,
    )
    assert result.seconds > 0 and not result.tf32
    assert result.measured_by == "torch.matmul"


def test_fp16_on_the_cpu_runs_too() -> None:
    result = torch_gemm.measure_gemm_tflops(
        torch_device.resolve("cpu", "fp16"), size=64, repeats=1, warmup=0
    )
    assert result.dtype == "float16" and result.gemm_tflops > 0


def test_rate_is_two_n_cubed_times_repeats_over_the_clock() -> None:
    device = torch_device.resolve("cpu", "fp32")
    result = torch_gemm.measure_gemm_tflops(
        device, size=64, repeats=5, warmup=1, clock=_clock(10.0, 10.5)
    )
    assert result.seconds == 0.5
    assert result.gemm_tflops == pytest.approx(2 * 64**3 * 5 / 0.5 / 1e12)


def test_defaults_are_the_backends_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(flops.PROBE_PLANS, "cpu", flops.ProbePlan(size=48, repeats=2, budget_s=1e9))
    device = torch_device.resolve("cpu", "fp32")
    result = torch_gemm.measure_gemm_tflops(device, clock=_clock(0.0, 1.0))
    assert (result.size, result.repeats) == (48, 2)


@pytest.mark.main_suite_only
def test_a_probe_over_its_budget_halves_its_size_down_to_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(
        flops.PROBE_PLANS, "cpu", flops.ProbePlan(size=1024, repeats=2, budget_s=0.0)
    )
    device = torch_device.resolve("cpu", "bf16")
    assert torch_gemm.measure_gemm_tflops(device).size == flops.MIN_PROBE_SIZE
    # a size asked for is kept, and without a warm-up there is nothing to judge it by
    assert torch_gemm.measure_gemm_tflops(device, size=512, repeats=1).size == 512
    assert torch_gemm.measure_gemm_tflops(device, warmup=0).size == 1024


def test_the_probe_leaves_the_global_random_stream_alone() -> None:
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    torch_gemm.measure_gemm_tflops(torch_device.resolve("cpu"), size=32, repeats=1, warmup=0)
    assert torch.equal(torch.rand(3), expected)


def test_tf32_switches_are_cuda_only_and_follow_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert torch_gemm.tf32_switches("cpu") == {"matmul": False, "conv": False}
    assert torch_gemm.tf32_switches("rocm") == {"matmul": False, "conv": False}
    # PyTorch's defaults: matmuls in full fp32, cuDNN convolutions in TF32
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert torch_gemm.tf32_switches("cuda") == {"matmul": False, "conv": True}
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert torch_gemm.tf32_switches("cuda") == {"matmul": True, "conv": True}
