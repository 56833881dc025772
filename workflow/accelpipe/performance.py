"""performance.json: a run's steady-state throughput, step time, data wait, time to train and
peak memory, beside the published figure for the same workload, precision and device family.

Pure functions over the run's files (train_log.csv and the train stage.json) and the
published figures (reference_figures.yaml); no framework. The step statistics leave out the
first `performance.warmup_steps` logged steps (tracing, compilation, caches filling) and
every step the profiler warmed up or recorded (train_log.csv's `profiled`), and say how many.
The publish slice carries the workload's figures (`figures_for`), so that a changed figure
re-runs publish, which reads them from there, and provenance.json records them.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from accelpipe import registry
from accelpipe.errors import DataError
from accelpipe.io import read_json
from accelpipe.provenance import STAGE_FILE

PERFORMANCE_FILE = "performance.json"
REFERENCE_FIGURES = Path(__file__).with_name("reference_figures.yaml")
_SCHEMA = Path(__file__).parent / "schemas" / "reference_figures.schema.yaml"
# engines.train_log.LOG_FILE, not imported: the engines' log writer brings TensorBoard along.
TRAIN_LOG = "train_log.csv"
_COLUMNS = ("samples_per_s", "data_wait_ms", "step_ms", "profiled")
# A GPU model in a device name: A100 in "NVIDIA A100-SXM4-80GB", V100, H100, MI300X.
_GPU_MODEL = re.compile(r"(?<![A-Z0-9])([A-Z]{1,2}\d{1,4}[A-Z]?)(?![A-Z0-9])")
# torch.hpu.get_device_name(): GAUDI (first generation), GAUDI2, GAUDI3.
_GAUDI = re.compile(r"GAUDI(\d*)")


@dataclass(frozen=True)
class Figure:
    """A published throughput (reference_figures.yaml explains the fields)."""

    workload: str
    samples_per_s: float
    unit: str
    precision: str
    device: str
    cards: int
    batch: int  # per card
    source: str
    note: str = ""


# -- step statistics ------------------------------------------------------------------------
def _read_log(train_log: Path) -> list[dict[str, str]]:
    try:
        with train_log.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in _COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise DataError(f"{train_log}: no column {', '.join(missing)}")
            return list(reader)
    except FileNotFoundError:
        raise DataError(f"{train_log}: file not found") from None


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default method)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        name: round(_percentile(ordered, q), 3)
        for name, q in (("median", 0.5), ("p10", 0.1), ("p90", 0.9))
    }


def _after_warmup(rows: list[dict[str, str]], warmup_steps: int) -> list[dict[str, str]]:
    """The rows past the first `warmup_steps` of their attempt."""
    seen: dict[str, int] = {}
    kept = []
    for row in rows:
        attempt = row.get("attempt") or "0"
        seen[attempt] = seen.get(attempt, 0) + 1
        if seen[attempt] > warmup_steps:
            kept.append(row)
    return kept


def step_statistics(train_log: Path, warmup_steps: int) -> dict[str, Any]:
    """Median, p10 and p90 of samples/s and step time, and the share of step time spent
    waiting for data, over the logged steps after the first `warmup_steps` of each attempt
    (the first start, then every resume) that the profiler left alone; `steps` counts the
    logged, warm-up, profiled (left out) and measured rows. A warm-up row is counted as
    warm-up even where the profiler ran too. A log without `attempt` is one attempt."""
    rows = _read_log(train_log)
    after_warmup = _after_warmup(rows, warmup_steps)
    measured = [r for r in after_warmup if r["profiled"] != "1"]
    step_ms = [float(r["step_ms"]) for r in measured]
    waited = sum(float(r["data_wait_ms"]) for r in measured)
    return {
        "steps": {
            "logged": len(rows),
            "warmup": len(rows) - len(after_warmup),
            "profiled_excluded": len(after_warmup) - len(measured),
            "measured": len(measured),
        },
        "samples_per_s": _spread([float(r["samples_per_s"]) for r in measured]),
        "step_ms": _spread(step_ms),
        "data_wait_share": round(waited / sum(step_ms), 4) if sum(step_ms) > 0 else None,
    }


# -- reference figures ----------------------------------------------------------------------
@cache
def load_figures(path: Path = REFERENCE_FIGURES) -> tuple[Figure, ...]:
    """The published figures in `path`, checked against their schema; a bad entry fails
    with one DataError naming the file and the key."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        reason = " ".join(str(err).split())  # YAML's messages span lines
        raise DataError(f"{path}: cannot read the reference figures ({reason})") from None
    validator = jsonschema.Draft7Validator(yaml.safe_load(_SCHEMA.read_text()))
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
    return tuple(Figure(**entry) for entry in data["figures"])


