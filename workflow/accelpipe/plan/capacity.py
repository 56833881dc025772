"""The preflight's resources: the disk a dataset's data stages and the memory a train job will
need, against what there is, known before the job starts (issue 33).

The raw and prepare stages check the disk they will need (the dataset's real figures,
config.registry.RealSize; a synthetic source's from the config's counts) against the free
space of data_root before they start; train checks the memory its processes will need against
what the Slurm job, the cgroup or the machine has. Not enough is one line with both numbers
and the key to change; enough is silent. The rules ask Slurm for the same figures (mem_mb,
disk_mb). Apart from plan.preflight (which imports the planning tables) so that the stages
that run it carry only this in their code key. Plan-time and framework-free.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from accelpipe.config import registry
from accelpipe.config.declare import VolumeCache
from accelpipe.config.schema import run_train, validate
from accelpipe.core import resources

# Memory of an idle training process: the interpreter, the framework and its runtime.
BASE_PROCESS_BYTES = 2_000_000_000
# fp32 weights, gradients and two optimizer moments (Adam's; SGD's momentum needs less)
BYTES_PER_PARAM = 16


@dataclass(frozen=True)
class DiskNeed:
    """Bytes a dataset's data stages write under data_root: the archives as downloaded, what
    they extract to (the raw folder) and the prepared variant."""

    download: int
    extracted: int
    prepared: int
    basis: str  # "the full dataset's figures (...)" or "the synthetic counts"

    @property
    def raw(self) -> int:
        return self.download + self.extracted


def _synthetic_items(dataset: str, synth: dict[str, Any]) -> tuple[int, int]:
    """(items, values per item) a synthetic source makes, from its config block."""
    if dataset in ("brats", "nsclc"):
        count = synth["cases"] if dataset == "brats" else synth["patients"]
        per = 5 if dataset == "brats" else 1
        return count, math.prod(synth["shape"]) * per
    if dataset == "imagenet":
        count = synth["classes"] * (synth["train_per_class"] + synth["val_per_class"])
        side = synth.get("size", 500)
        return count, (math.prod(side) if isinstance(side, list) else side * side) * 3
    return synth["train_images"] + synth["val_images"], math.prod(synth.get("size", [96, 72])) * 4


def disk_need(dataset: str, block: dict[str, Any]) -> DiskNeed | None:
    """What the dataset's raw and prepare stages write, for its config block (`datasets.<name>`
    or the raw stage's slice of it). The full dataset's figures hold for its official
    archives; ImageNet's import counts the tars you give (extracted, they take as much);
    another URL's size is not known before it answers (None: its download's own full-disk
    check stands)."""
    real = registry.dataset(dataset).real
    source = block["source"]
    if source == "synthetic":
        count, values = _synthetic_items(dataset, block["synthetic"])
        scale = count * values / (real.items * real.item_values)
        extracted = math.ceil(real.extracted * scale)
        return DiskNeed(0, extracted, math.ceil(real.prepared * scale), "the synthetic counts")
    if source.startswith("path:"):  # read where it is: only the prepared copy is written
        copy = Path(source.removeprefix("path:"))
        if not copy.exists():  # the raw stage names the missing path
            return None
        prepared, basis = prepared_need(dataset, copy)
        return DiskNeed(0, 0, prepared, basis)
    basis = f"the full dataset's figures ({real.source})"
    settings = block[source if source in block else _settings_key(block)]
    if dataset == "imagenet":
        tars = [Path(settings[k]) for k in ("train_tar", "val_tar") if settings.get(k)]
        given = sum(t.stat().st_size for t in tars if t.is_file())
        scale = given / real.extracted
        return DiskNeed(0, given, math.ceil(real.prepared * scale), "the size of your tars")
    if _without_limits(settings) != _without_limits(_default_settings(dataset, block)):
        return None
    return DiskNeed(real.download, real.extracted, real.prepared, basis)


def _settings_key(block: dict[str, Any]) -> str:
    (key,) = (k for k in block if k not in ("source", "synthetic"))
    return key


def _without_limits(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k != "archive"}


@cache
def _defaults() -> dict[str, Any]:
    """The config the schema's defaults make, validated once per process (read-only)."""
    return validate({})


def _default_settings(dataset: str, block: dict[str, Any]) -> dict[str, Any]:
    """The schema's default settings of the block's official source: its official archives."""
    defaults: dict[str, Any] = _defaults()["datasets"][dataset][_settings_key(block)]
    return defaults


def disk_verdict(
    stage: str,
    dataset: str,
    need: int,
    where: Path,
    what: str,
    free: int | None = None,
    synthetic: bool = False,
) -> str | None:
    """The one line that says `need` bytes do not fit the free space at `where`; None if they do."""
    free = resources.free_disk(where) if free is None else free
    if need <= free:
        return None
    change = (
        f"fewer items in datasets.{dataset}.synthetic"
        if synthetic
        else f"datasets.{dataset}.source path: to read an existing copy in place"
    )
    return (
        f"{stage} {dataset}: needs ~{resources.gb(need)} on {where} ({what}) but "
        f"{resources.gb(free)} is free; free space, set data_root, or {change}"
    )


