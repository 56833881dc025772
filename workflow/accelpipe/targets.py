"""Which targets can exist under a config, checked while Snakemake plans, before any job runs.

A result folder is `results/<workload>/<run>`: a fold `fold<k>` with k < `<workload>.folds`
for workloads that cross-validate (unet2d), else a name in `<workload>.runs`. Data folders are
`data/raw/<dataset>` and `data/prepared/<dataset>/<variant>` of a workload's dataset.
`buildable` lists every target these checks accept (`accelpipe targets`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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


# ------------------------------------------------------------------ what a config can build


@dataclass(frozen=True)
class Target:
    """One target Snakemake accepts under a config (`accelpipe targets` lists them)."""

    path: str
    kind: str  # fold, cv, run, grid_run, grid, benchmark, benchmark_row, raw, prepared, compare
    group: str  # the workload it belongs to, or "all"
    description: str


def _settings(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in overrides.items())


def _run_targets(config: dict[str, Any], workload: str) -> list[Target]:
    """The workload's result folders: its folds and cv, or its named and grid runs."""
    block = config[workload]
    path = f"results/{workload}"
    if "folds" in block:
        folds = check_cross_validation(config, workload)
        return [
            Target(f"{path}/fold{k}", "fold", workload, f"cross-validation fold {k} of {folds}")
            for k in range(folds)
        ] + [Target(f"{path}/cv", "cv", workload, f"the {folds} folds' metrics and their mean")]
    grid_runs = expand_grid(block, workload)
    found = []
    for run in run_names(block, workload):
        check_run(config, workload, run)
        if run in grid_runs:
            values = {f"{s}.{k}": v for s, kv in grid_runs[run].items() for k, v in kv.items()}
            found.append(
                Target(f"{path}/{run}", "grid_run", workload, f"grid run: {_settings(values)}")
            )
        else:
            text = _settings(block["runs"][run]) or f"{workload}.train as configured"
            found.append(Target(f"{path}/{run}", "run", workload, f"run: {text}"))
    return found


def _grid_target(config: dict[str, Any], workload: str) -> list[Target]:
    try:
        runs = check_grid(config, workload)
    except ConfigError:  # no grid: no target
        return []
    metric = registry.workload(workload).metric
    text = f"the {len(runs)} grid runs ranked by {metric}"
    return [Target(f"results/{workload}/grid", "grid", workload, text)]


def _benchmark_targets(config: dict[str, Any], workload: str) -> list[Target]:
    rows = benchmark_rows(config, workload)
    table = Target(
        f"results/{workload}/benchmark",
        "benchmark",
        workload,
        f"train-step throughput table of rows {', '.join(rows)}",
    )
    found = [table]
    for row in rows:
        precision, batch = check_benchmark_row(config, workload, row)
        text = f"one benchmark row: {precision} at global batch {batch}"
        found.append(Target(f"work/{workload}/benchmark/{row}", "benchmark_row", workload, text))
    return found


def _data_targets(config: dict[str, Any], workload: str) -> list[Target]:
    dataset, variant = workload_data(workload)
    root = config["data_root"]
    source = config["datasets"][dataset]["source"]
    return [
        Target(
            f"{root}/raw/{dataset}", "raw", workload, f"the {dataset} dataset (source: {source})"
        ),
        Target(
            f"{root}/prepared/{dataset}/{variant}",
            "prepared",
            workload,
            f"{dataset} prepared as {variant} for {variant_owner(dataset, variant)}",
        ),
    ]


def buildable(config: dict[str, Any], finished_runs: int) -> list[Target]:
    """Every target of a validated config, per workload (its runs, grid, benchmark table and
    rows, then its data), then results/compare; `finished_runs`: how many the page would show
    now (none: Snakemake refuses results/compare until a run is finished)."""
    found: dict[str, Target] = {}  # a dataset two workloads share is listed once
    for workload in registry.WORKLOADS:
        for target in (
            *_run_targets(config, workload),
            *_grid_target(config, workload),
            *_benchmark_targets(config, workload),
            *_data_targets(config, workload),
        ):
            found.setdefault(target.path, target)
    now = (
        f"{finished_runs} finished now" if finished_runs else "none finished yet: make a run first"
    )
    text = f"every finished run on one page ({now})"
    return [*found.values(), Target("results/compare", "compare", "all", text)]
