"""What memory and disk this process may use, for budgets and the preflight.

Memory is the smallest of three ceilings, each where it applies: the Slurm job's
(`SLURM_MEM_PER_NODE` MB, or `SLURM_MEM_PER_CPU` MB times the job's CPUs on this node), the
cgroup's (`memory.max` of cgroup v2; "max" is no limit) and what the kernel says is available
now (`MemAvailable` in /proc/meminfo). Each is read from a path or mapping the caller may
replace, so tests stand in files and environments. Linux only; elsewhere none applies.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CGROUP_MEMORY_MAX = Path("/sys/fs/cgroup/memory.max")
MEMINFO = Path("/proc/meminfo")
MB = 1 << 20


@dataclass(frozen=True)
class Limit:
    """A memory ceiling in bytes and where it comes from (a phrase for log lines)."""

    bytes: int
    source: str


def slurm_limit(env: Mapping[str, str]) -> Limit | None:
    """The Slurm job's memory on this node (`--mem` or `--mem-per-cpu` x its CPUs)."""
    per_node = env.get("SLURM_MEM_PER_NODE", "")
    if per_node.isdigit() and int(per_node) > 0:  # 0 asks for all of the node's memory
        return Limit(int(per_node) * MB, f"the Slurm job's SLURM_MEM_PER_NODE={per_node} MB")
    per_cpu = env.get("SLURM_MEM_PER_CPU", "")
    cpus = env.get("SLURM_CPUS_ON_NODE", "")
    if per_cpu.isdigit() and cpus.isdigit() and int(per_cpu) > 0:
        return Limit(
            int(per_cpu) * int(cpus) * MB,
            f"the Slurm job's SLURM_MEM_PER_CPU={per_cpu} MB x {cpus} CPUs",
        )
    return None


def cgroup_limit(path: Path = CGROUP_MEMORY_MAX) -> Limit | None:
    """The cgroup's memory.max (cgroup v2)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():  # "max": no limit
        return None
    return Limit(int(text), f"the cgroup's {path}")


def _meminfo(path: Path, key: str) -> Limit | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name == key and value.split() and value.split()[0].isdigit():
            return Limit(int(value.split()[0]) * 1024, f"{key} in {path}")
    return None


def meminfo_available(path: Path = MEMINFO) -> Limit | None:
    """MemAvailable: what the kernel can give without swapping, now."""
    return _meminfo(path, "MemAvailable")


def meminfo_total(path: Path = MEMINFO) -> Limit | None:
    """MemTotal: the machine's memory, what a job may plan for."""
    return _meminfo(path, "MemTotal")


def _smallest(*limits: Limit | None) -> Limit | None:
    found = [limit for limit in limits if limit is not None]
    return min(found, key=lambda limit: limit.bytes) if found else None


def memory_limit(
    env: Mapping[str, str] | None = None,
    cgroup: Path = CGROUP_MEMORY_MAX,
    meminfo: Path = MEMINFO,
) -> Limit | None:
    """What this process may use now, for budgets: the smallest of the Slurm job's memory, the
    cgroup's and MemAvailable; None where none can be read."""
    env = os.environ if env is None else env
    return _smallest(slurm_limit(env), cgroup_limit(cgroup), meminfo_available(meminfo))


def job_memory(
    env: Mapping[str, str] | None = None,
    cgroup: Path = CGROUP_MEMORY_MAX,
    meminfo: Path = MEMINFO,
) -> Limit | None:
    """What a job may plan to use, for the preflight: the smallest of the Slurm job's, the
    cgroup's and the machine's memory (MemTotal: what is free now changes by the minute)."""
    env = os.environ if env is None else env
    return _smallest(slurm_limit(env), cgroup_limit(cgroup), meminfo_total(meminfo))


def free_disk(path: str | os.PathLike[str]) -> int:
    """Free bytes on the file system that holds `path` (or its nearest existing parent)."""
    where = Path(path).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    return shutil.disk_usage(where).free


def gb(n: float) -> str:
    """Bytes as a short figure for one-line messages: "84.1 GB", "512 MB", "1 kB"."""
    if n >= 1e12:
        return f"{n / 1e12:.3g} TB"
    if n >= 1e9:
        return f"{n / 1e9:.3g} GB"
    return f"{n / 1e6:.3g} MB" if n >= 1e6 else f"{n / 1e3:.3g} kB"
