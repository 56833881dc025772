"""A measured matmul ceiling for PyTorch: square products on the run's device and precision.

`measure_gemm_tflops` multiplies two `size` x `size` matrices of the precision's dtype
(bf16, fp16; fp32 as the framework's switches leave it: full fp32 matmuls by default,
TF32 where allowed) a few times after a warm-up and reports the rate at 2 * size**3 FLOPs a
product. It is a bounded probe, not a search for the best shape: the backend's plan
(`flops.probe_plan`: 8192 on an accelerator, 1024 on the CPU) is halved while the last warm-up
product says the timed ones would overrun the plan's budget, so its cost stays within a few
budgets whatever the dtype's speed on the device.
The device is synchronised before the clock starts and before it stops (CUDA and ROCm through
torch.cuda, Gaudi through torch.hpu after a lazy-mode mark_step); only the cpu path ran here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from accelpipe.core.flops import GemmResult, fit_probe, gemm_tflops
from accelpipe.devices.torch_device import Device

MEASURED_BY = "torch.matmul"
WARMUP = 2
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def tf32_switches(backend: str) -> dict[str, bool]:
    """Whether this process lets fp32 matmuls and convolutions run as TF32 on cuda
    (`torch.get_float32_matmul_precision()` other than "highest"; cuDNN's `allow_tf32`);
    all false on other backends, where PyTorch's switches do not mean TF32."""
    if backend != "cuda":
        return {"matmul": False, "conv": False}
    return {
        "matmul": torch.get_float32_matmul_precision() != "highest",
        "conv": bool(torch.backends.cudnn.allow_tf32),
    }


def _synchronize(device: Device) -> None:
    if device.backend in ("cuda", "rocm"):
        torch.cuda.synchronize(device.torch_device)
    elif device.backend == "gaudi":
        device.mark_step()
        torch.hpu.synchronize()  # type: ignore[attr-defined]  # habana_frameworks adds it


def _operand(size: int, dtype: torch.dtype, device: Device, seed: int) -> torch.Tensor:
    """A random size x size matrix from a generator of its own (the run's random streams
    are left alone), made on the device where it has generators, else on the CPU and moved."""
    try:
        generator = torch.Generator(device=device.torch_device).manual_seed(seed)
        return torch.randn(
            size, size, generator=generator, device=device.torch_device, dtype=torch.float32
        ).to(dtype)
    except RuntimeError:
        generator = torch.Generator().manual_seed(seed)
        matrix = torch.randn(size, size, generator=generator, dtype=torch.float32)
        return matrix.to(dtype).to(device.torch_device)


def _warm_up(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, device: Device, products: int
) -> float:
    """Run `products` untimed products; the seconds the last one took (0.0 with none)."""
    seconds = 0.0
    for _ in range(products):
        _synchronize(device)
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        device.mark_step()
        _synchronize(device)
        seconds = time.perf_counter() - start
    return seconds


def measure_gemm_tflops(
    device: Device,
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
    operands: list[torch.Tensor] = []  # the last warmed-up size's a, b and out

    def warm(n: int) -> float:
        a, b = _operand(n, dtype, device, 0), _operand(n, dtype, device, 1)
        out = torch.empty_like(a)
        operands[:] = [a, b, out]
        return _warm_up(a, b, out, device, warmup)

    with torch.no_grad():
        size, repeats = fit_probe(device.backend, size, repeats, warmup, budget_s, warm)
        a, b, out = operands
        _synchronize(device)
        start = clock()
        for _ in range(repeats):
            torch.matmul(a, b, out=out)
            device.mark_step()
        _synchronize(device)
        seconds = clock() - start
    tf32 = dtype == torch.float32 and tf32_switches(device.backend)["matmul"]
    return GemmResult(
        gemm_tflops=gemm_tflops(size, repeats, seconds),
        size=size,
        repeats=repeats,
        seconds=seconds,
        dtype=str(dtype).removeprefix("torch."),
        precision=device.precision,
        tf32=tf32,
        measured_by=MEASURED_BY,
    )
