"""What the vendor's tool says about the devices: driver, names, memory and who uses them.

`query(backend)` runs the tool the leases already use to list devices (accelpipe.core.leases: its
`run_tool`, so the same timeout, the same errors and the same stand-ins in tests) and returns
a `Vendor`, or raises `ToolMissing` (not on PATH) or `ToolFailed` (it ran and failed, or printed
nothing usable). Framework-free: `accelpipe doctor` reads it before any framework is imported.

- cuda: `nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,memory.used,
  memory.free,compute_cap --format=csv,noheader,nounits` (without compute_cap where the driver
  predates that field), and `--query-compute-apps=gpu_uuid,pid,process_name,used_memory` for
  the processes on each GPU. Ids are nvidia-smi's indices, which the leases use.
- rocm: `rocm-smi --showdriverversion --showproductname --showmeminfo vram` (its text lines,
  `GPU[N] : key: value`), or where rocm-smi is absent (newer ROCm) `amd-smi static` and
  `amd-smi metric --mem-usage` (indented `KEY: value` blocks under `GPU: N`). Neither maps
  processes to devices, so rocm devices in use show in their memory only.
- gaudi: `hl-smi -Q module_id,name,driver_version,memory.total,memory.used,memory.free -f
  csv,noheader` (the query form power.py reads power with); ids are module ids, which
  HABANA_VISIBLE_MODULES takes. hl-smi has no process query: memory again.

Memory is in MiB throughout. Written from the tools' documentation and sample outputs; no
such device was available here, so it is tested with stand-in tools only.
"""

from __future__ import annotations

import csv
import os
import pwd
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from accelpipe.core import leases
from accelpipe.core.errors import BackendUnavailableError

# (tool, what it is called in messages) per backend, in the order they are tried
TOOLS = {"cuda": ("nvidia-smi",), "rocm": ("rocm-smi", "amd-smi"), "gaudi": ("hl-smi",)}
_NVIDIA_GPU: tuple[str, ...] = ("index", "uuid", "name", "driver_version", "memory.total")
_NVIDIA_GPU += ("memory.used", "memory.free", "compute_cap")
_NVIDIA_APPS = ("gpu_uuid", "pid", "process_name", "used_memory")
HL_SMI_QUERY: tuple[str, ...] = ("module_id", "name", "driver_version", "memory.total")
HL_SMI_QUERY += ("memory.used", "memory.free")
_MISSING = {"", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]"}
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?i?B)?$", re.IGNORECASE)
_MIB = {"b": 1 / 2**20, "kb": 1e3 / 2**20, "kib": 1 / 2**10, "mb": 1e6 / 2**20, "mib": 1.0}
_MIB |= {"gb": 1e9 / 2**20, "gib": 2**10, "tb": 1e12 / 2**20, "tib": 2**20}
_POOL_ADVICE = re.compile(r"; (?:is the driver loaded\?|list the devices)")
_WHAT_HAPPENED = re.compile(r"(failed with exit status|did not answer within) .*", re.S)
_ROCM_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*(.+?):\s*(.*?)\s*$")


class ToolMissing(Exception):
    """None of the backend's tools is on PATH."""

    def __init__(self, tools: Sequence[str]) -> None:
        super().__init__(" / ".join(tools))
        self.tools = tuple(tools)


class ToolFailed(Exception):
    """The tool ran but failed, or printed no device; the message says how."""


@dataclass(frozen=True)
class Process:
    """A process on a device; `uid` and `user` are None where /proc does not show its owner
    (another pid namespace: a container, or /proc mounted with hidepid)."""

    pid: int
    name: str
    used_mib: float | None
    uid: int | None = None
    user: str | None = None


@dataclass(frozen=True)
class DeviceInfo:
    id: str  # nvidia-smi / rocm-smi index, Gaudi module id
    name: str | None
    total_mib: float | None
    used_mib: float | None
    free_mib: float | None
    compute_capability: str | None = None  # cuda: "8.0"
    arch: str | None = None  # rocm: the gfx target, e.g. "gfx942"
    processes: tuple[Process, ...] = ()


@dataclass(frozen=True)
class Vendor:
    """What the backend's tool reported. `processes_listed`: whether it maps processes to
    devices here (nvidia-smi does; inside a container it usually lists none)."""

    tool: str
    driver: str | None
    devices: list[DeviceInfo]
    processes_listed: bool = False
    notes: list[str] = field(default_factory=list)

    def device(self, device_id: str) -> DeviceInfo | None:
        return next((d for d in self.devices if d.id == device_id), None)


