"""The catalogue of published figures (each workload's published.yaml, checked against
schemas/reference_figures.schema.yaml) and a run's ratio to the one that matches its workload,
precision and device family: whether it is comparable (the figure's conditions match the
run's) or indicative, and why.

The publish slice carries the workload's figures (`figures_for`), so that a changed figure
re-runs publish, which reads them from there, and provenance.json records them. Snakemake
imports this module to plan: it loads no framework, no meter and no log.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from accelpipe.config import recipes, registry
from accelpipe.core.errors import DataError
from accelpipe.core.io import read_yaml
from accelpipe.devices import device_family, peaks

PACKAGE_DIR = Path(__file__).parent.parent
_SCHEMA = PACKAGE_DIR / "schemas" / "reference_figures.schema.yaml"

# How a published figure was computed (a figure's `computed`, its schema's enum):
# what the ratio note says of it. Ours is DEFINITIONS["throughput"], samples_over_time.
COMPUTED = {
    "samples_over_time": "samples over the wall time of the measured steps",
    "mean_of_step_rates": "the mean of single steps' rates",
    "median_of_interval_rates": "the median of rates each over many steps or an epoch",
    "best_epoch": "the fastest epoch's rate",
    "median_of_runs": "the median over several runs",
    "unknown": "computed in a way its source does not say",
}
OURS_COMPUTED = "samples_over_time"
# Device families whose fp32 products run as TF32 where the framework allows it: NVIDIA's TF32
# figures count as fp32 there, and a run with TF32 off is not like for like.
TF32_FAMILIES = ("A100", "H100", "H200")


@dataclass(frozen=True)
class Figure:
    """A published throughput and the conditions it was measured under
    (schemas/reference_figures.schema.yaml explains the fields)."""

    workload: str
    samples_per_s: float
    unit: str
    precision: str
    device: str
    cards: int
    batch: int  # per card
    source: str
    data: str  # real | synthetic | unknown
    loader: str
    computed: str  # a key of COMPUTED
    software: str
    # the release or commit of the code and recipe it ran: the workload's recipe id
    # (workloads/<workload>/recipe.yaml) where it is the one our defaults follow
    recipe: str
    note: str = ""
    computed_note: str = ""


def _figure_entries(path: Path) -> list[dict[str, Any]]:
    """The `figures` of `path`, checked against their schema; a bad entry fails with one
    DataError naming the file and the key."""
    try:
        data = read_yaml(path) or {}
    except (OSError, yaml.YAMLError) as err:
        reason = " ".join(str(err).split())  # YAML's messages span lines
        raise DataError(f"{path}: cannot read the reference figures ({reason})") from None
    data = {"figures": data.get("figures")}
    validator = jsonschema.Draft7Validator(read_yaml(_SCHEMA))
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path) or "<root>"
        raise DataError(f"{path}: key '{key}': {error.message}")
    for i, entry in enumerate(data["figures"]):
        if entry["workload"] not in registry.WORKLOADS:
            raise DataError(
                f"{path}: key 'figures.{i}.workload': unknown workload {entry['workload']!r} "
                f"({', '.join(registry.WORKLOADS)})"
            )
    entries: list[dict[str, Any]] = data["figures"]
    return entries


@cache
def load_figures(path: Path | None = None) -> tuple[Figure, ...]:
    """The published figures of every workload (its published.yaml's `figures`, in registry
    order; `path`: one file holding them all instead), each checked against their schema."""
    files = [path] if path is not None else [registry.published(n) for n in registry.WORKLOADS]
    return tuple(Figure(**entry) for file in files for entry in _figure_entries(file))


@cache
def figure_loader(workload: str) -> str:
    """The workload's input pipeline, as a figure's `loader` names it (its published.yaml:
    only the stages that read figures re-run on it)."""
    data = read_yaml(registry.published(workload)) or {}
    if not isinstance(data.get("loader"), str):
        raise DataError(f"{registry.published(workload)}: key 'loader': a string, e.g. tf.data")
    return str(data["loader"])


def figures_for(workload: str) -> list[dict[str, Any]]:
    """The workload's published figures, as the publish slice carries them."""
    return [asdict(f) for f in load_figures() if f.workload == workload]


def _cards(n: int) -> str:
    return f"{n} card" if n == 1 else f"{n} cards"


def _no_family(backend: str, device: str) -> str:
    if backend == "cpu":
        return "no published figure for the cpu backend"
    return f"no published figure: the device name {device!r} does not say its model or generation"


def run_data(config_slice: dict[str, Any], workload: str) -> str:
    """What the run trained on, as a figure's `data` names it: "synthetic" where the publish
    slice's dataset source is synthetic, "real" for any other source (a download, an import or
    a path to a copy), "unknown" where the slice names no source."""
    dataset = registry.workload(workload).dataset
    source = (config_slice.get("datasets") or {}).get(dataset, {}).get("source")
    if source is None:
        return "unknown"
    return "synthetic" if source == "synthetic" else "real"


def _tf32(train: dict[str, Any]) -> bool | None:
    """Whether a cuda fp32 run's products ran mostly as TF32 (peaks.fp32_uses_tf32 over the
    switches its matmul probe recorded); None where the train stage recorded none."""
    switches = (train.get("gemm") or {}).get("tf32_switches")
    if not switches:
        return None
    return peaks.fp32_uses_tf32(
        train["backend"], switches, (train.get("flops") or {}).get("by_kind")
    )


