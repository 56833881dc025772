"""`accelpipe doctor`: is this host (or image) ready for a long run on the backend?

The checks, in the order they print (each `ok`, `problem` with its fix, or `skipped` with the
reason it does not apply):

- driver: the vendor tool answers (nvidia-smi; rocm-smi, else amd-smi; hl-smi) and its
  driver version;
- framework: the framework is built for the backend and reaches a device (the framework's
  doctor module says how: `torch_doctor`, `tf_doctor`);
- devices: the devices jobs may use (the vendor tool's, within accelerators.pool) and those
  the framework sees, against the most any train job of the config asks per node;
- busy: those devices in use by another user's process, or holding memory that no listed
  process of this user accounts for (inside a container the tools list no host processes);
- memory: free memory per device, each at least MIN_FREE_FRACTION of its total;
- bf16: whether the devices compute in bf16, where a run trains in it;
- collective: NCCL (RCCL on ROCm) or HCCL for jobs of more than one process;
- container: in a container, that the backend's device nodes reached it.

This module is framework-free: the framework's facts come in as a `FrameworkFacts` (or the
reason there are none), the vendor tool's as an `smi.Vendor` (or the tool's error), so each
check is judged here from facts alone and tested with stand-ins for both.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from accelpipe.core.leases import VISIBILITY_ENV
from accelpipe.devices import resolve_precision, smi

CHECKS = ("driver", "framework", "devices", "busy", "memory", "bf16", "collective", "container")
OK, PROBLEM, SKIPPED = "ok", "problem", "skipped"
# A device holding more than this share of its memory that no process of ours accounts for
# is in use by someone else; one with less than MIN_FREE_FRACTION free is too full to train.
BUSY_FRACTION = 0.05
MIN_FREE_FRACTION = 0.5
GIB = 1024.0  # MiB
# The device nodes a backend's runtime needs inside a container: (required, one-or-more).
DEVICE_NODES = {
    "cuda": (("nvidiactl",), re.compile(r"^nvidia\d+$"), "/dev/nvidia<N>"),
    "rocm": (("kfd",), re.compile(r"^dri/renderD\d+$"), "/dev/dri/renderD<N>"),
    "gaudi": ((), re.compile(r"^(accel/accel\d+|hl\d+)$"), "/dev/accel/accel<N> or /dev/hl<N>"),
}
FIX_DRIVER = {
    "cuda": "install the NVIDIA driver (it brings nvidia-smi) until `nvidia-smi` lists the "
    "GPUs; in a container the GPUs must be given to it (Docker/Podman: the NVIDIA Container "
    "Toolkit; Apptainer: --nv)",
    "rocm": "install the amdgpu driver and ROCm's rocm-smi or amd-smi until `rocm-smi` lists "
    "the GPUs; in a container, /dev/kfd and /dev/dri must be given to it (Apptainer: --rocm)",
    "gaudi": "install the habanalabs driver (it brings hl-smi) until `hl-smi` lists the "
    "modules; in a container, run it with the Habana runtime (Docker: --runtime=habana; "
    "Apptainer: --intel-hpu)",
}
FIX_CONTAINER = {
    ("cuda", "docker"): "accelpipe's docker runtime asks for the GPUs (--gpus): install and "
    "configure the NVIDIA Container Toolkit for the engine (nvidia-ctk runtime configure)",
    ("rocm", "docker"): "accelpipe's docker runtime passes /dev/kfd and /dev/dri/renderD<N>: "
    "check they exist on the host and that accelerators.pool names real GPUs",
    ("gaudi", "docker"): "accelpipe's docker runtime runs Gaudi stages with --runtime=habana: "
    "install and register the habana-container-runtime",
    ("cuda", "apptainer"): "run with --nv (profiles/apptainer-cuda)",
    ("rocm", "apptainer"): "run with --rocm (profiles/apptainer-rocm)",
    ("gaudi", "apptainer"): "run with --intel-hpu (Apptainer >= 1.5, profiles/apptainer-gaudi) "
    "or --bind /dev/accel",
    ("cuda", "container"): "start the container with the GPUs (docker or podman run --gpus all, "
    "with the NVIDIA Container Toolkit; apptainer --nv)",
    ("rocm", "container"): "start the container with the GPUs (docker run --device /dev/kfd "
    "--device /dev/dri --group-add video; apptainer --rocm)",
    ("gaudi", "container"): "start the container with the Habana runtime (docker run "
    "--runtime=habana; apptainer --intel-hpu)",
}
_BF16_ARCH = re.compile(r"^gfx(90a|908|94\d|95\d|11\d\d|12\d\d)")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | problem | skipped
    found: str
    fix: str | None = None


@dataclass(frozen=True)
class Needs:
    """What the runs ask of the host: devices per node (the most one train job asks), the
    processes of the biggest job (all nodes), the precision they train in (auto: the
    backend's) and the devices jobs may lease (accelerators.pool; None: every device)."""

    devices: int = 1
    world_size: int = 1
    precision: str = "auto"
    pool: list[str] | None = None


@dataclass
class FrameworkFacts:
    """What a framework says about the backend (torch_doctor.probe, tf_doctor.probe).

    `device_names` is None where the framework could not be asked (a build for another
    backend); `bf16` and `collective` are None where it cannot tell (their `*_basis` says
    why); `memory` is (free, total) MiB per device index where it reports them.
    """

    framework: str
    build: str  # e.g. "torch 2.6.0+cu124, built with CUDA 12.4"
    built_for_backend: bool
    build_fix: str | None = None
    device_api: str = ""
    device_names: list[str] | None = None
    unavailable: str | None = None  # why it reaches no device
    bf16: bool | None = None
    bf16_basis: str = ""
    collective: bool | None = None
    collective_name: str = ""
    collective_basis: str = ""
    collective_fix: str | None = None
    memory: dict[str, tuple[float, float]] = field(default_factory=dict)
    unsupported: str | None = None  # why accelpipe refuses this release (devices.frameworks)


@dataclass
class Report:
    backend: str
    framework: str
    host: str
    time: str
    image: str | None
    container: str | None  # docker | apptainer | container, None outside one
    needs: Needs
    checks: list[Check]
    system: dict[str, Any]

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if c.status == PROBLEM]

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "framework": self.framework,
            "host": self.host,
            "time": self.time,
            "image": self.image,
            "container": self.container,
            "asked": asdict(self.needs),
            "checks": [asdict(c) for c in self.checks],
            "problems": [c.name for c in self.problems],
            "system": self.system,
        }

    def lines(self) -> list[str]:
        where = in_container(self.container or "", self.image or "") or "not in a container"
        precision = resolved_precision(self.backend, self.needs.precision)
        head = (
            f"accelpipe doctor: {self.backend} / {self.framework} on {self.host}, {where}; "
            f"asked: {self.needs.devices} device(s) per node, world size "
            f"{self.needs.world_size}, {precision}"
        )
        width = max(len(c) for c in CHECKS)
        body = [
            f"{c.status:<7}  {c.name:<{width}}  {c.found}" + (f" | fix: {c.fix}" if c.fix else "")
            for c in self.checks
        ]
        return [head, *body, summary(self)]