def query(backend: str, runner: leases.Runner | None = None) -> Vendor:
    """The backend's devices as its vendor tool reports them (see the module's docstring)."""
    run = runner or leases.run_tool  # looked up per call: tests replace leases.run_tool
    if backend == "cuda":
        return _nvidia(run)
    if backend == "rocm":
        try:
            return _rocm_smi(run)
        except ToolMissing:
            try:
                return _amd_smi(run)
            except ToolMissing:
                raise ToolMissing(TOOLS["rocm"]) from None
    if backend == "gaudi":
        return _hl_smi(run)
    raise ValueError(f"no vendor tool for backend {backend!r}")


def _call(run: leases.Runner, argv: Sequence[str]) -> str:
    """The tool's output; ToolMissing / ToolFailed instead of the runner's errors."""
    try:
        return run(list(argv))
    except FileNotFoundError:
        raise ToolMissing([argv[0]]) from None
    except BackendUnavailableError as err:
        # run_tool's message names the whole command and ends in advice about
        # accelerators.pool, which is not ours to give: the tool and what happened are enough
        message = _POOL_ADVICE.split(str(err))[0]
        what = _WHAT_HAPPENED.search(message)
        raise ToolFailed(f"{argv[0]} {what.group(0)}" if what else message) from None
    except OSError as err:
        raise ToolFailed(f"cannot run `{argv[0]}`: {err}") from None


def mib(text: str | None, unit: str = "mib") -> float | None:
    """A size as the tools print it ("81559", "98304 MiB", "196592 MB", bytes with unit "b")
    in MiB; None for N/A and the like."""
    if text is None or text.strip().lower() in _MISSING:
        return None
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    value = float(match.group(1))
    return value * _MIB[(match.group(2) or unit).lower()]


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text.lower() in _MISSING else text


def _csv_rows(output: str, width: int) -> list[list[str]]:
    rows = csv.reader(line for line in output.splitlines() if line.strip())
    return [[cell.strip() for cell in row] for row in rows if len(row) == width]


# --- cuda: nvidia-smi ----------------------------------------------------------------------


def _nvidia(run: leases.Runner) -> Vendor:
    fields = _NVIDIA_GPU
    try:
        output = _call(run, _nvidia_query(fields))
    except ToolFailed as err:
        if "compute_cap" not in str(err):
            raise
        # drivers before compute_cap (R510) refuse the whole query: ask again without it
        fields = _NVIDIA_GPU[:-1]
        output = _call(run, _nvidia_query(fields))
    rows = [dict(zip(fields, row, strict=True)) for row in _csv_rows(output, len(fields))]
    if not rows:
        first = output.strip().splitlines()[:1]
        raise ToolFailed(f"nvidia-smi lists no GPU ({first[0] if first else 'it printed nothing'})")
    processes, listed, notes = _nvidia_processes(run)
    devices = [
        DeviceInfo(
            id=row["index"],
            name=_value(row["name"]),
            total_mib=mib(row["memory.total"]),
            used_mib=mib(row["memory.used"]),
            free_mib=mib(row["memory.free"]),
            compute_capability=_value(row.get("compute_cap", "")),
            processes=tuple(processes.get(row["uuid"], ())),
        )
        for row in rows
    ]
    drivers = sorted({row["driver_version"] for row in rows})
    return Vendor("nvidia-smi", ", ".join(drivers), devices, listed, notes)


def _nvidia_query(fields: Sequence[str]) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def _nvidia_processes(run: leases.Runner) -> tuple[dict[str, list[Process]], bool, list[str]]:
    argv = ["nvidia-smi", f"--query-compute-apps={','.join(_NVIDIA_APPS)}"]
    try:
        output = _call(run, [*argv, "--format=csv,noheader,nounits"])
    except (ToolMissing, ToolFailed) as err:
        return {}, False, [f"no process list: {err}"]
    found: dict[str, list[Process]] = {}
    for uuid, pid, name, used in _csv_rows(output, len(_NVIDIA_APPS)):
        if pid.isdigit():
            found.setdefault(uuid, []).append(_process(int(pid), name, mib(used)))
    return found, True, []


def _process(pid: int, name: str, used_mib: float | None) -> Process:
    """A process with its owner where /proc shows it."""
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return Process(pid, name, used_mib)
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return Process(pid, name, used_mib, uid, user)


# --- rocm: rocm-smi, else amd-smi ----------------------------------------------------------


