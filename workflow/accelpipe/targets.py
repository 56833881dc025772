"""Which targets can exist under a config, checked while Snakemake plans, before any job runs.

A result folder is `results/<workload>/<run>`: a fold `fold<k>` with k < `<workload>.folds`
for workloads that cross-validate (unet2d), else a name in `<workload>.runs`. Data folders are
`data/raw/<dataset>` and `data/prepared/<dataset>/<variant>` of a workload's dataset.
"""

from __future__ import annotations

import re
from typing import Any

from accelpipe import registry
from accelpipe.config import run_names
from accelpipe.errors import ConfigError
from accelpipe.grid import expand as expand_grid

_FOLD = re.compile(r"fold(0|[1-9][0-9]*)")


def _known(names: Any) -> str:
    return ", ".join(sorted(names))


def workload_data(workload: str) -> tuple[str, str]:
    """The (dataset, variant) a workload trains on; an unknown workload is refused."""
    entry = registry.workload(workload)
    return entry.dataset, entry.variant


def check_run(config: dict[str, Any], workload: str, run: str) -> None:
    """`results/<workload>/<run>` exists under `config`, or one error naming the key."""
    workload_data(workload)
    block = config[workload]
    if "folds" in block:
        folds = block["folds"]
        match = _FOLD.fullmatch(run)
        if match is None or int(match[1]) >= folds:
            raise ConfigError(
                f"no run {run!r} of {workload}: config key '{workload}.folds' is {folds}, "
                f"so its runs are fold0 ... fold{folds - 1} (and cv)"
            )
    elif run not in run_names(block, workload):
        raise ConfigError(
            f"config key '{workload}.runs' has no run {run!r} "
            f"(known: {_known(run_names(block, workload)) or 'none'})"
        )


def check_grid(config: dict[str, Any], workload: str) -> list[str]:
    """`results/<workload>/grid` exists for a workload with a non-empty grid; its runs."""
    entry = registry.workload(workload)
    block = config[workload]
    if not entry.grid or "grid" not in block:
        with_grid = [w.name for w in registry.WORKLOADS.values() if w.grid]
        raise ConfigError(f"{workload} has no grid (workloads with one: {_known(with_grid)})")
    if not block["grid"]:
        raise ConfigError(f"config key '{workload}.grid' is empty: name keys and their values")
    return list(expand_grid(block, workload))


def check_cross_validation(config: dict[str, Any], workload: str) -> int:
    """`results/<workload>/cv` exists only for a workload with folds; their number."""
    workload_data(workload)
    if "folds" not in config[workload]:
        raise ConfigError(
            f"{workload} has no cross-validation (no config key '{workload}.folds'); "
            f"its runs are named in '{workload}.runs'"
        )
    return config[workload]["folds"]


def benchmark_rows(config: dict[str, Any], workload: str) -> list[str]:
    """The rows of `results/<workload>/benchmark`: `<precision>-b<global batch>` for every
    batch size x precision of `<workload>.benchmark` (batch sizes default to train.batch_size)."""
    workload_data(workload)
    block = config[workload]
    bench = block["benchmark"]
    batches = bench["batch_sizes"] or [block["train"]["batch_size"]]
    return [f"{precision}-b{batch}" for precision in bench["precisions"] for batch in batches]


def check_benchmark_row(config: dict[str, Any], workload: str, row: str) -> tuple[str, int]:
    """(precision, global batch) of a row the config has, or one error naming the key."""
    rows = benchmark_rows(config, workload)
    if row not in rows:
        raise ConfigError(
            f"no benchmark row {row!r} of {workload}: config keys "
            f"'{workload}.benchmark.precisions' and '{workload}.benchmark.batch_sizes' "
            f"make {_known(rows)}"
        )
    precision, batch = row.rsplit("-b", 1)
    return precision, int(batch)


def benchmark_run(config: dict[str, Any], workload: str) -> str:
    """The run name a benchmark row trains as: fold0's split for workloads with folds."""
    return "fold0" if "folds" in config[workload] else "benchmark"


def check_dataset(dataset: str) -> None:
    registry.dataset(dataset)


def variant_owner(dataset: str, variant: str) -> str:
    """The workload whose `prepare` settings define `data/prepared/<dataset>/<variant>`."""
    return registry.variant_owner(dataset, variant).name
