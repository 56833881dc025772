"""A measured matmul ceiling for TensorFlow: square products on the run's device and precision.

The TensorFlow twin of devices.torch_gemm (the same plan, `flops.probe_plan`, and result): eager
`tf.linalg.matmul` of two `size` x `size` matrices of the precision's dtype placed on the
run's device (bf16 and fp16 as Keras' mixed policies compute; fp32 as TensorFlow leaves it,
TF32 on Ampere and later GPUs unless switched off), a warm-up, then a fixed number of timed
products (the plan's size halved while a warm product says they would overrun its budget).
Eager ops on a GPU are queued on one stream, so reading one element of the last
product back waits for all of them: that read ends the timing (and the warm-up). No graph:
Grappler could merge identical products in a tf.function. Only the cpu path ran here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from accelpipe.core.flops import GemmResult, fit_probe, gemm_tflops
from accelpipe.core.keras2 import tf
from accelpipe.devices.tf_device import TFDevice

MEASURED_BY = "tf.linalg.matmul (eager)"
WARMUP = 2
_DTYPES = {"bf16": tf.bfloat16, "fp16": tf.float16, "fp32": tf.float32}


def tf32_switches(backend: str) -> dict[str, bool]:
    """Whether TensorFlow lets fp32 matmuls and convolutions run as TF32 on cuda (one switch
    for both, `tf.config.experimental.tensor_float_32_execution_enabled()`, on by default);
    all false on other backends."""
    enabled = backend == "cuda" and bool(tf.config.experimental.tensor_float_32_execution_enabled())
    return {"matmul": enabled, "conv": enabled}


def _wait(product: tf.Tensor) -> None:
    """Block until `product` (and every op queued before it on the device) has run."""
    product[0, 0].numpy()


def _operands(size: int, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor]:
    # stateless: the run's random streams are left alone
    a, b = (
        tf.cast(tf.random.stateless_normal((size, size), seed=[0, seed]), dtype) for seed in (0, 1)
    )
    return a, b


def _warm_up(a: tf.Tensor, b: tf.Tensor, products: int) -> float:
    """Run `products` untimed products; the seconds the last one took (0.0 with none)."""
    _wait(a)
    seconds = 0.0
    for _ in range(products):
        start = time.perf_counter()
        _wait(tf.linalg.matmul(a, b))
        seconds = time.perf_counter() - start
    return seconds


def measure_gemm_tflops(
    device: TFDevice,
    *,
    size: int | None = None,
    repeats: int | None = None,
    warmup: int = WARMUP,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> GemmResult:
    """The rate of `repeats` products of two `size` x `size` matrices on `device` at its
    precision, after `warmup` untimed ones. Defaults from the backend's `flops.probe_plan`,
    whose size is halved while the warm-up says the timed products would overrun `budget_s`;
    a `size` given is kept."""
    dtype = _DTYPES[device.precision]
    operands: list[tf.Tensor] = []  # the last warmed-up size's a and b

    def warm(n: int) -> float:
        a, b = _operands(n, dtype)
        operands[:] = [a, b]
        return _warm_up(a, b, warmup)

    with tf.device(device.device):
        size, repeats = fit_probe(device.backend, size, repeats, warmup, budget_s, warm)
        a, b = operands
        _wait(a)
        start = clock()
        product = a
        for _ in range(repeats):
            product = tf.linalg.matmul(a, b)
        _wait(product)
        seconds = clock() - start
    return GemmResult(
        gemm_tflops=gemm_tflops(size, repeats, seconds),
        size=size,
        repeats=repeats,
        seconds=seconds,
        dtype=dtype.name,
        precision=device.precision,
        tf32=dtype == tf.float32 and tf32_switches(device.backend)["matmul"],
        measured_by=MEASURED_BY,
    )
