"""The one registry of workloads and datasets: what each is made of and where it runs.

Rules, CLI, publish, provenance and tests read it. A workload declares itself in its folder,
`workloads/<name>/` (docs/development.md, "Adding a workload"): its `declaration` module (the
`Workload` record of accelpipe.config.declare: dataset, variant, framework, metric, settings
views, ...) and its data files (its config-schema block, quality target, published figures,
recipe), which the tables of the package are derived from. Registering it is one import and
one entry of `DECLARED` here, the only place outside its folder that names it: an import, not
a name looked up at run time, so that the import graph (the stages' code keys, the layer
test) sees every declaration. This module imports no framework: Snakemake reads it while
planning.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from accelpipe.config.declare import Workload
from accelpipe.core.errors import ConfigError
from accelpipe.workloads.resnet50 import declaration as resnet50
from accelpipe.workloads.segmenter import declaration as segmenter
from accelpipe.workloads.ssd import declaration as ssd
from accelpipe.workloads.swinunetr import declaration as swinunetr
from accelpipe.workloads.unet2d import declaration as unet2d

# The registered workloads, in the order pages and tables list them.
DECLARED = (unet2d, swinunetr, resnet50, ssd, segmenter)

FRAMEWORKS = ("pytorch", "tensorflow")
WORKLOADS_DIR = Path(__file__).parents[1] / "workloads"
# A workload's published figures in its folder: its quality target (config.quality), the
# throughput of its reference (performance.figures) and its input pipeline's name.
PUBLISHED = "published.yaml"

__all__ = ["DATASETS", "FRAMEWORKS", "WORKLOADS", "Dataset", "Workload"]


@dataclass(frozen=True)
class Dataset:
    name: str
    # The image its raw and prepare stages run in: the framework of the workloads that read it
    # (preparation itself imports no framework: datasets/ writes TFRecords on its own).
    framework: str


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

WORKLOADS: dict[str, Workload] = {m.WORKLOAD.name: m.WORKLOAD for m in DECLARED}


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


def folder(name: str) -> Path:
    """`workloads/<name>/`: the workload's declaration, its framework module and data files."""
    return WORKLOADS_DIR / workload(name).name


def published(name: str) -> Path:
    return folder(name) / PUBLISHED
