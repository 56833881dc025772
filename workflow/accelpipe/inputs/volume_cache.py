"""How many volumes a training process caches, within a memory budget.

MONAI's CacheDataset keeps every cached volume after the deterministic transforms (float32
image and label on the resampled grid) and builds the cache with one thread per CPU, each
holding a volume's loading and resampling intermediates. At full NSCLC size that is ~248 MB
per volume and ~10x that per builder thread while the cache fills (issue 33: 338 training
volumes asked ~84 GB), so `cache_rate` alone killed the run. Here the cache fills only the
volumes that fit the budget (`swinunetr.train.cache_memory_gb`, default half of what this
process may use: core.resources.memory_limit), and the builder threads are as many as the
budget leaves room for. The rest load in the loader's workers each epoch, as uncached items
do. No framework: the plan reads NIfTI headers only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nibabel as nib

from accelpipe.core.errors import DataError
from accelpipe.core.resources import Limit, gb, memory_limit
from accelpipe.devices import host
from accelpipe.workloads.swinunetr import declaration as swinunetr

# After Spacingd both image and label are float32: 8 bytes per voxel of the resampled grid
# (measured; CropForeground only shrinks it, so this is an upper bound).
CACHED_BYTES_PER_VOXEL = 8
# Peak memory of one builder thread and the default budget's share: with the workload's facts
# (plan.capacity reads them too, without this module's nibabel)
BUILD_TRANSIENT = swinunetr.CACHE_BUILD_TRANSIENT
DEFAULT_SHARE = swinunetr.CACHE_SHARE


def cached_bytes(image: str, spacing: Sequence[float]) -> int:
    """A volume's bytes in the cache, from its NIfTI header: its grid resampled to `spacing`."""
    header = nib.load(image).header
    if not isinstance(header, nib.Nifti1Header):  # NIfTI-2 subclasses it
        raise DataError(f"{image}: not a NIfTI volume ({type(header).__name__})")
    # nibabel leaves its header methods unannotated
    shape = header.get_data_shape()[:3]  # type: ignore[no-untyped-call]
    zooms = header.get_zooms()[:3]  # type: ignore[no-untyped-call]
    voxels = math.prod(
        max(1, round(n * z / s)) for n, z, s in zip(shape, zooms, spacing, strict=True)
    )
    return int(voxels) * CACHED_BYTES_PER_VOXEL


def budget(cache_memory_gb: float | None, processes: int, limit: Limit | None = None) -> Limit:
    """This process's cache budget: the config's figure, else DEFAULT_SHARE of what the
    process may use, shared among the training processes on this node."""
    if cache_memory_gb is not None:
        return Limit(int(cache_memory_gb * 1e9), "swinunetr.train.cache_memory_gb")
    limit = limit or memory_limit()
    if limit is None:  # no ceiling readable (not Linux): cache as cache_rate asks
        return Limit(2**62, "no memory limit readable")
    share = int(limit.bytes * DEFAULT_SHARE / max(1, processes))
    per = f" / {processes} processes" if processes > 1 else ""
    return Limit(share, f"{DEFAULT_SHARE:g} x {gb(limit.bytes)} ({limit.source}){per}")


@dataclass(frozen=True)
class CachePlan:
    """How many of a process's volumes are cached (the first `volumes`) and by how many
    builder threads, and why."""

    volumes: int
    asked: int  # what cache_rate asks
    total: int
    builders: int
    cached_bytes: int
    budget: Limit
    reason: str

    def facts(self) -> dict[str, Any]:
        """For the train stage.json's facts (`cache`)."""
        return {
            "volumes": self.volumes,
            "asked": self.asked,
            "of": self.total,
            "builders": self.builders,
            "cached_bytes": self.cached_bytes,
            "budget_bytes": self.budget.bytes,
            "budget_source": self.budget.source,
            "reason": self.reason,
        }

    def line(self) -> str:
        return f"volume cache: {self.volumes} of {self.total} volumes cached; {self.reason}"


def plan(sizes: Sequence[int], cache_rate: float, limit: Limit, cpus: int) -> CachePlan:
    """Cache the longest prefix of the volumes (CacheDataset caches the first `cache_num`)
    whose bytes plus one builder's transient fit `limit`; then as many builders (up to
    `cpus`) as the rest of the budget holds."""
    asked = min(len(sizes), int(len(sizes) * cache_rate))  # CacheDataset's own rounding
    used = largest = count = 0
    for size in sizes[:asked]:
        if used + size + BUILD_TRANSIENT * max(largest, size) > limit.bytes:
            break
        used, largest, count = used + size, max(largest, size), count + 1
    room = (limit.bytes - used) // (BUILD_TRANSIENT * largest) if largest else 1
    builders = max(1, min(cpus, count or 1, room))
    within = f"the budget {gb(limit.bytes)} ({limit.source})"
    if count == asked:
        reason = f"all {asked} that cache_rate {cache_rate:g} asks fit {within}"
    else:
        reason = (
            f"cache_rate {cache_rate:g} asks {asked} ({gb(sum(sizes[:asked]))} + "
            f"{gb(BUILD_TRANSIENT * max(sizes[:asked]))} per builder thread); {count} fit "
            f"{within}; set swinunetr.train.cache_memory_gb to change it"
        )
    return CachePlan(count, asked, len(sizes), builders, used, limit, reason)


def plan_for(
    items: Sequence[dict[str, str]],
    spacing: Sequence[float],
    cache_rate: float,
    cache_memory_gb: float | None,
    processes: int,
) -> CachePlan:
    """The plan for a process's datalist items: sizes from their headers, the budget from
    the config or the memory the process may use, builders up to its CPUs."""
    asked = items[: int(len(items) * cache_rate)]
    sizes = [cached_bytes(item["image"], spacing) for item in asked]
    sizes += [0] * (len(items) - len(asked))  # never cached: their size does not matter
    return plan(sizes, cache_rate, budget(cache_memory_gb, processes), len(host.usable_cpus()))
