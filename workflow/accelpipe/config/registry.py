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

__all__ = ["DATASETS", "FRAMEWORKS", "WORKLOADS", "Dataset", "RealSize", "Workload"]


@dataclass(frozen=True)
class RealSize:
    """The full real dataset's disk figures (bytes), for the preflight (plan.preflight) and
    the workload pages' "real data" lines: its official archives as downloaded (kept in
    data_root/downloads), what they extract to (data_root/raw) and the prepared variant."""

    items: int  # cases, patients or images of the full dataset
    item_values: int  # values per item (issue 33's real per-item sizes): scales a synthetic one
    download: int
    extracted: int
    prepared: int
    source: str  # where the figures come from


@dataclass(frozen=True)
class Dataset:
    name: str
    # The image its raw and prepare stages run in: the framework of the workloads that read it
    # (preparation itself imports no framework: datasets/ writes TFRecords on its own).
    framework: str
    real: RealSize


DATASETS = {
    d.name: d
    for d in (
        Dataset(
            "brats",
            "pytorch",
            # REFERENCE.md: Task01_BrainTumour.tar ~7 GB of .nii.gz (extracts to about as
            # much), 484 training cases; prepared float32 (4, D, 192, 160) per case, ~35 GB
            # (issue 33's measurement at real per-case size: 5-8x the download); a case is
            # 240x240x155 voxels of four channels and the label
            RealSize(
                484,
                240 * 240 * 155 * 5,
                7_100_000_000,
                7_100_000_000,
                35_000_000_000,
                "REFERENCE.md, issue 33",
            ),
        ),
        Dataset(
            "nsclc",
            "pytorch",
            # 422 patients of ~512x512x130 int16 CT (issue 33): ~68 MB of DICOM each, zipped
            # per series as TCIA serves them (DICOM barely compresses); prepared NIfTI counted
            # uncompressed (gzip only shrinks it)
            RealSize(
                422,
                512 * 512 * 130,
                29_000_000_000,
                29_000_000_000,
                29_000_000_000,
                "issue 33 per-item",
            ),
        ),
        Dataset(
            "imagenet",
            "pytorch",
            # REFERENCE.md: your ILSVRC2012 train (147.9 GB) and val (6.7 GB) tars, read where
            # they are (no download); the import extracts them (~154 GB, issue 33); the
            # prepared index is CSV (~0.1 GB)
            RealSize(
                1_331_167, 500 * 375 * 3, 0, 154_600_000_000, 100_000_000, "REFERENCE.md, issue 33"
            ),
        ),
        Dataset(
            "coco",
            "tensorflow",
            # REFERENCE.md: train2017.zip ~19.3 GB, val2017.zip ~816 MB, annotations ~253 MB
            # (JSONs ~0.8 GB extracted); TFRecords hold the JPEG bytes unchanged (~20 GB)
            RealSize(
                123_287,
                640 * 480 * 3,
                20_370_000_000,
                20_900_000_000,
                20_100_000_000,
                "REFERENCE.md",
            ),
        ),
        Dataset(
            "ade20k",
            "tensorflow",
            # ADEChallengeData2016.zip ~0.92 GB (config.yaml: ~1 GB), 512x384 JPEG + PNG (RGB
            # and the label); TFRecords
            # hold the raw bytes (REFERENCE.md: one Example per image, raw JPEG + PNG bytes)
            RealSize(22_210, 512 * 384 * 4, 923_000_000, 950_000_000, 950_000_000, "REFERENCE.md"),
        ),
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