def summary(report: Report) -> str:
    problems = report.problems
    if problems:
        names = ", ".join(c.name for c in problems)
        return f"{len(problems)} problem{'s' if len(problems) > 1 else ''}: {names}"
    skipped = sum(c.status == SKIPPED for c in report.checks)
    return f"no problem ({skipped} of {len(report.checks)} checks skipped)"


def resolved_precision(backend: str, precision: str) -> str:
    return resolve_precision(backend, precision)  # the backend's own "auto"


# --- where this runs ----------------------------------------------------------------------


def container(environ: dict[str, str] | None = None, root: Path = Path("/")) -> tuple[str, str]:
    """(runtime, image) of the container this process runs in; ("", "") outside one.

    accelpipe's docker runtime sets ACCELPIPE_IMAGE (containers.run); Apptainer sets
    APPTAINER_NAME / APPTAINER_CONTAINER (SINGULARITY_* before); other engines leave
    /.dockerenv (Docker) or /run/.containerenv (Podman)."""
    env = os.environ if environ is None else environ
    if env.get("ACCELPIPE_IMAGE"):
        return "docker", env["ACCELPIPE_IMAGE"]
    for prefix in ("APPTAINER", "SINGULARITY"):
        image = env.get(f"{prefix}_NAME") or env.get(f"{prefix}_CONTAINER")
        if image:
            return "apptainer", image
    if (root / ".dockerenv").exists() or (root / "run/.containerenv").exists():
        return "container", ""
    return "", ""