def _rocm_smi(run: leases.Runner) -> Vendor:
    argv = ["rocm-smi", "--showdriverversion", "--showproductname", "--showmeminfo", "vram"]
    output = _call(run, argv)
    driver = None
    per_gpu: dict[str, dict[str, str]] = {}
    for line in output.splitlines():
        line = line.strip()
        if line.lower().startswith("driver version:"):
            driver = _value(line.split(":", 1)[1])
        elif match := _ROCM_LINE.match(line):
            per_gpu.setdefault(str(int(match[1])), {})[match[2].strip().lower()] = match[3]
    if not per_gpu:
        raise ToolFailed(f"`{' '.join(argv)}` lists no GPU")
    devices = []
    for gpu_id in sorted(per_gpu, key=int):
        facts = per_gpu[gpu_id]
        total = mib(facts.get("vram total memory (b)"), "b")
        used = mib(facts.get("vram total used memory (b)"), "b")
        name = facts.get("card series") or facts.get("card model") or facts.get("card sku")
        devices.append(
            DeviceInfo(
                id=gpu_id,
                name=_value(name or ""),
                total_mib=total,
                used_mib=used,
                free_mib=total - used if total is not None and used is not None else None,
                arch=_value(facts.get("gfx version", "")),
            )
        )
    return Vendor("rocm-smi", driver, devices, False, ["rocm-smi maps no process to a GPU"])


def _amd_blocks(output: str) -> dict[str, dict[str, str]]:
    """`GPU: N` blocks of indented `KEY: value` lines -> {N: {"SECTION.KEY": value}}."""
    blocks: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    sections: list[tuple[int, str]] = []
    for raw in output.splitlines():
        if not raw.strip() or ":" not in raw:
            continue
        indent = len(raw) - len(raw.lstrip())
        key, _, value = raw.strip().partition(":")
        key, value = key.strip().upper(), value.strip()
        if indent == 0 and key == "GPU":
            current = blocks.setdefault(value, {})
            sections = []
            continue
        if current is None:
            continue
        sections = [(i, s) for i, s in sections if i < indent]
        if value:
            current[".".join([*(s for _, s in sections), key])] = value
        else:
            sections.append((indent, key))
    return blocks


def _amd_smi(run: leases.Runner) -> Vendor:
    static = _amd_blocks(_call(run, ["amd-smi", "static"]))
    if not static:
        raise ToolFailed("`amd-smi static` lists no GPU")
    try:
        usage = _amd_blocks(_call(run, ["amd-smi", "metric", "--mem-usage"]))
    except ToolFailed:
        usage = {}
    devices = []
    for gpu_id in sorted(static, key=lambda g: int(g) if g.isdigit() else 0):
        facts, mem = static[gpu_id], usage.get(gpu_id, {})
        total = mib(mem.get("MEM_USAGE.TOTAL_VRAM") or facts.get("VRAM.SIZE"))
        used = mib(mem.get("MEM_USAGE.USED_VRAM"))
        free = mib(mem.get("MEM_USAGE.FREE_VRAM"))
        devices.append(
            DeviceInfo(
                id=gpu_id,
                name=_value(facts.get("ASIC.MARKET_NAME", "")),
                total_mib=total,
                used_mib=used,
                free_mib=free if free is not None else _difference(total, used),
                arch=_value(facts.get("ASIC.TARGET_GRAPHICS_VERSION", "")),
            )
        )
    drivers = sorted({v for f in static.values() if (v := _value(f.get("DRIVER.VERSION", "")))})
    return Vendor("amd-smi", ", ".join(drivers) or None, devices, False, [])


def _difference(total: float | None, used: float | None) -> float | None:
    return total - used if total is not None and used is not None else None


# --- gaudi: hl-smi -------------------------------------------------------------------------


def _hl_smi(run: leases.Runner) -> Vendor:
    output = _call(run, ["hl-smi", "-Q", ",".join(HL_SMI_QUERY), "-f", "csv,noheader"])
    rows = [
        dict(zip(HL_SMI_QUERY, row, strict=True))
        for row in _csv_rows(output, len(HL_SMI_QUERY))
        if row[0].isdigit()
    ]
    if not rows:
        first = output.strip().splitlines()[:1]
        raise ToolFailed(f"hl-smi lists no module ({first[0] if first else 'it printed nothing'})")
    devices = [
        DeviceInfo(
            id=str(int(row["module_id"])),
            name=_value(row["name"]),
            total_mib=mib(row["memory.total"]),
            used_mib=mib(row["memory.used"]),
            free_mib=mib(row["memory.free"]),
        )
        for row in sorted(rows, key=lambda r: int(r["module_id"]))
    ]
    drivers = sorted({d for row in rows if (d := _value(row["driver_version"]))})
    return Vendor(
        "hl-smi", ", ".join(drivers) or None, devices, False, ["hl-smi lists no processes"]
    )
