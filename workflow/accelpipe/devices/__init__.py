"""The one device layer: cpu | cuda | rocm | gaudi, for both frameworks.

What a backend means independently of the framework is here: the names, what precision
`auto` resolves to (the one place: the trainers, the preflight, the doctor and the benchmarks
ask `resolve_precision`), and how many CPU threads a stage may use. Each framework resolves a
backend into its own device object in its module, imported only by that framework's engine:
`torch_device` (torch.device, autocast, Gaudi lazy mode) and `tf_device` (visible devices,
Keras mixed-precision policies, Habana's TF module), each with a `peak_memory()`; the
train stage's memory facts (`memory_facts`) add the host's side here. A backend whose runtime
is missing fails at once with BackendUnavailableError.
"""

from __future__ import annotations

import os
import re
import resource
from collections.abc import Mapping
from typing import Any

from accelpipe.config import registry
from accelpipe.core.errors import ConfigError

BACKENDS = ("cpu", "cuda", "rocm", "gaudi")
PRECISIONS = ("bf16", "fp16", "fp32")
# bf16 is what the reference recipes use on accelerators; on CPU it is usually slower than
# fp32 without AMX, so auto means fp32 there.
AUTO_PRECISION = {"cpu": "fp32", "cuda": "bf16", "rocm": "bf16", "gaudi": "bf16"}
# A GPU model in a device name: A100 in "NVIDIA A100-SXM4-80GB", V100, H100, MI300X.
_GPU_MODEL = re.compile(r"(?<![A-Z0-9])([A-Z]{1,2}\d{1,4}[A-Z]?)(?![A-Z0-9])")
# torch.hpu.get_device_name(): GAUDI (first generation), GAUDI2, GAUDI3.
_GAUDI = re.compile(r"GAUDI(\d*)")


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(
            f"config key 'backend': unknown backend {backend!r} ({', '.join(BACKENDS)})"
        )


def resolve_precision(
    backend: str, precision: str = "auto", auto: Mapping[str, str] | None = None
) -> str:
    """`precision` with "auto" resolved for `backend`; `auto` overrides it per workload (its
    registry entry's `auto_precision`: `workload_auto`)."""
    check_backend(backend)
    if precision == "auto":
        precision = {**AUTO_PRECISION, **(auto or {})}[backend]
    if precision not in PRECISIONS:
        raise ConfigError(f"config key 'precision': unknown precision {precision!r}")
    return precision


def workload_auto(workload: str) -> dict[str, str]:
    """What "auto" means for `workload` where it departs from the backend's default."""
    return dict(registry.workload(workload).auto_precision)


def workload_precision(backend: str, precision: str, workload: str) -> str:
    """`precision` as `workload` trains in it on `backend` ("auto" resolved its way)."""
    return resolve_precision(backend, precision, workload_auto(workload))


def usable_threads(threads: int) -> int:
    """The rule's `threads`, but never more than the CPUs this process may run on.

    Snakemake scales `threads` to `--cores`, which can exceed the real cores.
    """
    return max(1, min(threads, len(os.sched_getaffinity(0))))


def peak_host_rss_bytes() -> int:
    """This process's peak resident set size (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_facts(peak_device: tuple[int | None, str | None]) -> dict[str, Any]:
    """The train stage.json's memory facts: the device's peak allocated bytes and what
    reported it (a device's `peak_memory()`; None on the CPU), and this process's peak RSS."""
    peak, source = peak_device
    return {
        "peak_device_memory_bytes": peak,
        "device_memory_source": source,
        "peak_host_rss_bytes": peak_host_rss_bytes(),
    }


def device_family(backend: str, device: str) -> str | None:
    """The family a published figure names, from the train stage's backend and device name:
    a GPU's model (cuda, rocm), a Gaudi's generation (gaudi: "Gaudi", "Gaudi2", ... from the
    card type both engines name the device by); None on the cpu and where the name does not
    say."""
    name = device.strip().upper()
    if backend in ("cuda", "rocm"):
        match = _GPU_MODEL.search(name)
        return match.group(1) if match else None
    if backend == "gaudi":
        match = _GAUDI.fullmatch(name)
        return f"Gaudi{match.group(1)}" if match else None
    return None
