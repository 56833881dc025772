"""The device layer for PyTorch: cpu | cuda | rocm | gaudi.

Resolves a backend name into a torch device, the autocast dtype, memory format,
Gaudi lazy-mode hooks (mark_step), the optimizer implementation and what the profiler
records (activities, the table's sort key, the allocator's memory history). A backend
whose runtime is missing fails at once with BackendUnavailableError.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import cast

import torch

from accelpipe.core.errors import BackendUnavailableError
from accelpipe.devices import resolve_precision, usable_threads
from accelpipe.devices.frameworks import check_supported

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}
# Alloc/free events the memory history keeps (a ring buffer of a few KB per entry).
MEMORY_HISTORY_ENTRIES = 100_000


# The profiler activity that records each backend's device (ROCm's HIP is CUDA's activity).
_DEVICE_ACTIVITIES = {"cuda": "CUDA", "rocm": "CUDA", "gaudi": "HPU"}


def profiler_device_activity(backend: str) -> torch.profiler.ProfilerActivity | None:
    """The profiler activity of `backend`'s device; None for the cpu, and where this torch has
    none. ProfilerActivity.HPU differs across the supported releases: stock torch 2.6 has
    none (Habana's 2.6 build, the gaudi image's, adds it), 2.13 has it. Without it a gaudi
    run's profile records the host alone and its table sorts by CPU time."""
    name = _DEVICE_ACTIVITIES.get(backend)
    return getattr(torch.profiler.ProfilerActivity, name, None) if name else None


@dataclass
class Device:
    """A resolved backend: everything the engines need to know about the hardware."""

    backend: str
    torch_device: torch.device
    name: str
    precision: str
    channels_last: bool = False
    htcore: ModuleType | None = field(default=None, repr=False)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return _DTYPES[self.precision]

    @property
    def lazy_mode(self) -> bool:
        return self.htcore is not None and os.environ.get("PT_HPU_LAZY_MODE", "1") == "1"

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """Mixed-precision context for forward + loss (no-op for fp32)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.torch_device.type, dtype=self.autocast_dtype)

    def mark_step(self) -> None:
        """Gaudi lazy mode: flush the accumulated graph (after backward and after the step)."""
        if self.htcore is not None and self.lazy_mode:
            self.htcore.mark_step()

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        model = model.to(self.torch_device)
        if self.channels_last:
            # Module.to takes memory_format (documented); torch's overloads leave it out
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        return model

    def to_device(self, tensor: torch.Tensor, *, image: bool = False) -> torch.Tensor:
        """Move a batch tensor; images (4D) take the channels-last layout when enabled."""
        tensor = tensor.to(self.torch_device, non_blocking=True)
        if image and self.channels_last and tensor.dim() == 4:
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        return tensor

    def compile(self, model: torch.nn.Module) -> torch.nn.Module:
        """Graph mode: torch.compile, with Habana's backend on Gaudi."""
        # A compiled module is a torch.nn.Module (OptimizedModule); torch types it a callable.
        if self.backend == "gaudi":
            return cast(torch.nn.Module, torch.compile(model, backend="hpu_backend"))
        return cast(torch.nn.Module, torch.compile(model))

    def grad_scaler(self) -> torch.amp.GradScaler:
        """Loss scaling for fp16 autocast (its gradients underflow); a no-op otherwise."""
        return torch.amp.GradScaler(
            self.torch_device.type, enabled=self.precision == "fp16" and not self.htcore
        )

    def adamw(self, params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float):
        """AdamW; Habana's fused implementation on Gaudi when it is installed."""
        if self.backend == "gaudi":
            with contextlib.suppress(ImportError):
                from habana_frameworks.torch.hpex.optimizers import FusedAdamW

                return FusedAdamW(params, lr=lr, weight_decay=weight_decay)
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)

    def peak_memory(self) -> tuple[int | None, str | None]:
        """The most memory this process's tensors held on the device since it started (bytes)
        and the call that reported it: the caching allocator's peak on cuda and rocm (HIP
        through torch.cuda), Habana's on gaudi; (None, None) on the cpu, which keeps no count.

        Only the cpu path ran here (no GPU or HPU); the others are written from PyTorch's and
        Habana's documentation and tested against fakes.
        """
        if self.backend == "cpu":
            return None, None
        # torch.hpu is registered by habana_frameworks.torch; ROCm's HIP is torch.cuda.
        api = "hpu" if self.backend == "gaudi" else "cuda"
        peak = getattr(torch, api).max_memory_allocated(self.torch_device)
        return peak, f"torch.{api}.max_memory_allocated"

    def profiler_activities(self) -> list[torch.profiler.ProfilerActivity]:
        """The host, and the device where this torch's profiler can record it."""
        device = profiler_device_activity(self.backend)
        return [torch.profiler.ProfilerActivity.CPU] + ([device] if device is not None else [])

    def profiler_sort_key(self) -> str:
        """What the profiler's key-averages table is sorted by: device self time where the
        profiler records the device, else CPU self time."""
        if len(self.profiler_activities()) > 1:
            return "self_device_time_total"
        return "self_cpu_time_total"

    @contextlib.contextmanager
    def memory_history(self, max_entries: int = MEMORY_HISTORY_ENTRIES) -> Iterator[MemoryHistory]:
        """Record the caching allocator's alloc/free history while open (CUDA, and ROCm
        through torch.cuda), for `MemoryHistory.dump`; on cpu and gaudi nothing is recorded."""
        recording = self.backend in ("cuda", "rocm")
        if recording:
            torch.cuda.memory._record_memory_history(max_entries=max_entries)
        history = MemoryHistory(recording)
        try:
            yield history
        finally:
            history.stop()


