"""The TensorFlow matmul ceiling on this machine's CPU, and its arithmetic against a fake
clock."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from accelpipe.core import flops
from accelpipe.core.keras2 import tf
from accelpipe.devices import tf_device, tf_gemm

pytestmark = pytest.mark.tensorflow


def _clock(*times: float) -> Callable[[], float]:
    ticks = iter(times)
    return lambda: next(ticks)


@pytest.mark.parametrize(
    ("precision", "dtype"), [("fp32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")]
)
def test_cpu_probe_gives_a_positive_finite_rate_at_the_precision(
    precision: str, dtype: str
) -> None:
    device = tf_device.resolve("cpu", precision)
    result = tf_gemm.measure_gemm_tflops(device, size=128, repeats=3, warmup=1)
    assert math.isfinite(result.gemm_tflops) and result.gemm_tflops > 0
    assert (result.size, result.repeats, result.precision, result.dtype) == (
        128,
        3,
        precision,
        dtype,
    )
    assert result.seconds > 0 and not result.tf32
    assert result.measured_by.startswith("tf.linalg.matmul")


def test_rate_is_two_n_cubed_times_repeats_over_the_clock() -> None:
    device = tf_device.resolve("cpu", "fp32")
    result = tf_gemm.measure_gemm_tflops(
        device, size=64, repeats=4, warmup=1, clock=_clock(3.0, 5.0)
    )
    assert result.seconds == 2.0
    assert result.gemm_tflops == pytest.approx(2 * 64**3 * 4 / 2.0 / 1e12)


def test_defaults_are_the_backends_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(flops.PROBE_PLANS, "cpu", flops.ProbePlan(size=48, repeats=2, budget_s=1e9))
    device = tf_device.resolve("cpu", "fp32")
    result = tf_gemm.measure_gemm_tflops(device, clock=_clock(0.0, 1.0))
    assert (result.size, result.repeats) == (48, 2)


def test_a_probe_over_its_budget_halves_its_size_down_to_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(
        flops.PROBE_PLANS, "cpu", flops.ProbePlan(size=1024, repeats=2, budget_s=0.0)
    )
    device = tf_device.resolve("cpu", "bf16")
    assert tf_gemm.measure_gemm_tflops(device).size == flops.MIN_PROBE_SIZE
    # a size asked for is kept, and without a warm-up there is nothing to judge it by
    assert tf_gemm.measure_gemm_tflops(device, size=512, repeats=1).size == 512
    assert tf_gemm.measure_gemm_tflops(device, warmup=0).size == 1024


def test_the_probe_leaves_the_global_random_stream_alone() -> None:
    tf.random.set_seed(5)
    expected = tf.random.uniform((3,)).numpy()
    tf.random.set_seed(5)
    tf_gemm.measure_gemm_tflops(tf_device.resolve("cpu"), size=32, repeats=1, warmup=0)
    assert (tf.random.uniform((3,)).numpy() == expected).all()


def test_tf32_switches_are_cuda_only_and_follow_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tf_gemm.tf32_switches("cpu") == {"matmul": False, "conv": False}
    monkeypatch.setattr(tf.config.experimental, "tensor_float_32_execution_enabled", lambda: True)
    assert tf_gemm.tf32_switches("cuda") == {"matmul": True, "conv": True}
    assert tf_gemm.tf32_switches("rocm") == {"matmul": False, "conv": False}
    monkeypatch.setattr(tf.config.experimental, "tensor_float_32_execution_enabled", lambda: False)
    assert tf_gemm.tf32_switches("cuda") == {"matmul": False, "conv": False}