def in_container(runtime: str, image: str) -> str:
    """Where a stage runs, in words: "" outside a container."""
    if runtime == "docker":
        return f"in image {image} (accelpipe's docker runtime)"
    if runtime == "apptainer":
        return f"in Apptainer image {image}"
    if runtime:
        return "in a container (/.dockerenv or /run/.containerenv; its image unknown)"
    return ""


def device_nodes(backend: str, dev: Path = Path("/dev")) -> tuple[list[str], list[str]]:
    """(device nodes of the backend present under `dev`, required ones missing)."""
    required, pattern, _ = DEVICE_NODES[backend]
    present = []
    for path in sorted(dev.glob("*")) + sorted(dev.glob("*/*")):
        name = path.relative_to(dev).as_posix()
        if pattern.match(name) or name in required:
            present.append(f"/dev/{name}")
    missing = [f"/dev/{r}" for r in required if not (dev / r).exists()]
    return present, missing


# --- the checks ---------------------------------------------------------------------------

VendorResult = smi.Vendor | smi.ToolMissing | smi.ToolFailed | None
FactsResult = FrameworkFacts | str  # a str: why the framework could not be asked


def _ids(devices: Sequence[smi.DeviceInfo]) -> str:
    return _span([d.id for d in devices]) or "none"


def per_device(values: dict[str, str]) -> str:
    """Per-device texts, devices with the same text together: "0-3: 9.0; 4: 7.0"."""
    groups: dict[str, list[str]] = {}
    for device, text in values.items():
        groups.setdefault(text, []).append(device)
    return "; ".join(f"{_span(devices)}: {text}" for text, devices in groups.items())


def _span(ids: list[str]) -> str:
    numeric = all(i.isdigit() for i in ids)
    if (
        numeric
        and len(ids) > 2
        and [int(i) for i in ids] == list(range(int(ids[0]), int(ids[0]) + len(ids)))
    ):
        return f"{ids[0]}-{ids[-1]}"
    return ", ".join(ids)


def _names(names: Sequence[str | None]) -> str:
    counts: dict[str, int] = {}
    for name in names:
        counts[name or "unnamed"] = counts.get(name or "unnamed", 0) + 1
    return ", ".join(f"{n} x {name}" if n > 1 else name for name, n in counts.items())


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f}"


def usable(vendor: VendorResult, pool: list[str] | None) -> tuple[list[smi.DeviceInfo], list[str]]:
    """The devices jobs may use (the vendor tool's, within the pool) and pool ids it lacks."""
    if not isinstance(vendor, smi.Vendor):
        return [], []
    if pool is None:
        return list(vendor.devices), []
    listed = {d.id for d in vendor.devices}
    return [d for d in vendor.devices if d.id in pool], [p for p in pool if p not in listed]


def check_driver(backend: str, vendor: VendorResult) -> Check:
    if backend == "cpu":
        return Check("driver", SKIPPED, "the cpu backend needs no accelerator driver")
    tools = " or ".join(smi.TOOLS[backend])
    if isinstance(vendor, smi.ToolMissing):
        return Check("driver", PROBLEM, f"{tools} not found on PATH", FIX_DRIVER[backend])
    if isinstance(vendor, smi.ToolFailed) or vendor is None:
        return Check(
            "driver", PROBLEM, f"{vendor or tools + ' does not answer'}", FIX_DRIVER[backend]
        )
    driver = f"driver {vendor.driver}" if vendor.driver else "no driver version reported"
    devices = f"{len(vendor.devices)} devices ({_ids(vendor.devices)}: "
    devices += f"{_names([d.name for d in vendor.devices])})"
    return Check("driver", OK, f"{vendor.tool} answers: {driver}; {devices}")


def check_framework(backend: str, facts: FactsResult) -> Check:
    if isinstance(facts, str):
        return Check("framework", PROBLEM, facts, "install the framework in this image or env")
    if facts.unsupported:
        return Check("framework", PROBLEM, facts.unsupported, "use a supported release")
    if backend == "cpu":
        return Check("framework", OK, f"{facts.build}: the cpu backend runs on any build")
    if not facts.built_for_backend:
        return Check("framework", PROBLEM, facts.build, facts.build_fix)
    if not facts.device_names:
        why = facts.unavailable or f"{facts.device_api} lists no device"
        fix = (
            f"check the driver (see driver), that it supports this build, and the visibility "
            f"variables ({_visibility(backend)})"
        )
        return Check("framework", PROBLEM, f"{facts.build}, but it sees no device: {why}", fix)
    names = _names(facts.device_names)
    return Check("framework", OK, f"{facts.build}; {facts.device_api} sees {names}")


