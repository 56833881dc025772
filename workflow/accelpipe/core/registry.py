"""The one registry of workloads and datasets: what each is made of and where it runs.

Rules, CLI, publish, provenance and tests read it. Adding a workload is its modules
(`datasets/<dataset>.py`, `workloads/<name>.py`, its model) plus one entry here and its
block in the config schema. This module imports no framework: Snakemake reads it while
planning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from accelpipe.core.errors import ConfigError

FRAMEWORKS = ("pytorch", "tensorflow")


@dataclass(frozen=True)
class Dataset:
    name: str
    # The image its raw and prepare stages run in: the framework of the workloads that read it
    # (preparation itself imports no framework: datasets/ writes TFRecords on its own).
    framework: str


@dataclass(frozen=True)
class Workload:
    name: str
    dataset: str
    variant: str  # data/prepared/<dataset>/<variant>
    framework: str  # the engine that trains and evaluates it, and the image it runs in
    # Files of the prepared folder that define the run's split: a changed split must not
    # resume a run trained on the old one (they key the resume directory).
    split_files: tuple[str, ...]
    # The metrics.json key of the quality metric (a number, higher is better): results/compare
    # shows it per run and marks the best; results/<workload>/grid ranks its runs by it.
    metric: str
    # What precision "auto" means on a backend where the workload departs from the backend's
    # default (devices.AUTO_PRECISION); devices.resolve_precision reads it for the trainer,
    # the preflight and the benchmarks alike. Only a PyTorch engine takes one.
    auto_precision: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)


DATASETS = {
    d.name: d
    for d in (
        Dataset("brats", "pytorch"),
        Dataset("nsclc", "pytorch"),
        Dataset("imagenet", "pytorch"),
        Dataset("coco", "tensorflow"),
        Dataset("ade20k", "tensorflow"),
    )
}

WORKLOADS = {
    w.name: w
    for w in (
        Workload("unet2d", "brats", "2d", "pytorch", ("config.json", "folds.json"), "mean_dice"),
        Workload(
            *("swinunetr", "nsclc", "nifti", "pytorch", ("datalist.json",), "mean_dice"),
            # the seed measured bf16 slower than fp16 on MI300X
            auto_precision={"rocm": "fp16"},
        ),
        Workload("resnet50", "imagenet", "index", "pytorch", ("classes.json",), "top1"),
        Workload("ssd", "coco", "tfrecord", "tensorflow", ("dataset.json",), "AP"),
        Workload("segmenter", "ade20k", "tfrecord", "tensorflow", ("dataset.json",), "mIoU"),
    )
}


def _known(names: object) -> str:
    return ", ".join(sorted(names))  # type: ignore[call-overload]


def workload(name: str) -> Workload:
    """The registry entry of a workload; an unknown name is refused, listing the known ones."""
    if name not in WORKLOADS:
        raise ConfigError(f"unknown workload {name!r} (known: {_known(WORKLOADS)})")
    return WORKLOADS[name]


def dataset(name: str) -> Dataset:
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r} (known: {_known(DATASETS)})")
    return DATASETS[name]


def variant_owner(dataset_name: str, variant: str) -> Workload:
    """The workload whose `prepare` settings define `data/prepared/<dataset>/<variant>`."""
    dataset(dataset_name)
    for w in WORKLOADS.values():
        if (w.dataset, w.variant) == (dataset_name, variant):
            return w
    variants = {w.variant for w in WORKLOADS.values() if w.dataset == dataset_name}
    raise ConfigError(
        f"dataset {dataset_name!r} has no prepared variant {variant!r} (known: {_known(variants)})"
    )
