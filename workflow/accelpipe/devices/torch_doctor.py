"""`accelpipe doctor`'s questions to PyTorch: the build, the devices it reaches, bf16 and the
collective backend, for one backend (`probe`). The judging is accelpipe.devices.doctor's.

- cuda: torch.version.cuda, torch.cuda.is_available / device_count / get_device_name,
  is_bf16_supported (natively: without emulation where torch has that argument) and the
  compute capability (8.0+ for bf16), torch.distributed.is_nccl_available and NCCL's version;
  free memory from torch.cuda.mem_get_info.
- rocm: the same through torch.cuda, built with torch.version.hip; RCCL is NCCL's name there.
- gaudi: habana_frameworks.torch (which registers torch.hpu), torch.hpu's devices, HCCL from
  habana_frameworks.torch.distributed.hccl; every Gaudi computes in bf16.

A call that raises (a driver that fails to initialise) becomes the reason in the facts, never
an exception: the doctor reports, it does not crash. Only the cpu path runs here; the others
are tested with torch's functions and a `habana_frameworks` package stood in for.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from accelpipe.devices.doctor import FrameworkFacts, per_device
from accelpipe.devices.frameworks import unsupported

T = TypeVar("T")
MIB = 2**20
_FIX_BUILD = {
    "cuda": "run in the cuda-pytorch image, or install a CUDA build of torch (pip install "
    "torch --index-url https://download.pytorch.org/whl/cu124, the CUDA release the driver "
    "supports)",
    "rocm": "run in the rocm-pytorch image, or install a ROCm build of torch (pip install "
    "torch --index-url https://download.pytorch.org/whl/rocm6.4)",
    "gaudi": "run in the gaudi-pytorch image (Habana's PyTorch installer image of the host "
    "driver's SynapseAI release)",
}


def probe(backend: str) -> FrameworkFacts:
    """What PyTorch says about `backend` (cpu, cuda, rocm or gaudi)."""
    facts = _probe(backend)
    facts.unsupported = unsupported("pytorch", torch.__version__)
    return facts


def _probe(backend: str) -> FrameworkFacts:
    if backend in ("cuda", "rocm"):
        return _gpu(backend)
    if backend == "gaudi":
        return _gaudi()
    return FrameworkFacts(
        "pytorch", f"torch {torch.__version__} ({_built_with()})", True, device_api="torch"
    )


def _built_with() -> str:
    if torch.version.cuda:
        return f"built with CUDA {torch.version.cuda}"
    if getattr(torch.version, "hip", None):
        return f"built with ROCm/HIP {torch.version.hip}"
    return "a CPU build"


def _ask(call: Callable[[], T], what: str) -> tuple[T | None, str | None]:
    """(call(), None), or (None, why) where it raises."""
    try:
        return call(), None
    except Exception as err:  # a failing driver raises RuntimeError, AssertionError, ...
        return None, f"{what} raised {type(err).__name__}: {str(err).strip() or 'no message'}"


def _gpu(backend: str) -> FrameworkFacts:
    cuda = backend == "cuda"
    attribute = "cuda" if cuda else "hip"
    built = getattr(torch.version, attribute, None)
    stack = "CUDA" if cuda else "ROCm/HIP"
    if not built:
        return FrameworkFacts(
            "pytorch",
            f"torch {torch.__version__} is {_built_with()}, not one with {stack} "
            f"(torch.version.{attribute} is None)",
            False,
            _FIX_BUILD[backend],
            device_api="torch.cuda",
        )
    facts = FrameworkFacts(
        "pytorch",
        f"torch {torch.__version__}, built with {stack} {built}",
        True,
        device_api="torch.cuda",
    )
    available, why = _ask(torch.cuda.is_available, "torch.cuda.is_available()")
    count, why_count = _ask(torch.cuda.device_count, "torch.cuda.device_count()")
    count = count or 0
    if not available or not count:
        facts.device_names = []
        facts.unavailable = (
            why
            or why_count
            or (f"torch.cuda.is_available() is {available}, torch.cuda.device_count() is {count}")
        )
    else:
        names = [
            _ask(functools.partial(torch.cuda.get_device_name, i), "get_device_name")[0]
            for i in range(count)
        ]
        facts.device_names = [str(n) if n else f"device {i}" for i, n in enumerate(names)]
        facts.bf16, facts.bf16_basis = _cuda_bf16(cuda, count)
        facts.memory = _memory(count)
    facts.collective, facts.collective_name, facts.collective_basis = _nccl(cuda)
    facts.collective_fix = (
        f"use a torch build with {'NCCL' if cuda else 'RCCL'} ({_FIX_BUILD[backend]}), or train "
        "on one device (train.devices: 1, nodes: 1)"
    )
    return facts


def _cuda_bf16(cuda: bool, count: int) -> tuple[bool | None, str]:
    """Native bf16 on every device: is_bf16_supported (without emulation, which torch >= 2.3
    counts in by default) and, on cuda, compute capability 8.0+ on each device."""
    supported, why = _ask(_native_bf16, "torch.cuda.is_bf16_supported()")
    if supported is None:
        return None, why or "torch.cuda.is_bf16_supported() said nothing"
    basis = f"torch.cuda.is_bf16_supported() is {supported}"
    if not cuda:
        return bool(supported), basis
    caps = [
        _ask(functools.partial(torch.cuda.get_device_capability, i), "capability")[0]
        for i in range(count)
    ]
    known = {i: cap for i, cap in enumerate(caps) if cap is not None}
    old = [i for i, cap in known.items() if tuple(cap) < (8, 0)]
    where = per_device({str(i): f"{cap[0]}.{cap[1]}" for i, cap in known.items()})
    return bool(supported) and not old, f"{basis}; compute capability {where} (bf16 needs 8.0+)"


def _native_bf16() -> bool:
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch < 2.3: no emulation, no argument
        return bool(torch.cuda.is_bf16_supported())


def _memory(count: int) -> dict[str, tuple[float, float]]:
    memory = {}
    for i in range(count):
        sizes, _ = _ask(functools.partial(torch.cuda.mem_get_info, i), "mem_get_info")
        if sizes is not None:
            free, total = sizes
            memory[str(i)] = (free / MIB, total / MIB)
    return memory


def _nccl(cuda: bool) -> tuple[bool | None, str, str]:
    name = "NCCL" if cuda else "RCCL (NCCL's ROCm build)"
    dist = torch.distributed
    if not dist.is_available():
        return False, name, "torch.distributed.is_available() is False"
    available, why = _ask(dist.is_nccl_available, "torch.distributed.is_nccl_available()")
    if available is None:
        return None, name, why or ""
    basis = f"torch.distributed.is_nccl_available() is {available}"
    version, _ = _ask(torch.cuda.nccl.version, "torch.cuda.nccl.version()")
    if available and version is not None:
        text = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        basis += f", version {text}"
    return bool(available), name, basis


def _gaudi() -> FrameworkFacts:
    # As torch_device: lazy mode unless the user chose otherwise, set before the import.
    os.environ.setdefault("PT_HPU_LAZY_MODE", "1")
    loading = None
    try:
        habana = importlib.import_module("habana_frameworks.torch")
        importlib.import_module("habana_frameworks.torch.core")
    except ImportError as err:
        return FrameworkFacts(
            "pytorch",
            f"torch {torch.__version__} without habana_frameworks.torch ({err})",
            False,
            _FIX_BUILD["gaudi"],
            device_api="torch.hpu",
        )
    except Exception as err:  # installed, but the bridge does not start (no driver, ...)
        habana = None
        loading = f"importing habana_frameworks.torch raised {type(err).__name__}: {err}"
    version = getattr(habana, "__version__", None)
    facts = FrameworkFacts(
        "pytorch",
        f"torch {torch.__version__} with habana_frameworks.torch"
        + (f" {version}" if version else ""),
        True,
        device_api="torch.hpu",
        bf16=True,
        bf16_basis="every Gaudi generation computes in bf16",
    )
    hpu: Any = None if loading else getattr(torch, "hpu", None)
    available, why = _ask(lambda: bool(hpu and hpu.is_available()), "torch.hpu.is_available()")
    why = loading or why
    count = (_ask(hpu.device_count, "torch.hpu.device_count()")[0] or 0) if available else 0
    if not count:
        facts.device_names = []
        facts.unavailable = why or f"torch.hpu.is_available() is {available}, {count} devices"
    else:
        name, _ = _ask(hpu.get_device_name, "torch.hpu.get_device_name()")
        facts.device_names = [str(name or "HPU")] * count
    try:
        importlib.import_module("habana_frameworks.torch.distributed.hccl")
        facts.collective, facts.collective_basis = True, "habana_frameworks.torch.distributed.hccl"
    except Exception as err:  # ImportError, or a bridge that does not start
        facts.collective, facts.collective_basis = False, f"no HCCL module ({err})"
    facts.collective_name = "HCCL"
    facts.collective_fix = f"{_FIX_BUILD['gaudi']}; it ships HCCL"
    return facts