def figures_for(workload: str) -> list[dict[str, Any]]:
    """The workload's published figures, as the publish slice carries them."""
    return [asdict(f) for f in load_figures() if f.workload == workload]


def device_family(backend: str, device: str) -> str | None:
    """The family a published figure names, from the train stage's backend and device name:
    a GPU's model (cuda, rocm), a Gaudi's generation (gaudi: "Gaudi", "Gaudi2", ... from the
    card type both engines name the device by); None on the cpu and where the name does not
    say."""
    name = device.strip().upper()
    if backend in ("cuda", "rocm"):
        match = _GPU_MODEL.search(name)
        return match.group(1) if match else None
    if backend == "gaudi":
        match = _GAUDI.fullmatch(name)
        return f"Gaudi{match.group(1)}" if match else None
    return None


def _cards(n: int) -> str:
    return f"{n} card" if n == 1 else f"{n} cards"


def _no_family(backend: str, device: str) -> str:
    if backend == "cpu":
        return "no published figure for the cpu backend"
    return f"no published figure: the device name {device!r} does not say its model or generation"


def reference(
    workload: str,
    train: dict[str, Any],
    samples_per_s: dict[str, float] | None,
    figures: list[Figure],
) -> tuple[dict[str, Any] | None, str]:
    """The published figure for the run's workload, precision and device family, and the
    ratio of the run's median throughput to it per card; else None. Among several figures, the
    one with the nearest number of cards, then the nearest batch per card. The note says what
    the ratio compares, or why there is none."""
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
    figure = min(matches, key=lambda f: (abs(f.cards - world), abs(f.batch - batch)))
    published = {
        "samples_per_s": figure.samples_per_s,
        "precision": figure.precision,
        "device": figure.device,
        "batch": figure.batch,
        "cards": figure.cards,
        "source": figure.source,
    }
    there = (
        f"the published {figure.samples_per_s:g} {figure.unit} / {_cards(figure.cards)} "
        f"(batch {figure.batch} per card{', ' + figure.note if figure.note else ''})"
    )
    if samples_per_s is None:
        return published | {"ratio": None}, f"no ratio: no measured step to compare with {there}"
    mine = samples_per_s["median"]
    ratio = (mine / world) / (figure.samples_per_s / figure.cards)
    note = (
        f"ratio per card: this run's median {mine:g} samples/s / {_cards(world)} (batch "
        f"{batch:g} per card) over {there}"
    )
    return published | {"ratio": float(f"{ratio:.4g}")}, note  # 4 significant digits


# -- performance.json -----------------------------------------------------------------------
def run_performance(
    stage_dirs: dict[str, Path], config_slice: dict[str, Any], workload: str, run: str
) -> dict[str, Any]:
    """performance.json of a run, from its train stage's output (train_log.csv, stage.json)
    and the publish slice's `performance` settings and `reference_figures`."""
    train = read_json(stage_dirs["train"] / STAGE_FILE)
    warmup = config_slice["performance"]["warmup_steps"]
    stats = step_statistics(stage_dirs["train"] / TRAIN_LOG, warmup)
    figures = [Figure(**f) for f in config_slice["reference_figures"]]
    published, note = reference(workload, train, stats["samples_per_s"], figures)
    return {
        "workload": workload,
        "run": run,
        "backend": train["backend"],
        "device": train["device"],
        "precision": train["precision"],
        "world_size": train["world_size"],
        "global_batch": train["global_batch"],
        "steps": {"total": train["steps"], **stats["steps"]},
        "samples_per_s": stats["samples_per_s"],
        "step_ms": stats["step_ms"],
        "data_wait_share": stats["data_wait_share"],
        "time_to_train_s": train["seconds"],
        "peak_device_memory_bytes": train.get("peak_device_memory_bytes"),
        "device_memory_source": train.get("device_memory_source"),
        "peak_host_rss_bytes": train.get("peak_host_rss_bytes"),
        "reference": published,
        "reference_note": note,
    }