def differences(
    figure: Figure, train: dict[str, Any], family: str, data: str, loader: str
) -> list[str]:
    """Every condition under which `figure` was measured that the run does not share: cards,
    batch per card, precision (TF32 or not), how the rate was computed, the data (both must be
    real: synthetic data has its own sizes), the input pipeline and the recipe (a figure of
    another release is never like for like). None: the ratio is comparable."""
    world = train["world_size"]
    batch = train["global_batch"] / world
    found = []
    if figure.cards != world:
        found.append(
            f"this run on {_cards(world)}, the figure on {_cards(figure.cards)} (a per-card "
            "rate still depends on the communication between the cards)"
        )
    if figure.batch != batch:
        found.append(f"batch {batch:g} per card vs the figure's {figure.batch}")
    if figure.precision == "fp32" and family.upper() in TF32_FAMILIES:
        tf32 = _tf32(train) if train["backend"] == "cuda" else None
        if tf32 is False:
            found.append("the figure's fp32 is TF32; this run's products ran mostly in full fp32")
        elif tf32 is None:
            found.append("the figure's fp32 is TF32; whether this run's was is not recorded")
    if figure.computed != OURS_COMPUTED:
        found.append(f"the figure is {COMPUTED[figure.computed]}, ours {COMPUTED[OURS_COMPUTED]}")
    if data != "real":
        found.append(
            "this run on synthetic data (its own sizes, not the dataset's)"
            if data == "synthetic"
            else "whether this run's data was real or synthetic is not recorded"
        )
    if figure.data != "real":
        found.append(
            "the figure on synthetic data"
            if figure.data == "synthetic"
            else "the source does not say whether the figure ran on real or synthetic data"
        )
    if figure.loader.casefold() != loader.casefold():
        found.append(
            f"the figure's input pipeline is {figure.loader}, ours {loader}"
            if figure.loader != "unknown"
            else f"the source does not name the figure's input pipeline (ours: {loader})"
        )
    ours = recipes.recipe_id(figure.workload)
    if figure.recipe != ours:
        found.append(f"the figure ran another recipe ({figure.recipe}); this run follows {ours}")
    return found


def reference(
    workload: str,
    train: dict[str, Any],
    samples_per_s: float | None,
    figures: list[Figure],
    data: str,
) -> tuple[dict[str, Any] | None, str]:
    """The published figure for the run's workload, precision and device family, and the
    ratio of the run's throughput (the measured steps' samples over their wall time) to it
    per card; else None. `data`: what the run trained on (`run_data`: real, synthetic or
    unknown). Among several figures, the one with the nearest number of cards, then the
    nearest batch per card, then the fewest differences (ties: the one listed first).

    The ratio is `comparable` only where the figure's conditions all match the run's (device
    family, precision, batch per card, cards, the definition of the rate, real data on both
    sides, the input pipeline); otherwise it is indicative and `differences` lists each one.
    The note says what the ratio compares and how, or why there is none."""
    backend, device, precision = train["backend"], train["device"], train["precision"]
    family = device_family(backend, device)
    if family is None:
        return None, _no_family(backend, device)
    matches = [
        f
        for f in figures
        if (f.workload, f.precision, f.device.upper()) == (workload, precision, family.upper())
    ]
    if not matches:
        return None, f"no published figure for {workload} at {precision} on {family}"
    world = train["world_size"]
    batch = train["global_batch"] / world
    loader = figure_loader(workload)
    scored = [(f, differences(f, train, family, data, loader)) for f in matches]
    figure, listed = min(
        scored,
        key=lambda fd: (abs(fd[0].cards - world), abs(fd[0].batch - batch), len(fd[1])),
    )
    published = {
        "samples_per_s": figure.samples_per_s,
        "precision": figure.precision,
        "device": figure.device,
        "batch": figure.batch,
        "cards": figure.cards,
        "data": figure.data,
        "loader": figure.loader,
        "computed": figure.computed,
        "software": figure.software,
        "recipe": figure.recipe,
        "our_recipe": recipes.recipe_id(workload),
        "source": figure.source,
        "note": figure.note,
        "comparable": not listed,
        "differences": listed,
    }
    there = (
        f"the published {figure.samples_per_s:g} {figure.unit} / {_cards(figure.cards)} "
        f"(batch {figure.batch} per card, {figure.precision} on {figure.device})"
    )
    verdict = (
        "comparable: the figure's conditions match this run's"
        if not listed
        else "indicative, not like for like: " + "; ".join(listed)
    )
    if samples_per_s is None:
        note = f"no ratio: no measured step to compare with {there}; {verdict}"
        return published | {"ratio": None}, note
    ratio = (samples_per_s / world) / (figure.samples_per_s / figure.cards)
    note = (
        f"ratio per card: this run's {samples_per_s:g} samples/s (measured steps) / "
        f"{_cards(world)} (batch {batch:g} per card) over {there}; {verdict}"
    )
    return published | {"ratio": float(f"{ratio:.4g}")}, note  # 4 significant digits