def raw_disk_verdict(
    dataset: str, block: dict[str, Any], data_root: Path, then_prepared: bool = False
) -> str | None:
    """The raw stage's line: its download and extraction (and, while Snakemake plans, the
    prepared copy that follows: `then_prepared`) against the free space at `data_root`."""
    need = disk_need(dataset, block)
    if need is None:
        return None
    parts = [f"extraction {resources.gb(need.extracted)}"]
    if need.download:
        parts.insert(0, f"download {resources.gb(need.download)}")
    total = need.raw
    if then_prepared:
        parts.append(f"prepared {resources.gb(need.prepared)}")
        total += need.prepared
    synthetic = block["source"] == "synthetic"
    what = f"{' + '.join(parts)}, from {need.basis}"
    return disk_verdict("raw", dataset, total, data_root, what, synthetic=synthetic)


def plan_raw_verdict(config: dict[str, Any], dataset: str) -> str | None:
    """The raw job's line while Snakemake plans, before any job starts: only where the raw
    folder is still to be made (a made one downloads nothing), with the prepared copy where
    none of the dataset's is made yet."""
    root = Path(config["data_root"])
    if (root / "raw" / dataset).exists():
        return None
    block = config["datasets"][dataset]
    prepared = (root / "prepared" / dataset).is_dir() and any(
        (root / "prepared" / dataset).iterdir()
    )
    return raw_disk_verdict(dataset, block, root / "raw", then_prepared=not prepared)


def prepared_need(dataset: str, raw: Path) -> tuple[int, str]:
    """(bytes, basis) the prepared variant will take: the raw folder's size (through the
    links of a `path:` source) times the full dataset's prepared-to-raw ratio (BraTS ~4.9:
    float32 arrays from gzipped NIfTI; ImageNet's index next to nothing)."""
    real = registry.dataset(dataset).real
    made = sum(
        (Path(folder) / name).stat().st_size
        for folder, _, names in os.walk(raw, followlinks=True)
        for name in names
    )
    ratio = real.prepared / real.extracted
    return math.ceil(made * ratio), f"{resources.gb(made)} of raw data at {raw} x {ratio:.2g}"


def prepare_disk_verdict(dataset: str, raw: Path, out: Path, free: int | None = None) -> str | None:
    """Preparing writes the variant beside the raw data; re-preparing builds the new copy
    before the old is removed (core.io.atomic_path), so the old one's space stays taken
    until the end: twice the output."""
    need, basis = prepared_need(dataset, raw)
    what = f"the prepared copy, from {basis}"
    if out.exists():
        what += (
            "; re-preparing needs twice the output space (the old copy stays until the new is made)"
        )
    return disk_verdict("prepare", dataset, need, out.parent, what, free)


def memory_need(
    workload: str, train: dict[str, Any], real_data: bool, limit: resources.Limit | None
) -> dict[str, int]:
    """Host memory one training process will need, by part: the process, the model's
    parameters with their gradients and optimizer state, the batches in flight (the batch and
    two prefetched per loader worker, float32, at the reference's input size; the workload's
    declared `memory`) and, where it caches volumes on real data, that cache
    (inputs.volume_cache bounds it to its budget: the config's, else a share of `limit`; with
    no limit known, as much as the rest) and the loader workers that build the volumes the
    cache does not hold."""
    memory = registry.workload(workload).memory
    in_flight = 1 + 2 * train.get("loader_workers", 0)
    parts = {
        "process": BASE_PROCESS_BYTES,
        "model": memory.params * BYTES_PER_PARAM,
        "batches": train["batch_size"] * in_flight * memory.item_values * 4,
    }
    if memory.volume_cache is not None and real_data:
        parts |= _volume_cache(memory.volume_cache, train, limit, sum(parts.values()))
    return parts


def _volume_cache(
    facts: VolumeCache, train: dict[str, Any], limit: resources.Limit | None, rest: int
) -> dict[str, int]:
    volumes = math.floor(facts.train_volumes * train["cache_rate"])
    cache = volumes * facts.volume_bytes
    # the uncached volumes are built in the loader workers, each epoch
    workers = max(1, train.get("loader_workers", 0))
    loader = workers * facts.build_transient * facts.volume_bytes
    if train.get("cache_memory_gb") is not None:
        budget = int(train["cache_memory_gb"] * 1e9)
    elif limit is not None:
        budget = int(limit.bytes * facts.default_share)
    else:  # the job's own ask, M: its default budget, half of M, holds the rest
        return {"cache": rest + loader, "loader": loader}
    if cache <= budget:
        return {"cache": cache}
    return {"cache": budget, "loader": loader}


