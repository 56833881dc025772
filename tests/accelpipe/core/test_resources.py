"""The memory a process may use (Slurm job, cgroup, MemAvailable: the smallest) and free disk,
from stand-in environments and files."""

from __future__ import annotations

from pathlib import Path

from accelpipe.core import resources
from accelpipe.core.resources import MB, Limit


def meminfo(tmp_path: Path, available_kb: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:  99999999 kB\nMemFree: 1 kB\nMemAvailable:  {available_kb} kB\n")
    return path


def cgroup(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "memory.max"
    path.write_text(text + "\n")
    return path


def test_slurm_memory_per_node_and_per_cpu() -> None:
    assert resources.slurm_limit({"SLURM_MEM_PER_NODE": "16000"}) == Limit(
        16000 * MB, "the Slurm job's SLURM_MEM_PER_NODE=16000 MB"
    )
    per_cpu = resources.slurm_limit({"SLURM_MEM_PER_CPU": "4000", "SLURM_CPUS_ON_NODE": "8"})
    assert per_cpu is not None and per_cpu.bytes == 32000 * MB and "x 8 CPUs" in per_cpu.source
    assert resources.slurm_limit({"SLURM_MEM_PER_NODE": "0"}) is None  # --mem=0: the node's
    assert resources.slurm_limit({"SLURM_MEM_PER_CPU": "4000"}) is None  # CPUs unknown
    assert resources.slurm_limit({}) is None


def test_cgroup_limit_and_no_limit(tmp_path: Path) -> None:
    assert resources.cgroup_limit(cgroup(tmp_path, "8589934592")) == Limit(
        8589934592, f"the cgroup's {tmp_path / 'memory.max'}"
    )
    assert resources.cgroup_limit(cgroup(tmp_path, "max")) is None
    assert resources.cgroup_limit(tmp_path / "absent") is None


def test_the_smallest_ceiling_wins(tmp_path: Path) -> None:
    info = meminfo(tmp_path, 64 * 1024 * 1024)  # 64 GiB available
    slurm = {"SLURM_MEM_PER_NODE": "20000"}
    limit = resources.memory_limit(slurm, cgroup(tmp_path, str(30 * 2**30)), info)
    assert limit is not None and limit.bytes == 20000 * MB and "Slurm" in limit.source
    limit = resources.memory_limit(slurm, cgroup(tmp_path, str(10 * 2**30)), info)
    assert limit is not None and limit.bytes == 10 * 2**30 and "cgroup" in limit.source
    limit = resources.memory_limit({}, cgroup(tmp_path, "max"), meminfo(tmp_path, 1024))
    assert limit == Limit(1024 * 1024, f"MemAvailable in {tmp_path / 'meminfo'}")
    assert resources.memory_limit({}, tmp_path / "none", tmp_path / "none") is None


def test_free_disk_of_a_path_not_made_yet(tmp_path: Path) -> None:
    assert resources.free_disk(tmp_path / "not" / "yet") > 0
    assert resources.gb(84.1e9) == "84.1 GB" and resources.gb(248e6) == "248 MB"
