"""performance.json of a run: the step statistics, the published figure, compute, energy,
host load and time to target, put together from the run's files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelpipe.core.io import read_json
from accelpipe.core.provenance import STAGE_FILE
from accelpipe.engines.evaluations import EVAL_LOG
from accelpipe.engines.train_log import LOG_FILE
from accelpipe.performance import DEFINITIONS
from accelpipe.performance.compute import compute
from accelpipe.performance.energy import energy
from accelpipe.performance.figures import Figure, reference, run_data
from accelpipe.performance.host_load import host_load
from accelpipe.performance.steps import attempts, profiled_step, stage_throughput, step_statistics
from accelpipe.performance.time_to_target import time_to_target


def run_performance(
    stage_dirs: dict[str, Path], config_slice: dict[str, Any], workload: str, run: str
) -> dict[str, Any]:
    """performance.json of a run, from its train stage's output (train_log.csv, stage.json),
    its trace summary and the publish slice's `performance` settings, `reference_figures`
    and dataset source (real or synthetic data, for the figure's conditions)."""
    train = read_json(stage_dirs["train"] / STAGE_FILE)
    warmup = config_slice["performance"]["warmup_steps"]
    stats = step_statistics(stage_dirs["train"] / LOG_FILE, warmup)
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
