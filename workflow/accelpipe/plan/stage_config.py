"""The config slice each stage gets: only the keys it reads, so a change elsewhere in the
config does not re-run it (a rule's params are Snakemake's rerun trigger).

`rules/common.smk` passes these to the CLI as canonical JSON; tests that drive the stages
by their CLI without Snakemake (the TensorFlow 2.15 venv) build the same slices here. The
CLI checks each against its schema (config.schema.slice_schema: the same sections).
Every function takes the validated config (defaults filled in).
"""

from __future__ import annotations

from typing import Any

from accelpipe.config import registry
from accelpipe.config.schema import (
    EVAL_IN_TRAINING_SECTIONS,
    EVAL_OUTSIDE_TRAIN_KEY,
    NOT_RUN_SETTINGS,
    TRAIN_SECTIONS,
    run_model,
    run_train,
)
from accelpipe.core import provenance
from accelpipe.core.errors import AccelpipeError
from accelpipe.core.redact import redact_data
from accelpipe.performance.figures import figures_for
from accelpipe.plan import targets


def raw(config: dict[str, Any], dataset: str) -> dict[str, Any]:
    targets.check_dataset(dataset)
    return active_source(config["datasets"][dataset])


def active_source(block: dict[str, Any]) -> dict[str, Any]:
    """A dataset block with only the source it uses: `source` and that source's settings
    block (none for `path:`), so editing a source that is not used re-runs nothing. A block
    holds `source`, `synthetic` and one block of its official source's settings."""
    source = block["source"]
    if source.startswith("path:"):
        return {"source": source}
    if source == "synthetic":
        name = "synthetic"
    else:
        (name,) = (key for key in block if key not in ("source", "synthetic"))
    return {"source": source, name: block[name]}


def prepare(config: dict[str, Any], dataset: str, variant: str) -> dict[str, Any]:
    block = config[targets.variant_owner(dataset, variant)]
    slice_ = {"prepare": block.get("prepare", {})}
    if "folds" in block:
        slice_["folds"] = block["folds"]
    return slice_


def workload_settings(config: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    """The workload's config block as one run sees it: `train` and `model` resolved, `runs`
    `grid` and `benchmark` dropped (so a new grid value or benchmark row does not re-run the
    runs it does not make)."""
    targets.check_run(config, workload, run)
    block = {k: v for k, v in config[workload].items() if k not in NOT_RUN_SETTINGS}
    resolved = {"train": run_train(config[workload], workload, run)}
    if "model" in block:
        resolved["model"] = run_model(config[workload], workload, run)
    return block | resolved


def train(config: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    """A run's train slice; the evaluate settings and the target only where it evaluates
    inside training (so that without, they do not re-run training), and even there not
    those that cannot change what training makes (`eval_settings` carries them)."""
    block = workload_settings(config, workload, run)
    sections = TRAIN_SECTIONS + (
        EVAL_IN_TRAINING_SECTIONS if block["train"].get("eval_every") else ()
    )
    slice_ = {"backend": config["backend"]} | {k: block[k] for k in sections if k in block}
    if "evaluate" in slice_:
        slice_["evaluate"] = {
            k: v for k, v in slice_["evaluate"].items() if k not in EVAL_OUTSIDE_TRAIN_KEY
        }
    return slice_


def eval_settings(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per workload, the evaluate settings a train slice leaves out (config.
    EVAL_OUTSIDE_TRAIN_KEY): what $ACCELPIPE_EVAL_SETTINGS hands every train job."""
    return {
        workload: {
            k: v
            for k, v in config[workload].get("evaluate", {}).items()
            if k in EVAL_OUTSIDE_TRAIN_KEY
        }
        for workload in registry.WORKLOADS
    }


def evaluate(config: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    block = workload_settings(config, workload, run)
    precision = {
        k: block["train"][k] for k in ("precision", "channels_last") if k in block["train"]
    }
    return {
        "backend": config["backend"],
        "evaluate": block["evaluate"],
        "train": precision,
        "target": block["target"],  # metrics.json says whether the run reached it
    }


def publish(config: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    dataset = registry.workload(workload).dataset
    return {
        "backend": config["backend"],
        "runtime": config["runtime"],
        # provenance.json shows it: credentials in a URL stay out (publish never fetches)
        "datasets": {dataset: redact_data(active_source(config["datasets"][dataset]))},
        "performance": config["performance"],  # performance.json's warm-up steps
        # The published figures performance.json compares with: a changed one re-runs publish.
        "reference_figures": figures_for(workload),
        workload: workload_settings(config, workload, run),
        "config_hash": run_config_hash(config, workload, run),  # provenance.json records it
    }


def run_slices(config: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    """The slices a run's result depends on: the keys of its raw, prepare, train and evaluate
    stages (not publish's: where it ran, the published figures it is set against)."""
    dataset, variant = targets.workload_data(workload)
    return {
        "raw": raw(config, dataset),
        "prepare": prepare(config, dataset, variant),
        "train": train(config, workload, run),
        "evaluate": evaluate(config, workload, run),
    }


def run_config_hash(config: dict[str, Any], workload: str, run: str) -> str:
    """The hash of the run's config (provenance.config_hash of `run_slices`): a run whose
    recorded hash differs from it is stale under `config`."""
    return provenance.config_hash(run_slices(config, workload, run))


def current_hashes(config: dict[str, Any], runs: list[tuple[str, str]]) -> dict[str, str | None]:
    """`<workload>/<run>` -> its hash under `config` for each (workload, run); None for a run
    `config` cannot make (a run since removed from it)."""
    hashes: dict[str, str | None] = {}
    for workload, run in runs:
        try:
            hashes[f"{workload}/{run}"] = run_config_hash(config, workload, run)
        except AccelpipeError:
            hashes[f"{workload}/{run}"] = None
    return hashes


def benchmark_row(config: dict[str, Any], workload: str, row: str) -> dict[str, Any]:
    """A benchmark row's train slice: `<workload>.train` at the row's precision and global
    batch, one epoch of warm-up + measured steps, every step logged, no profiler (its steps
    would not be steady state)."""
    precision, batch = targets.check_benchmark_row(config, workload, row)
    block = config[workload]
    bench = block["benchmark"]
    train_settings = block["train"] | {
        "precision": precision,
        "batch_size": batch,
        "epochs": 1,
        "steps_per_epoch": bench["warmup_steps"] + bench["steps"],
        "log_every": 1,
    }
    if "eval_every" in train_settings:  # a row measures training alone
        train_settings["eval_every"] = 0
    profile = block.get("profile", {}) | {"enabled": False}
    keys = ("model", "transforms")
    return (
        {"backend": config["backend"]}
        | {k: block[k] for k in keys if k in block}
        | {"train": train_settings, "profile": profile}
    )


def benchmark(config: dict[str, Any], workload: str) -> dict[str, Any]:
    """What the benchmark table needs besides its rows: the steps it leaves out."""
    targets.benchmark_rows(config, workload)
    return {"warmup_steps": config[workload]["benchmark"]["warmup_steps"]}


def diff(config: dict[str, Any]) -> dict[str, Any]:
    """The diff of two runs: its thresholds, confidence and resamples."""
    return {"diff": config["diff"]}
