"""A measured matmul ceiling for TensorFlow: square products on the run's device and precision.

The TensorFlow twin of devices.torch_gemm (same sizes, repetitions and result): eager
`tf.linalg.matmul` of two `size` x `size` matrices of the precision's dtype placed on the
run's device (bf16 and fp16 as Keras' mixed policies compute; fp32 as TensorFlow leaves it,
TF32 on Ampere and later GPUs unless switched off), a warm-up, then a fixed number of timed
products. Eager ops on a GPU are queued on one stream, so reading one element of the last
product back waits for all of them: that read ends the timing (and the warm-up). No graph:
Grappler could merge identical products in a tf.function. Only the cpu path ran here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from accelpipe.devices.tf_device import TFDevice
from accelpipe.flops import GemmResult, gemm_tflops
from accelpipe.keras2 import tf

MEASURED_BY = "tf.linalg.matmul (eager)"
SIZES = {"cpu": 2048}  # anything else: ACCELERATOR_SIZE
ACCELERATOR_SIZE = 8192
REPEATS = {"cpu": 4}  # anything else: ACCELERATOR_REPEATS
ACCELERATOR_REPEATS = 20
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


def measure_gemm_tflops(
    device: TFDevice,
    *,
    size: int | None = None,
    repeats: int | None = None,
    warmup: int = WARMUP,
    clock: Callable[[], float] = time.perf_counter,
) -> GemmResult:
    """The rate of `repeats` products of two `size` x `size` matrices on `device` at its
    precision, after `warmup` untimed ones (defaults per backend: SIZES, REPEATS)."""
    backend = device.backend
    size = size or SIZES.get(backend, ACCELERATOR_SIZE)
    repeats = repeats or REPEATS.get(backend, ACCELERATOR_REPEATS)
    dtype = _DTYPES[device.precision]
    with tf.device(device.device):
        # stateless: the run's random streams are left alone
        a, b = (
            tf.cast(tf.random.stateless_normal((size, size), seed=[0, seed]), dtype)
            for seed in (0, 1)
        )
        product = a
        for _ in range(warmup):
            product = tf.linalg.matmul(a, b)
        _wait(product)
        start = clock()
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
        tf32=dtype == tf.float32 and tf32_switches(backend)["matmul"],
        measured_by=MEASURED_BY,
    )
