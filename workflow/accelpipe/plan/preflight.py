"""The preflight: `accelpipe doctor` once per backend and image, before the first train job.

rules/preflight.smk runs it into `work/preflight/<name>.json`; on cuda, rocm and gaudi every
train job (benchmark rows too) and the publishing of its run depend on the file of its image,
so a failing check stops the workflow before anything long starts, and the run's provenance
keeps what the check saw. `<name>` is the image's own (`cuda-pytorch-<tag>`, the tag hashing its
Dockerfile and code) under a container runtime, `<backend>-<framework>` where the stages run in
this environment. The host is in the file, not in its name: a name per host would change the
train jobs' inputs, and with them re-run every trained run, whenever Snakemake starts from
another login node. A new image (a new tag) is checked again; a re-check of the same one is
`accelpipe doctor` by hand.

What the train jobs ask of the host (`needs`) is read from the config: the most devices one
train job of the framework asks per node, the most processes one job runs, and bf16 if any of
them trains in it. It travels to the job in its resources, not its params, so a new device
count re-runs the trains it changes and never the preflight (whose re-run would re-run every
train of the image). Plan-time and framework-free: Snakemake imports it.

Its other half, plan.capacity, is what the jobs need of memory and disk: the data stages and
train check it before they start, and the rules ask Slurm for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from accelpipe.config import registry
from accelpipe.config.schema import run_names, run_train
from accelpipe.core import containers
from accelpipe.devices import workload_precision
from accelpipe.plan import stage_config, targets

DIRECTORY = "work/preflight"


def name(backend: str, framework: str, image: str | None = None) -> str:
    """The preflight's name: the image's (its slug) or, without one, backend and framework."""
    return containers.image_slug(image) if image else f"{backend}-{framework}"


def path(backend: str, framework: str, image: str | None = None) -> str:
    return f"{DIRECTORY}/{name(backend, framework, image)}.json"


def _train_settings(config: dict[str, Any], framework: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload, train settings) of every run and benchmark row of the framework's workloads."""
    for workload in registry.WORKLOADS.values():
        if workload.framework != framework:
            continue
        block = config[workload.name]
        for run in run_names(block, workload.name):  # a fold trains its named run's settings
            yield workload.name, run_train(block, workload.name, run)
        for row in targets.benchmark_rows(config, workload.name):
            yield workload.name, stage_config.benchmark_row(config, workload.name, row)["train"]


def precisions(config: dict[str, Any], framework: str) -> dict[str, set[str]]:
    """Per workload of the framework, the precisions its runs and benchmark rows train in,
    "auto" resolved as their trainer resolves it (devices.workload_precision)."""
    found: dict[str, set[str]] = {}
    for workload, s in _train_settings(config, framework):
        precision = workload_precision(config["backend"], s.get("precision", "auto"), workload)
        found.setdefault(workload, set()).add(precision)
    return found


def needs(config: dict[str, Any], framework: str) -> dict[str, Any]:
    """What the framework's train jobs ask of a host: `devices` (per node), `world_size`
    (processes of the biggest job) and `precision` (bf16 if any run trains in it)."""
    settings = [s for _, s in _train_settings(config, framework)] or [{"devices": 1, "nodes": 1}]
    trained = set().union(*precisions(config, framework).values()) or {"fp32"}
    return {
        "devices": max(s.get("devices", 1) for s in settings),
        "world_size": max(s.get("devices", 1) * s.get("nodes", 1) for s in settings),
        "precision": "bf16" if "bf16" in trained else sorted(trained)[0],
    }