def _visibility(backend: str) -> str:
    name = VISIBILITY_ENV[backend]
    value = os.environ.get(name)
    return f"{name}={value!r}" if value is not None else f"{name} unset"


def check_devices(backend: str, needs: Needs, vendor: VendorResult, facts: FactsResult) -> Check:
    if backend == "cpu":
        return Check("devices", SKIPPED, "the cpu backend leases no device")
    devices, unknown = usable(vendor, needs.pool)
    pool = f" within accelerators.pool [{', '.join(needs.pool)}]" if needs.pool else ""
    if unknown:
        listed = _ids(vendor.devices) if isinstance(vendor, smi.Vendor) else "none"
        return Check(
            "devices",
            PROBLEM,
            f"accelerators.pool names {', '.join(unknown)}, which the vendor tool does not list "
            f"(it lists {listed})",
            "list only devices the vendor tool lists in accelerators.pool (or drop the key: "
            "every device is then in the pool)",
        )
    sees = (
        len(facts.device_names)
        if isinstance(facts, FrameworkFacts) and facts.device_names is not None
        else None
    )
    if not isinstance(vendor, smi.Vendor) and sees is None:
        return Check("devices", SKIPPED, "nothing lists the devices (see driver and framework)")
    count = len(devices) if isinstance(vendor, smi.Vendor) else sees
    asked = f"the biggest train job asks {needs.devices} per node"
    listed = (
        f"{len(devices)} usable ({_ids(devices)}){pool}" if isinstance(vendor, smi.Vendor) else ""
    )
    seen = (
        f"the framework sees {sees}"
        if sees is not None
        else "the framework could not be asked (see framework)"
    )
    found = "; ".join(part for part in (listed, seen, asked) if part)
    if count is not None and count < needs.devices:
        return Check(
            "devices",
            PROBLEM,
            found,
            f"train on at most {count} devices per node (train.devices and the runs' devices), "
            "extend accelerators.pool, or ask the scheduler for more (Slurm: --gpus)",
        )
    if sees is not None and sees < needs.devices:
        return Check(
            "devices",
            PROBLEM,
            found,
            f"the framework sees fewer devices than the tool lists: check {_visibility(backend)} "
            "and the devices given to the container",
        )
    return Check("devices", OK, found)


def check_busy(backend: str, needs: Needs, vendor: VendorResult, uid: int | None = None) -> Check:
    """Devices in use by another user's process, or holding memory no process of ours
    accounts for (a process the tool does not show: another container, another user)."""
    if backend == "cpu":
        return Check("busy", SKIPPED, "the cpu backend leases no device")
    devices, _ = usable(vendor, needs.pool)
    if not devices:
        return Check("busy", SKIPPED, "no device to look at (see driver and devices)")
    me = os.getuid() if uid is None else uid
    busy: dict[str, str] = {}  # device id -> who uses it
    own: list[str] = []
    for device in devices:
        others = [p for p in device.processes if p.uid != me]
        mine = [p for p in device.processes if p.uid == me]
        own += [f"pid {p.pid} ({p.name}) on {device.id}" for p in mine]
        accounted = sum(p.used_mib or 0.0 for p in device.processes)
        unexplained = (device.used_mib or 0.0) - accounted
        if others:
            who = ", ".join(
                f"pid {p.pid} {p.name} of {p.user or 'a user /proc does not show'}"
                + (f", {_gib(p.used_mib)} GiB" if p.used_mib is not None else "")
                for p in others
            )
            busy[device.id] = who
        elif device.total_mib and unexplained > BUSY_FRACTION * device.total_mib:
            busy[device.id] = (
                f"{_gib(unexplained)} of {_gib(device.total_mib)} GiB used by processes the "
                "tool does not list"
            )
    tool = vendor.tool if isinstance(vendor, smi.Vendor) else "the vendor tool"
    how = (
        f"{tool}'s processes and memory in use"
        if isinstance(vendor, smi.Vendor) and vendor.processes_listed
        else f"memory in use: {tool} lists no processes here"
    )
    yours = f"; your own processes (not a problem: leases keep your jobs apart): {'; '.join(own)}"
    if busy:
        free = [d.id for d in devices if d.id not in busy]
        taken = "; ".join(f"{device} ({who})" for device, who in busy.items())
        return Check(
            "busy",
            PROBLEM,
            f"{len(busy)} of {len(devices)} devices are in use: {taken} (from {how})"
            + (yours if own else ""),
            "wait for them, or keep the jobs off them: accelerators.pool: "
            f"[{', '.join(free)}] (the free ones), and train on at most {len(free)} per job"
            if free
            else "wait for them (every device is in use), or ask for other devices",
        )
    return Check(
        "busy",
        OK,
        f"none of the {len(devices)} devices is in use by another user (from {how})"
        + (yours if own else ""),
    )


