"""What an event is, from its category and name, and which device a trace ran on.

Kineto's ``cat`` is its ActivityType. Roles used here:

* ``annotation``: a CPU ``user_annotation`` (``record_function``): a section or a step.
* ``mirror``: ``gpu_user_annotation`` and any other ``*_user_annotation``: the device copy of
  an annotation, never a section (it would count every section twice).
* ``kernel`` / ``gpu_memcpy`` / ``gpu_memset``: device activity.
* ``instant``: ``cpu_instant_event``, torch's instant events on the host; the ``[memory]``
  events of ``profile_memory=True`` among them (``traces.memory``). Rare without those, and
  decoded (not bulk) so that finding them costs no extra pass over the bytes.
* ``runtime``: host runtime and driver calls (``cuda_runtime``, ``cuda_driver``, a
  ``hip_runtime``-style category, Gaudi's ``hpu_op`` and ``privateuse1_runtime``); those with
  an ``args.correlation`` are the launches that kernels join to.
* ``other``: anything else; an unknown category whose name looks like a launch
  (``cu*``/``cuda*``/``hip*``/``syn*`` containing ``Launch``) is still taken as a runtime event.

Per producer: CUDA (CUPTI) launches are ``cudaLaunchKernel``, ``cudaLaunchKernelExC``,
``cudaLaunchCooperativeKernel``, ``cudaGraphLaunch``, ``cuLaunchKernel``, ``cuLaunchKernelEx``
and their ``_ptsz`` forms; ``cuda_sync`` / ``cuda_event`` rows are device hints, not activity.
ROCm (roctracer / rocprofiler-sdk) uses the same categories with HIP names (``hipLaunchKernel``,
``hipExtLaunchKernel``, ``hipModuleLaunchKernel``, ``hipExtModuleLaunchKernel``,
``hipLaunchCooperativeKernel``, ``hipGraphLaunch``). Gaudi (the habana_frameworks bridge's
kineto plugin, read from its source: no Gaudi trace was available) writes device ops as
``kernel`` events (pid = device, tid = engine) with recipe args and no ``correlation``.

``device`` is inferred from, in order: runtime names (``hip*``/``hsa_*`` → rocm, ``syn*`` →
hpu, ``cu*``/``cuda*`` → cuda) and categories (``hpu``/``synapse``/``habana`` → hpu, ``hip``
→ rocm), Gaudi recipe args on kernels (hpu); then, when there is device activity,
``deviceProperties`` (AMD/gfx → rocm, Gaudi/Habana → hpu), a ``privateuse1_*`` category (hpu:
the only such backend here), else cuda; with no device events at all, cpu.
"""

from __future__ import annotations

import re
from typing import Any

ANNOTATION, MIRROR, KERNEL, MEMCPY, MEMSET, RUNTIME, INSTANT, OTHER = (
    "annotation",
    "mirror",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "runtime",
    "instant",
    "other",
)
ACTIVITY_KINDS = (KERNEL, MEMCPY, MEMSET)

# Categories that make up the bulk of a trace and carry nothing we report: never decoded.
BULK_CATS = (
    "cpu_op",
    "python_function",
    "fwdbwd",
    "ac2g",
    "Trace",
    "Operator",  # cpu_op in traces from torch < 1.10
)
# Every category libkineto writes (its ActivityType names, plus flows and spans): seeing one
# is what tells a PyTorch profiler trace from another profiler's chrome trace.
KINETO_CATS = frozenset(
    {
        *BULK_CATS,
        "cpu_instant_event",
        "user_annotation",
        "gpu_user_annotation",
        "gpu_memcpy",
        "gpu_memset",
        "kernel",
        "external_correlation",
        "cuda_runtime",
        "cuda_driver",
        "cuda_sync",
        "cuda_event",
        "cuda_profiler_range",
        "overhead",
        "glow_runtime",
        "hpu_op",
        "xpu_runtime",
        "xpu_driver",
        "collective_comm",
        "hip_runtime",
    }
)
_KINETO_PREFIXES = ("privateuse1_", "mtia_")

_STEP_RE = re.compile(r"ProfilerStep#\d+")
_LAUNCH_RE = re.compile(r"(?:cuda|cu|hip|syn)(?:[A-Z_]\w*)?Launch\w*")
# Runtime call names that tell the vendor (looked at once per distinct name).
_NAME_HINTS = (
    (re.compile(r"hip[A-Z_]|hsa_"), "rocm"),
    (re.compile(r"syn[A-Z]"), "hpu"),
    (re.compile(r"cu(?:da)?[A-Z_]"), "cuda"),
)
_MEMCPY_CATS = frozenset({"gpu_memcpy", "memcpy"})
_MEMSET_CATS = frozenset({"gpu_memset", "memset"})
_HOST_RUNTIME_CATS = frozenset({"hpu_op"})  # kineto: "HPU host side runtime event"
_GPU_HINT_CATS = frozenset(
    {"gpu_user_annotation", "cuda_runtime", "cuda_driver", "cuda_sync", "cuda_event"}
)
HPU_KERNEL_ARGS = ("recipeId", "recipeName")  # Gaudi bridge metadata on device ops