def memory_verdict(
    workload: str, run: str, parts: dict[str, int], limit: resources.Limit | None
) -> str | None:
    """The one line that says the parts do not fit `limit`; None if they do or none is known."""
    need = sum(parts.values())
    if limit is None or need <= limit.bytes:
        return None
    split = ", ".join(f"{k} {resources.gb(v)}" for k, v in parts.items() if v)
    key = f"{workload}.train.batch_size"
    if "cache" in parts:
        key = f"{workload}.train.cache_memory_gb (or batch_size)"
    return (
        f"train {workload}/{run}: needs ~{resources.gb(need)} of memory ({split}) but "
        f"{resources.gb(limit.bytes)} is there ({limit.source}); set {key}, or ask for more "
        f"memory (Slurm: --set-resources train:mem_mb=...)"
    )


def real_source(data_root: Path, dataset: str) -> bool:
    """Whether the dataset's raw folder came from the real data (its stage.json's source);
    a folder not made yet counts by the config, which the caller passes instead."""
    stage = data_root / "raw" / dataset / "stage.json"
    return stage.is_file() and json.loads(stage.read_text()).get("source") != "synthetic"


def train_memory_verdict(
    workload: str, run: str, train: dict[str, Any], prepared: Path, limit: resources.Limit | None
) -> str | None:
    """train's check before it starts: its processes on this node against what it may use.
    `prepared` is data_root/prepared/<dataset>/<variant>."""
    dataset = registry.workload(workload).dataset
    real = len(prepared.parents) > 2 and real_source(prepared.parents[2], dataset)
    per_process = memory_need(workload, train, real, limit)
    processes = train.get("devices", 1)
    parts = {k: v * processes for k, v in per_process.items()}
    return memory_verdict(workload, run, parts, limit)


def train_mem_mb(config: dict[str, Any], workload: str, run: str) -> int:
    """The train job's Slurm mem_mb (rules/train.smk): what its processes on one node need,
    from the same figures as the check, at least the 8 GB jobs asked before."""
    dataset = registry.workload(workload).dataset
    real = config["datasets"][dataset]["source"] != "synthetic"
    train = run_train(config[workload], workload, run)
    need = sum(memory_need(workload, train, real, None).values()) * train.get("devices", 1)
    return max(8000, math.ceil(need / resources.MB))


def data_disk_mb(config: dict[str, Any], dataset: str, stage: str) -> int:
    """The raw or prepare job's Slurm disk_mb (rules/data.smk), from the dataset's figures."""
    need = disk_need(dataset, config["datasets"][dataset])
    if need is None:
        return 1000  # Snakemake's own floor
    return max(1, math.ceil((need.raw if stage == "raw" else need.prepared) / resources.MB))


def real_data_line(workload: str) -> str:
    """The workload page's "real data" needs (docs/<workload>.md, held to this by a test): the
    full dataset's disk and a reference-recipe training process's memory, from the figures
    the stages check."""
    dataset = registry.workload(workload).dataset
    real = registry.dataset(dataset).real
    disk = real.download + real.extracted + real.prepared
    drop = (
        f"`accelpipe drop-archives --dataset {dataset}` drops it once extracted"
        if _checksummed(_defaults()["datasets"][dataset])
        else "no checksum is published, so `accelpipe drop-archives` keeps it"
    )
    kept = (
        f"download {resources.gb(real.download)}, kept ({drop}); "
        if real.download
        else "your tars read in place; "
    )
    train = run_train(_defaults()[workload], workload, _first_run(workload))
    parts = memory_need(workload, train, True, None)
    cache = parts.pop("cache", 0) + parts.pop("loader", 0)
    memory = (
        f"~{resources.gb(sum(parts.values()))} per training process at the reference recipe "
        f"(process, model with gradients and optimizer state, batches in flight)"
    )
    volume_cache = registry.workload(workload).memory.volume_cache
    if cache and volume_cache is not None:
        volumes = math.floor(volume_cache.train_volumes * train["cache_rate"])
        full = volumes * volume_cache.volume_bytes
        share = f"{volume_cache.default_share:.0%}"
        memory += (
            f", plus the volume cache: {share} of what the process may use "
            f"(`{workload}.train.cache_memory_gb`; all {resources.gb(full)} would need more)"
        )
    return (
        f"Needs at full size (`accelpipe.plan.capacity`, checked before each stage starts): "
        f"disk ~{resources.gb(disk)} under `data_root` ({kept}extracted "
        f"{resources.gb(real.extracted)}, prepared {resources.gb(real.prepared)}; re-preparing "
        f"needs the prepared size again while the old copy stays); memory {memory}."
    )


def _checksummed(block: dict[str, Any]) -> bool:
    """Whether the official source's settings carry a published checksum of its archives."""
    settings = block[_settings_key(block)]
    entries = [settings, *(v for v in settings.values() if isinstance(v, dict))]
    return any(entry.get(k) for entry in entries for k in ("md5", "sha1", "sha256"))


def _first_run(workload: str) -> str:
    block = _defaults()[workload]
    return "fold0" if "folds" in block else sorted(block["runs"])[0]