class MemoryHistory:
    """The allocator's memory history, dumped as the snapshot https://pytorch.org/memory_viz
    opens (segments, blocks with their allocation stacks, and the alloc/free timeline).

    Written from PyTorch's "Understanding CUDA Memory Usage" page; it could not run here (no
    GPU): the tests check the calls against fakes of torch.cuda.memory's functions.
    """

    def __init__(self, recording: bool) -> None:
        self.recording = recording

    def dump(self, path: Path) -> bool:
        """Write the snapshot to `path` and stop recording; False when nothing is recorded."""
        if not self.recording:
            return False
        torch.cuda.memory._dump_snapshot(str(path))
        self.stop()
        return True

    def stop(self) -> None:
        if self.recording:
            torch.cuda.memory._record_memory_history(enabled=None)
            self.recording = False


def resolve(
    backend: str,
    precision: str = "auto",
    channels_last: bool = False,
    index: int = 0,
    auto: dict[str, str] | None = None,
) -> Device:
    """Check the backend's runtime is present and return its Device.

    `index` picks the device of a multi-device job (one process per device: its LOCAL_RANK).
    `auto` overrides what precision "auto" means per backend for one workload.
    """
    check_supported("pytorch", torch.__version__)
    precision = resolve_precision(backend, precision, auto)
    resolver = {"cpu": _cpu, "cuda": _cuda, "rocm": _rocm, "gaudi": _gaudi}[backend]
    return resolver(precision, channels_last, index)


def _cpu(precision: str, channels_last: bool, index: int = 0) -> Device:
    # One CPU device however many processes share it. The release is in the name, as the TF
    # cpu device's: runs of one host under two torch releases are told apart in results/compare.
    threads = torch.get_num_threads()
    name = f"cpu ({platform.machine()}, {threads} threads, PyTorch {torch.__version__})"
    return Device("cpu", torch.device("cpu"), name, precision, channels_last)


def _require_gpu(backend: str, build_has_it: bool, stack: str) -> None:
    if not build_has_it:
        raise BackendUnavailableError(
            f"backend '{backend}' needs a PyTorch build with {stack}; this one is "
            f"torch {torch.__version__} without it"
        )
    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            f"backend '{backend}': PyTorch has {stack} but sees no device "
            "(check the driver and the visibility variables)"
        )


def _require_index(backend: str, index: int) -> None:
    count = torch.cuda.device_count()
    if index >= count:
        raise BackendUnavailableError(
            f"backend '{backend}': process {index} of a multi-device job needs device {index} "
            f"but {count} are visible (check the visibility variables and accelerators.pool)"
        )


def _cuda(precision: str, channels_last: bool, index: int = 0) -> Device:
    _require_gpu("cuda", torch.version.cuda is not None, "CUDA")
    _require_index("cuda", index)
    name = torch.cuda.get_device_name(index)
    return Device("cuda", torch.device("cuda", index), name, precision, channels_last)


def _rocm(precision: str, channels_last: bool, index: int = 0) -> Device:
    # ROCm builds of PyTorch expose HIP devices through the torch.cuda API.
    _require_gpu("rocm", getattr(torch.version, "hip", None) is not None, "ROCm/HIP")
    _require_index("rocm", index)
    name = torch.cuda.get_device_name(index)
    return Device("rocm", torch.device("cuda", index), name, precision, channels_last)


def _gaudi(precision: str, channels_last: bool, index: int = 0) -> Device:
    # Each process opens the one device "hpu"; the Habana runtime gives each process its own
    # module, so `index` is not needed here.
    os.environ.setdefault("PT_HPU_LAZY_MODE", "1")
    try:
        import habana_frameworks.torch.core as htcore
    except ImportError as err:
        raise BackendUnavailableError(
            f"backend 'gaudi' needs habana_frameworks.torch (the Gaudi PyTorch stack): {err}"
        ) from None
    # torch.hpu: registered by habana_frameworks.torch, unknown to torch's own type hints
    if not torch.hpu.is_available():  # type: ignore[attr-defined]
        raise BackendUnavailableError(
            "backend 'gaudi': habana_frameworks loaded but no HPU is visible"
        )
    name = torch.hpu.get_device_name(0)  # type: ignore[attr-defined]
    return Device("gaudi", torch.device("hpu"), name, precision, channels_last, htcore)


def limit_threads(threads: int) -> None:
    """Intra-op threads: the rule's `threads`, at most the CPUs we may run on."""
    torch.set_num_threads(usable_threads(threads))