# Runtime calls that launch exactly one kernel: the launch delay is measured from them
# (graph launches run many kernels, memcpy/memset calls no kernel).
_KERNEL_LAUNCH_RE = re.compile(
    r"(?:cudaLaunchKernel(?:ExC)?|cudaLaunchCooperativeKernel|cuLaunchKernel(?:Ex)?"
    r"|hipLaunchKernel|hipExtLaunchKernel|hipModuleLaunchKernel|hipExtModuleLaunchKernel"
    r"|hipLaunchCooperativeKernel)(?:_ptsz|_spt)?"
)
# Device op kinds, by name as HTA tells them (hta.utils.utils.get_kernel_type), plus RCCL and
# HCCL names HTA would call computation: communication, then memory, then "other" (HTA:
# names with Sync, or Memcpy/Memset not at the start), else computation.
COMPUTATION, COMMUNICATION, MEMORY, OTHER_KIND = "computation", "communication", "memory", "other"
DEVICE_KINDS = (COMPUTATION, COMMUNICATION, MEMORY, OTHER_KIND)
_COMM_RE = re.compile(r"nccl.*Kernel|rccl|hccl", re.IGNORECASE)
_HTA_COMM_RE = re.compile(r"nccl.*Kernel")
_MEMORY_RE = re.compile(r"Memcpy|Memset|dma")
_NOT_COMPUTE_RE = re.compile(r".*Memcpy|Memset|.*Sync")


def is_kernel_launch(name: Any) -> bool:
    return type(name) is str and _KERNEL_LAUNCH_RE.fullmatch(name) is not None


def op_kind(name: str) -> str:
    """The kind of a device op from its name (memcpy/memset events are named Memcpy/Memset)."""
    if _HTA_COMM_RE.match(name) or _COMM_RE.match(name):
        return COMMUNICATION
    if _MEMORY_RE.match(name):
        return MEMORY
    if _NOT_COMPUTE_RE.match(name):
        return OTHER_KIND
    return COMPUTATION


def is_kineto_category(cat: str) -> bool:
    return cat in KINETO_CATS or cat.startswith(_KINETO_PREFIXES)


def is_step(name: str) -> bool:
    return _STEP_RE.fullmatch(name) is not None


def looks_like_launch(name: Any) -> bool:
    return type(name) is str and _LAUNCH_RE.fullmatch(name) is not None


def category_role(cat: str, hints: set[str]) -> str:
    """Role of an event category; adds the device hints the category carries."""
    low = cat.lower()
    if "hpu" in low or "synapse" in low or "habana" in low:
        hints.add("hpu")
    if low.startswith("privateuse1"):
        hints.add("privateuse1")
    if "hip" in low:
        hints.add("rocm")
    if low == "user_annotation":
        role = ANNOTATION
    elif low.endswith("user_annotation"):
        role = MIRROR
    elif low == "kernel":
        role = KERNEL
    elif low in _MEMCPY_CATS:
        role = MEMCPY
    elif low in _MEMSET_CATS:
        role = MEMSET
    elif "runtime" in low or "driver" in low or low in _HOST_RUNTIME_CATS:
        role = RUNTIME
    elif low == "cpu_instant_event":
        role = INSTANT
    else:
        role = OTHER
    if role in ACTIVITY_KINDS or low in _GPU_HINT_CATS:
        hints.add("gpu")
    return role


def name_hint(name: str, hints: set[str]) -> None:
    """Device hint from a runtime call name."""
    for pattern, device in _NAME_HINTS:
        if pattern.match(name):
            hints.add(device)
            return


def property_hints(value: Any, hints: set[str]) -> None:
    """Vendor hints from the top-level ``deviceProperties`` kineto writes. Used only to tell
    which device ran device events: the list is present in CPU-only profiles too. Every
    string value is looked at (CUDA and ROCm write ``name``; ROCm ``gcnArchName``)."""
    if not isinstance(value, list):
        return
    for dev in value:
        if not isinstance(dev, dict):
            continue
        text = " ".join(v for v in dev.values() if isinstance(v, str)).lower()
        if any(k in text for k in ("amd", "radeon", "instinct", "gfx")):
            hints.add("props:rocm")
        elif any(k in text for k in ("gaudi", "hpu", "habana")):
            hints.add("props:hpu")


def infer_device(hints: set[str]) -> str:
    """cpu/cuda/rocm/hpu from the hints (see the module docstring for the order)."""
    for device in ("rocm", "hpu", "cuda"):
        if device in hints:
            return device
    if "gpu" not in hints:
        return "cpu"
    for device in ("rocm", "hpu"):
        if f"props:{device}" in hints:
            return device
    return "hpu" if "privateuse1" in hints else "cuda"