def check_memory(backend: str, needs: Needs, vendor: VendorResult, facts: FactsResult) -> Check:
    if backend == "cpu":
        return Check("memory", SKIPPED, "the cpu backend: no device memory")
    devices, _ = usable(vendor, needs.pool)
    sizes: dict[str, tuple[float, float]] = {
        d.id: (d.free_mib, d.total_mib) for d in devices if d.free_mib is not None and d.total_mib
    }
    source = "the vendor tool"
    if not sizes and isinstance(facts, FrameworkFacts) and facts.memory:
        sizes, source = dict(facts.memory), "the framework"
    if not sizes:
        return Check("memory", SKIPPED, "no device reports its free memory")
    parts = {i: f"{_gib(free)} of {_gib(total)} GiB" for i, (free, total) in sizes.items()}
    found = f"free ({source}): {per_device(parts)}"
    full = [i for i, (free, total) in sizes.items() if free < MIN_FREE_FRACTION * total]
    if full:
        return Check(
            "memory",
            PROBLEM,
            f"{found}; under {MIN_FREE_FRACTION:.0%} free on {', '.join(full)}",
            "free those devices (see busy) or leave them out of accelerators.pool",
        )
    return Check("memory", OK, found)


def check_bf16(backend: str, needs: Needs, vendor: VendorResult, facts: FactsResult) -> Check:
    precision = resolved_precision(backend, needs.precision)
    if backend == "cpu":
        return Check("bf16", SKIPPED, f"the cpu backend (the runs train in {precision})")
    supported, basis = _bf16(backend, needs, vendor, facts)
    if precision != "bf16":
        said = {True: "supported", False: "not supported", None: "not known"}[supported]
        return Check("bf16", SKIPPED, f"no run trains in bf16 ({precision}); bf16 is {said}")
    if supported is None:
        return Check("bf16", SKIPPED, f"could not tell: {basis}")
    if not supported:
        return Check(
            "bf16",
            PROBLEM,
            f"no bf16: {basis}",
            "train in fp16 or fp32 (precision: fp16 in the workloads' train blocks and runs; "
            "auto means bf16 on this backend), or use devices with bf16 (NVIDIA compute "
            "capability 8.0+, AMD MI200+)",
        )
    return Check("bf16", OK, f"bf16 supported: {basis}")


def _bf16(
    backend: str, needs: Needs, vendor: VendorResult, facts: FactsResult
) -> tuple[bool | None, str]:
    """Whether the devices compute in bf16: the framework's answer, else the vendor's."""
    if isinstance(facts, FrameworkFacts) and facts.bf16 is not None:
        return facts.bf16, facts.bf16_basis
    if backend == "gaudi":
        return True, "every Gaudi generation computes in bf16"
    devices, _ = usable(vendor, needs.pool)
    if backend == "cuda":
        caps = {d.id: d.compute_capability for d in devices if d.compute_capability}
        if caps:
            old = [i for i, cap in caps.items() if tuple(map(int, cap.split("."))) < (8, 0)]
            where = per_device(caps)
            return not old, f"compute capability from nvidia-smi ({where}; bf16 needs 8.0+)"
    if backend == "rocm":
        arch = {d.id: d.arch for d in devices if d.arch}
        if arch:
            old = [i for i, a in arch.items() if not _BF16_ARCH.match(a)]
            where = per_device(arch)
            return not old, f"gfx target from the vendor tool ({where}; bf16 from gfx908/gfx90a)"
    why = facts.bf16_basis if isinstance(facts, FrameworkFacts) else facts
    return None, why or "neither the framework nor the vendor tool says"


