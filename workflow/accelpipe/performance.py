"""performance.json: a run's throughput, step time, data wait, time to train and peak memory,
beside the published figure for the same workload, precision and device family, and whether
the ratio to it is comparable (the figure's conditions match the run's) or indicative.

The one definition of each figure, used by performance.json, the benchmark table, the grid
and the compare page (docs/benchmarks.md, "Performance figures"):

- throughput (the headline): samples over the wall time they took, over the measured steps:
  the logged steps after the first `performance.warmup_steps` of each attempt (tracing,
  compilation, caches filling) that the profiler left alone. A logged step's wall time runs
  from the end of the previous logged step of its epoch (or the epoch's start), so data
  wait, logging and any unlogged steps between are in it (train_log.csv's `samples` and
  `wall_ms`).
- stage throughput: the run's samples (every step of the trained model) over the train
  stage's wall time, every attempt of a resumed run together (start-up, warm-up, profiled
  steps, evaluation, checkpoints and the steps a killed attempt did for nothing included).
- time to train: the train stage's wall time over every attempt (stage.json's `attempts`,
  each listed in performance.json), so never below the time to target, which counts each
  attempt up to its last checkpoint.
- per-step distribution: median, p10 and p90 of single logged steps' rates and times. A
  spread, never a throughput: the median of per-step rates overstates a run whose slow steps
  are few but long.
- energy: the joules of the measured steps (train_log.csv's `energy_j`, over the same rows
  and wall time as the throughput), per 1,000 samples and as mean watts, beside the whole
  train process's joules (stage.json's `power`); null with the reason where no power source
  measured the run's devices.

Pure functions over the run's files (train_log.csv and the train stage.json) and the
published figures (reference_figures.yaml); no framework. The publish slice carries the
workload's figures (`figures_for`), so that a changed figure re-runs publish, which reads them
from there, and provenance.json records them.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from accelpipe import recipes, registry
from accelpipe.devices import device_family, peaks
from accelpipe.devices.power import Energy, joules_per_1000_samples
from accelpipe.engines.evaluations import EVAL_LOG
from accelpipe.errors import DataError
from accelpipe.io import read_json
from accelpipe.provenance import STAGE_FILE

PERFORMANCE_FILE = "performance.json"
REFERENCE_FIGURES = Path(__file__).with_name("reference_figures.yaml")
_SCHEMA = Path(__file__).parent / "schemas" / "reference_figures.schema.yaml"
# engines.train_log.LOG_FILE, not imported: the engines' log writer brings TensorBoard along.
TRAIN_LOG = "train_log.csv"
_COLUMNS = ("samples_per_s", "data_wait_ms", "step_ms", "profiled", "samples", "wall_ms")
DEFINITIONS = {
    "throughput": (
        "samples over the wall time of the measured steps (logged steps after the warm-up of "
        "each attempt that the profiler left alone), data wait and logging included"
    ),
    "stage_throughput": (
        "the run's samples (its steps x the global batch) over the train stage's wall time, "
        "every attempt of a resumed run together (start-up, warm-up, profiled steps, "
        "evaluation, checkpoints and steps redone after a kill included)"
    ),
    "time_to_train_s": (
        "the train stage's wall time, from its start (the launch) to its output, summed over "
        "every attempt of a killed and resumed run (`attempts`: each one's seconds)"
    ),
    "per_step": "median, p10 and p90 of single measured steps: a spread, not a throughput",
    "model_tflops": (
        "FLOPs per training sample (counted by the framework over one real step) x the "
        "throughput, over every device of the run"
    ),
    "mfu": "model TFLOP/s over the devices' published dense peak at the run's precision",
    "gemm_fraction": (
        "model TFLOP/s over the matmul ceiling measured on the run's device and precision "
        "(gemm.gemm_tflops x devices)"
    ),
    "time_to_target_s": (
        "seconds from the run's start (model, data and probe ready) to the end of the first "
        "evaluation inside training that reached the quality target, training and evaluation "
        "included (MLPerf's time to train); a resumed run counts each attempt up to its last "
        "checkpoint"
    ),
    "energy": (
        "joules the run's devices used over the measured steps (train_log.csv's energy_j: "
        "NVML, amdsmi, hl-smi or RAPL), per 1,000 samples and as mean watts over their wall "
        "time; beside it the whole train process's joules"
    ),
}


# How a published figure was computed (reference_figures.yaml's `computed`, its schema's enum):
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
# Each workload's input pipeline, as a figure's `loader` names it (performance.json compares
# them; kept here, not in the registry, so that only the stages reading figures re-run on it).
LOADERS = {
    "unet2d": "torch DataLoader",
    "swinunetr": "torch DataLoader",  # MONAI's CacheDataset in its DataLoader (a torch one)
    "resnet50": "torch DataLoader",
    "ssd": "tf.data",
    "segmenter": "tf.data",
}
# Device families whose fp32 products run as TF32 where the framework allows it: NVIDIA's TF32
# figures count as fp32 there, and a run with TF32 off is not like for like.
TF32_FAMILIES = ("A100", "H100", "H200")


@dataclass(frozen=True)
class Figure:
    """A published throughput and the conditions it was measured under
    (reference_figures.yaml explains the fields)."""

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
    # (workloads/<workload>_recipe.yaml) where it is the one our defaults follow
    recipe: str
    note: str = ""
    computed_note: str = ""


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


def throughput(samples: float, seconds: float) -> float | None:
    """The one definition of a throughput: samples over the wall time they took (None
    where nothing was timed)."""
    # 6 significant digits: a 3D run's 0.0968 samples/s keeps its digits
    return float(f"{samples / seconds:.6g}") if samples > 0 and seconds > 0 else None


def _not_measured(steps: dict[str, int], warmup_steps: int) -> str | None:
    """Why no step was measured; None where some were."""
    if steps["measured"]:
        return None
    if not steps["logged"]:
        return "no step was logged (train.log_every longer than the run?)"
    if steps["profiled_excluded"]:
        return "every step after the warm-up was profiled (profile.schedule covers the run)"
    return (
        f"the warm-up (performance.warmup_steps: {warmup_steps} per attempt) is at least as "
        f"long as the run ({steps['logged']} logged steps)"
    )


def step_statistics(train_log: Path, warmup_steps: int) -> dict[str, Any]:
    """The measured steps' throughput (samples over their wall time) and the per-step
    distribution (median, p10, p90 of samples/s and step time), and the share of step time
    spent waiting for data, over the logged steps after the first `warmup_steps` of each
    attempt (the first start, then every resume) that the profiler left alone; `steps` counts
    the logged, warm-up, profiled (left out) and measured rows. A warm-up row is counted as
    warm-up even where the profiler ran too. No measured step: the throughput is None and
    `not_measured` says why."""
    rows = _read_log(train_log)
    after_warmup = _after_warmup(rows, warmup_steps)
    measured = [r for r in after_warmup if r["profiled"] != "1"]
    step_ms = [float(r["step_ms"]) for r in measured]
    waited = sum(float(r["data_wait_ms"]) for r in measured)
    # energy_j: empty where nothing was measured, absent from a log older than the column
    energies = [float(r["energy_j"]) for r in measured if r.get("energy_j")]
    samples = sum(float(r["samples"]) for r in measured)
    seconds = sum(float(r["wall_ms"]) for r in measured) / 1e3
    steps = {
        "logged": len(rows),
        "warmup": len(rows) - len(after_warmup),
        "profiled_excluded": len(after_warmup) - len(measured),
        "measured": len(measured),
    }
    return {
        "steps": steps,
        "throughput": {
            "samples_per_s": throughput(samples, seconds),
            "samples": int(samples),
            "seconds": round(seconds, 6),
            "not_measured": _not_measured(steps, warmup_steps),
        },
        "per_step": {
            "samples_per_s": _spread([float(r["samples_per_s"]) for r in measured]),
            "step_ms": _spread(step_ms),
        },
        "data_wait_share": round(waited / sum(step_ms), 4) if sum(step_ms) > 0 else None,
        # the measured steps' joules (None unless every one of them has its energy_j)
        "energy_j": sum(energies) if measured and len(energies) == len(measured) else None,
    }


def attempts(train: dict[str, Any]) -> list[dict[str, Any]]:
    """Each start of the train stage (stage.json's `attempts`); a stage.json from before
    they were recorded: its one attempt, as its seconds say."""
    recorded = train.get("attempts")
    if recorded:
        return list(recorded)
    return [
        {
            "attempt": 1,
            "started": None,
            "seconds": train["seconds"],
            "resumed_from_step": train.get("resumed_from_step"),
            "status": "finished",
        }
    ]


def stage_throughput(train: dict[str, Any]) -> dict[str, Any]:
    """The run's samples (its steps at the global batch) over the train stage's wall time,
    every attempt together (stage.json's seconds: their sum). A stage.json from before
    attempts were recorded timed its last attempt only: the steps that one trained."""
    unrecorded = 0 if train.get("attempts") else train.get("resumed_from_step") or 0
    samples = (train["steps"] - unrecorded) * train["global_batch"]
    return {
        "samples_per_s": throughput(samples, train["seconds"]),
        "samples": samples,
        "seconds": train["seconds"],
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
    loader = LOADERS[workload]
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


# What a table row shows of `compute` (benchmark rows, the compare page).
COMPUTE_COLUMNS = ("flops_per_sample", "model_tflops", "mfu", "gemm_fraction")


def energy(train: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """The measured steps' joules (the sum of their energy_j), per 1,000 samples and as
    mean watts over their wall time (the throughput's rows, samples and seconds), and the
    whole train process's joules (stage.json's `power`), with the source and method; each
    None, and `not_measured` saying why, where there is no power source, the meter missed
    some of the run's devices, or no measured step has its energy."""
    facts = train.get("power")
    power = facts or {}
    process = power.get("joules")
    reason = (
        "not recorded: the train stage predates energy measurement"
        if facts is None
        else power.get("reason") or power.get("incomplete")
    )
    joules = stats.get("energy_j")
    if reason is None and joules is None:
        reason = stats["throughput"]["not_measured"] or (
            "a measured step of train_log.csv has no energy_j"
        )
        reason = f"no energy over the measured steps: {reason}"
    elif reason is not None:
        joules = process = None
    samples, seconds = stats["throughput"]["samples"], stats["throughput"]["seconds"]
    window = Energy(joules, seconds, None, power.get("source"), power.get("method"), 0, None)
    return {
        "joules": round(joules, 6) if joules is not None else None,
        "joules_per_1000_samples": _rounded(joules_per_1000_samples(window, samples)),
        "mean_watts": _rounded(joules / seconds) if joules is not None and seconds else None,
        "process_joules": round(process, 6) if process is not None else None,
        "process_seconds": round(power["seconds"], 3) if process is not None else None,
        "source": power.get("source"),
        "method": power.get("method"),
        "devices": power.get("devices"),
        "not_measured": reason,
    }


# -- performance.json -----------------------------------------------------------------------
PROFILED_STEP_TOLERANCE = 0.2  # the profiled step may differ this much from the measured one
TRACE_SUMMARY = "summary.json"  # the trace stage's, traces.summary.write_summary


def profiled_step(trace_dir: Path | None, step_ms: dict[str, float] | None) -> dict[str, Any]:
    """Whether the trace's median profiled step agrees with the measured (unprofiled) median
    step within PROFILED_STEP_TOLERANCE: a profiled step far slower means the trace's section
    times are not the steps the throughput measured (profiler overhead, or steps still warming
    up), and the page flags it with both numbers."""
    summary = trace_dir / TRACE_SUMMARY if trace_dir is not None else None
    steps = read_json(summary).get("steps") if summary and summary.exists() else None
    traced = steps["ms"]["median"] if steps else None
    measured = step_ms["median"] if step_ms else None
    facts: dict[str, Any] = {"trace_median_ms": traced, "measured_median_ms": measured}
    if traced is None or not measured:
        missing = "no profiled step in the trace" if traced is None else "no measured step"
        return facts | {"ratio": None, "agrees": None, "note": f"not compared: {missing}"}
    ratio = traced / measured
    agrees = abs(ratio - 1) <= PROFILED_STEP_TOLERANCE
    note = (
        f"the profiled step ({traced:.3f} ms, trace median) "
        f"{'agrees with' if agrees else 'DISAGREES with'} the measured median step "
        f"({measured:.3f} ms): ratio {ratio:.3f}, tolerance {PROFILED_STEP_TOLERANCE:.0%}"
    )
    return facts | {"ratio": round(ratio, 4), "agrees": agrees, "note": note}


def compute(train: dict[str, Any], samples_per_s: float | None) -> dict[str, Any]:
    """FLOPs per sample, the model TFLOP/s they give at the run's throughput, MFU against the
    device's dense peak and the fraction of the matmul ceiling measured on the same device
    (stage.json's `flops` and `gemm`); each None with its reason where it cannot be had."""
    flops, gemm = train.get("flops") or {}, train.get("gemm") or {}
    per_sample = flops.get("flops_per_sample")
    world = train["world_size"]
    model = per_sample * samples_per_s / 1e12 if per_sample and samples_per_s else None
    tf32 = train["precision"] == "fp32" and peaks.fp32_uses_tf32(
        train["backend"], gemm.get("tf32_switches") or {}, flops.get("by_kind")
    )
    peak, peak_note = peaks.lookup(train["backend"], train["device"], train["precision"], tf32=tf32)
    ceiling = gemm.get("gemm_tflops")
    reasons = {
        "flops": None if per_sample else flops.get("reason", "no counted train step"),
        "model_tflops": None if model else "no FLOPs per sample or no measured throughput",
    }
    return {
        "flops_per_sample": per_sample,
        "flops_counted_by": flops.get("counted_by"),
        "model_tflops": _rounded(model),
        "peak_tflops_per_device": peak.tflops if peak else None,
        "peak_note": peak_note,
        "mfu": _rounded(model / (peak.tflops * world)) if model and peak else None,
        "gemm_tflops_per_device": _rounded(ceiling),
        "gemm": gemm or None,
        "gemm_fraction": _rounded(model / (ceiling * world)) if model and ceiling else None,
        "not_measured": {k: v for k, v in reasons.items() if v} or None,
    }


def _rounded(value: float | None) -> float | None:
    return float(f"{value:.4g}") if value is not None else None  # 4 significant digits


# -- the host ---------------------------------------------------------------------------------
# A host is oversubscribed over a run's training when other processes took more than this
# share of the CPUs the job could use (their CPU seconds / (wall seconds x usable CPUs)), or
# when the 1-minute load average at the end, less the job's own mean CPU use, exceeds the
# host's cores (more runnable threads of others than cores). Its figures then undercount.
OTHER_CPU_SHARE_LIMIT = 0.1


def host_load(host: dict[str, Any] | None) -> dict[str, Any]:
    """performance.json's `host`: the train stage's host facts (devices.host.HostWindow over
    the training loop: CPU model, cores, load averages, the job's and other processes' CPU
    seconds) with `other_cpu_share`, `oversubscribed` and the `warning` to show where it is;
    `oversubscribed` None where the facts cannot tell (an older run, no /proc)."""
    if not host:
        return {
            "oversubscribed": None,
            "other_cpu_share": None,
            "warning": None,
            "note": "no host facts in the train stage.json (trained before they were recorded)",
        }
    window, cpus, other = host["window_s"], host["usable_cpus"], host["other_cpu_s"]
    share = other / (window * cpus) if other is not None and window > 0 and cpus else None
    load = (host.get("load_average_end") or [None])[0]
    own = host["job_cpu_s"] / window if host.get("job_cpu_s") is not None and window > 0 else 0
    others_load = load - own if load is not None else None
    reasons = []
    if share is not None and share > OTHER_CPU_SHARE_LIMIT:
        reasons.append(
            f"other processes used {share:.0%} of the {cpus} CPUs this job could use over its "
            f"{window:.1f} s of training (more than {OTHER_CPU_SHARE_LIMIT:.0%})"
        )
    if others_load is not None and host.get("cores") and others_load > host["cores"]:
        reasons.append(
            f"the 1-minute load average was {load:.1f} at the end of training, "
            f"{others_load:.1f} besides this job, on {host['cores']} cores"
        )
    judged = share is not None or others_load is not None
    warning = (
        "host oversubscribed: " + "; and ".join(reasons) + ": throughput, step times and "
        "time to train may be lower than the device allows"
        if reasons
        else None
    )
    if share is not None:
        note = f"other processes: {share:.1%} of {cpus} CPUs over {window:.1f} s of training"
    else:
        note = f"CPU times not measured: {host.get('not_measured') or 'no window'}"
    return host | {
        "other_cpu_share": round(share, 4) if share is not None else None,
        "oversubscribed": bool(reasons) if judged else None,
        "warning": warning,
        "note": warning or note,
    }


def time_to_target(eval_log: Path) -> dict[str, Any]:
    """`time_to_target_s`: the run's seconds at the first evaluation in eval_log.csv that
    reached the target, else None; `time_to_target` says which evaluation, or why none."""
    if not eval_log.exists():
        return {
            "time_to_target_s": None,
            "time_to_target": {"not_reached": "no evaluation inside training (train.eval_every)"},
        }
    with eval_log.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["reached"] == "1":
            at = {k: row[k] for k in ("epoch", "step", "samples")}
            detail = {k: int(v) for k, v in at.items()} | {
                "metric": row["metric"],
                "value": float(row["value"]),
                "target": float(row["target"]),
                "evaluations": rows.index(row) + 1,
            }
            return {"time_to_target_s": float(row["run_s"]), "time_to_target": detail}
    last = rows[-1] if rows else None
    reason = (
        "no evaluation"
        if last is None
        else (
            f"not reached in {len(rows)} evaluations, the last after epoch {last['epoch']}: "
            f"{last['metric']} {last['value'] or 'none'} against {last['target'] or 'no target'}"
        )
    )
    return {"time_to_target_s": None, "time_to_target": {"not_reached": reason}}


def run_performance(
    stage_dirs: dict[str, Path], config_slice: dict[str, Any], workload: str, run: str
) -> dict[str, Any]:
    """performance.json of a run, from its train stage's output (train_log.csv, stage.json),
    its trace summary and the publish slice's `performance` settings, `reference_figures`
    and dataset source (real or synthetic data, for the figure's conditions)."""
    train = read_json(stage_dirs["train"] / STAGE_FILE)
    warmup = config_slice["performance"]["warmup_steps"]
    stats = step_statistics(stage_dirs["train"] / TRAIN_LOG, warmup)
    figures = [Figure(**f) for f in config_slice["reference_figures"]]
    headline = stats["throughput"]["samples_per_s"]
    data = run_data(config_slice, workload)
    published, note = reference(workload, train, headline, figures, data)
    return {
        "workload": workload,
        "run": run,
        "backend": train["backend"],
        "device": train["device"],
        "precision": train["precision"],
        "world_size": train["world_size"],
        "global_batch": train["global_batch"],
        "steps": {"total": train["steps"], **stats["steps"]},
        "throughput": stats["throughput"],
        "stage_throughput": stage_throughput(train),
        "per_step": stats["per_step"],
        "data_wait_share": stats["data_wait_share"],
        "profiled_step": profiled_step(stage_dirs.get("trace"), stats["per_step"]["step_ms"]),
        "compute": compute(train, headline),
        "energy": energy(train, stats),
        "host": host_load(train.get("host")),  # warns where other processes loaded the host
        "time_to_train_s": train["seconds"],  # every attempt's (`attempts`)
        "attempts": attempts(train),
        **time_to_target(stage_dirs["train"] / EVAL_LOG),
        "peak_device_memory_bytes": train.get("peak_device_memory_bytes"),
        "device_memory_source": train.get("device_memory_source"),
        "peak_host_rss_bytes": train.get("peak_host_rss_bytes"),
        "reference": published,
        "reference_note": note,
        "definitions": DEFINITIONS,
    }
