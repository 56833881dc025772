"""The config slice each stage gets: only the keys it reads, so a change elsewhere in the
config does not re-run it (a rule's params are Snakemake's rerun trigger).

`rules/common.smk` passes these to the CLI as canonical JSON; tests that drive the stages
by their CLI without Snakemake (the TensorFlow 2.15 venv) build the same slices here.
Every function takes the validated config (defaults filled in).
"""

from __future__ import annotations

from typing import Any

from accelpipe import registry, targets
from accelpipe.config import run_model, run_train


def raw(config: dict[str, Any], dataset: str) -> dict[str, Any]:
    targets.check_dataset(dataset)
    return config["datasets"][dataset]


def prepare(config: dict[str, Any], dataset: str, variant: str) -> dict[str, Any]:
    block = config[targets.variant_owner(dataset, variant)]
    slice_ = {"prepare": block.get("prepare", {})}
    if "folds" in block:
        slice_["folds"] = block["folds"]
    return slice_


def workload_settings(config: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    """The workload's config block as one run sees it: `train` and `model` resolved, `runs`
    and `grid` dropped (so a new grid value does not re-run the runs it does not make)."""
    targets.check_run(config, workload, run)
    block = {k: v for k, v in config[workload].items() if k not in ("runs", "grid")}
    resolved = {"train": run_train(config[workload], workload, run)}
    if "model" in block:
        resolved["model"] = run_model(config[workload], workload, run)
    return block | resolved


def train(config: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    block = workload_settings(config, workload, run)
    keys = ("model", "train", "profile", "transforms")
    return {"backend": config["backend"]} | {k: block[k] for k in keys if k in block}


def evaluate(config: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    block = workload_settings(config, workload, run)
    precision = {
        k: block["train"][k] for k in ("precision", "channels_last") if k in block["train"]
    }
    return {"backend": config["backend"], "evaluate": block["evaluate"], "train": precision}


def publish(config: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    dataset = registry.workload(workload).dataset
    return {
        "backend": config["backend"],
        "runtime": config["runtime"],
        "datasets": {dataset: config["datasets"][dataset]},
        workload: workload_settings(config, workload, run),
    }