def check_collective(backend: str, needs: Needs, facts: FactsResult) -> Check:
    if needs.world_size <= 1:
        return Check("collective", SKIPPED, "one process per job: no collective backend needed")
    if backend == "cpu":
        return Check("collective", SKIPPED, "the cpu backend uses gloo (torch) or gRPC (TF)")
    if isinstance(facts, FrameworkFacts) and not facts.built_for_backend:
        return Check(
            "collective", SKIPPED, f"the framework is not built for {backend} (see framework)"
        )
    if isinstance(facts, str) or facts.collective is None:
        why = facts if isinstance(facts, str) else facts.collective_basis
        return Check("collective", SKIPPED, f"could not tell: {why}")
    found = f"{facts.collective_name}: {facts.collective_basis}"
    if not facts.collective:
        return Check("collective", PROBLEM, found, facts.collective_fix)
    return Check("collective", OK, found)


def check_container(backend: str, where: tuple[str, str], dev: Path = Path("/dev")) -> Check:
    runtime, image = where
    if not runtime:
        return Check("container", SKIPPED, "not in a container: the stage runs in this environment")
    inside = in_container(runtime, image)
    if backend == "cpu":
        return Check("container", SKIPPED, f"{inside}: the cpu backend needs no device node")
    present, missing = device_nodes(backend, dev)
    _, pattern, named = DEVICE_NODES[backend]
    numbered = [p for p in present if pattern.match(p.removeprefix("/dev/"))]
    found = f"{inside}: " + (", ".join(present) or "no device node of the backend")
    if missing or not numbered:
        lacking = ", ".join([*missing, *([] if numbered else [named])])
        fix = FIX_CONTAINER[(backend, runtime)]
        return Check("container", PROBLEM, f"{found}; missing {lacking}", fix)
    return Check("container", OK, found)


# --- the whole report ---------------------------------------------------------------------


def diagnose(
    backend: str,
    framework: str,
    needs: Needs,
    vendor: VendorResult,
    facts: FactsResult,
    *,
    where: tuple[str, str] = ("", ""),
    dev: Path = Path("/dev"),
    host: str | None = None,
    uid: int | None = None,
) -> Report:
    """Every check judged from the facts given (no tool is run, no framework imported)."""
    checks = [
        check_driver(backend, vendor),
        check_framework(backend, facts),
        check_devices(backend, needs, vendor, facts),
        check_busy(backend, needs, vendor, uid),
        check_memory(backend, needs, vendor, facts),
        check_bf16(backend, needs, vendor, facts),
        check_collective(backend, needs, facts),
        check_container(backend, where, dev),
    ]
    runtime, image = where
    return Report(
        backend=backend,
        framework=framework,
        host=host or socket.gethostname(),
        time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        image=image or None,
        container=runtime or None,
        needs=needs,
        checks=checks,
        system=system_facts(backend, needs, vendor, facts),
    )


def system_facts(
    backend: str, needs: Needs, vendor: VendorResult, facts: FactsResult
) -> dict[str, Any]:
    """The facts a run's provenance keeps: driver, the usable devices and the framework build."""
    devices, _ = usable(vendor, needs.pool)
    names: list[str | None] = [d.name for d in devices]
    if not isinstance(vendor, smi.Vendor) and isinstance(facts, FrameworkFacts):
        names = list(facts.device_names or [])
    driver = None
    if isinstance(vendor, smi.Vendor):
        driver = f"{vendor.tool} {vendor.driver}" if vendor.driver else vendor.tool
    return {
        "driver": driver,
        "device_count": len(names),
        "devices": names,
        "framework_build": facts.build if isinstance(facts, FrameworkFacts) else None,
    }


def run(
    backend: str,
    framework: str,
    needs: Needs,
    probe: Callable[[str], FactsResult],
    *,
    runner: Any = None,
    environ: dict[str, str] | None = None,
    root: Path = Path("/"),
) -> Report:
    """Ask the vendor tool, then the framework (`probe(backend)`: after the tool, so that its
    own device contexts are not in the tool's figures), then judge every check. `environ` and
    `root` (for /.dockerenv and /dev) stand in for this process's in tests."""
    vendor: VendorResult = None
    if backend != "cpu":
        try:
            vendor = smi.query(backend, runner)
        except (smi.ToolMissing, smi.ToolFailed) as err:
            vendor = err
    facts = probe(backend)
    where = container(environ, root)
    return diagnose(backend, framework, needs, vendor, facts, where=where, dev=root / "dev")
