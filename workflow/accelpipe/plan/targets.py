"""Which targets can exist under a config, checked while Snakemake plans, before any job runs.

A result folder is `results/<workload>/<run>`: a name in `<workload>.runs`, a run of
`<workload>.grid` or of `<workload>.seeds`; a workload that cross-validates
(`<workload>.folds`) trains each of them once per fold, `<run>/fold<k>` and their mean
`<run>/cv` (the run named `default`: `fold<k>` and `cv`). Data folders are
`data/raw/<dataset>` and `data/prepared/<dataset>/<variant>` of a workload's dataset.
`buildable` lists every target these checks accept (`accelpipe targets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accelpipe.config import registry
from accelpipe.config.grid import expand as expand_grid
from accelpipe.config.schema import DEFAULT_RUN, fold_run, run_names, split_fold
from accelpipe.config.seeds import expand as expand_seeds
from accelpipe.core.errors import ConfigError


def _known(names: Any) -> str:
    return ", ".join(sorted(names))


def workload_data(workload: str) -> tuple[str, str]:
    """The (dataset, variant) a workload trains on; an unknown workload is refused."""
    entry = registry.workload(workload)
    return entry.dataset, entry.variant


def default_target(config: dict[str, Any]) -> str:
    """The default job's result folder: the first registered workload's run named default
    (its fold 0 where it cross-validates)."""
    name = next(iter(registry.WORKLOADS))
    run = fold_run(DEFAULT_RUN, 0) if "folds" in config[name] else DEFAULT_RUN
    return f"results/{name}/{run}"


def check_run(config: dict[str, Any], workload: str, run: str) -> None:
    """`results/<workload>/<run>` exists under `config`, or one error naming the key."""
    workload_data(workload)
    block = config[workload]
    name = run
    if "folds" in block:
        name = _check_fold(block, workload, run)
    if name not in run_names(block, workload):
        raise ConfigError(
            f"config key '{workload}.runs' has no run {name!r} "
            f"(known: {_known(run_names(block, workload)) or 'none'})"
        )


def _check_fold(block: dict[str, Any], workload: str, run: str) -> str:
    """The named run of a cross-validated workload's fold `run`."""
    folds = block["folds"]
    parts = split_fold(run)
    if parts is None or parts[1] >= folds:
        raise ConfigError(
            f"no run {run!r} of {workload}: config key '{workload}.folds' is {folds}, so each "
            f"run's folds are fold0 ... fold{folds - 1} (and cv): results/{workload}/fold<k> for "
            f"the run named {DEFAULT_RUN}, results/{workload}/<run>/fold<k> for the others"
        )
    if run.startswith(f"{DEFAULT_RUN}/"):
        raise ConfigError(
            f"no run {run!r} of {workload}: the folds of the run named {DEFAULT_RUN} are "
            f"results/{workload}/{fold_run(DEFAULT_RUN, parts[1])}"
        )
    return parts[0]


def check_grid(config: dict[str, Any], workload: str) -> list[str]:
    """`results/<workload>/grid` exists for a workload with a non-empty grid; the runs it
    ranks (a cross-validated workload's: fold 0 of each grid run)."""
    workload_data(workload)
    block = config[workload]
    if not block["grid"]:
        raise ConfigError(
            f"config key '{workload}.grid' is empty: name keys and their values, e.g. "
            f'--config \'{workload}={{"grid":{{"train.lr":[0.01,0.001]}}}}\''
        )
    names = list(expand_grid(block, workload))
    return [fold_run(name, 0) for name in names] if "folds" in block else names


def check_ttt(config: dict[str, Any], workload: str) -> list[str]:
    """`results/<workload>/ttt` exists for a workload with `seeds`; the runs it combines (a
    cross-validated workload's: fold 0 of each seed run)."""
    workload_data(workload)
    block = config[workload]
    if not block["seeds"]["values"]:
        raise ConfigError(
            f"config key '{workload}.seeds.values' is empty: name the seeds (and the run to "
            "repeat, seeds.run), "
            f'e.g. --config \'{workload}={{"seeds":{{"values":[1,2,3,4,5]}}}}\''
        )
    names = list(expand_seeds(block, workload))
    return [fold_run(name, 0) for name in names] if "folds" in block else names


def cross_validation_runs(config: dict[str, Any], workload: str, cv: str) -> list[str]:
    """The fold runs `results/<workload>/<cv>` averages: `cv` is `cv` (the default run's folds)
    or `<run>/cv`, of a workload with folds."""
    workload_data(workload)
    block = config[workload]
    if "folds" not in block:
        raise ConfigError(
            f"{workload} has no cross-validation (no config key '{workload}.folds'); "
            f"its runs are named in '{workload}.runs'"
        )
    name = cv.removesuffix("cv").removesuffix("/") or DEFAULT_RUN
    runs = [fold_run(name, k) for k in range(block["folds"])]
    check_run(config, workload, runs[0])
    return runs


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
    # fold, cv, run, grid_run, seed_run, grid, ttt, benchmark, benchmark_row, raw, prepared,
    # compare
    kind: str
    group: str  # the workload it belongs to, or "all"
    description: str


def _settings(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in overrides.items())


def _run_targets(config: dict[str, Any], workload: str) -> list[Target]:
    """The workload's result folders: its named and grid runs, each as its folds and their
    cv where the workload cross-validates."""
    block = config[workload]
    grid_runs = expand_grid(block, workload)
    seed_runs = expand_seeds(block, workload)
    found = []
    for name in run_names(block, workload):
        if name in grid_runs:
            values = {f"{s}.{k}": v for s, kv in grid_runs[name].items() for k, v in kv.items()}
            kind, text = "grid_run", f"grid run: {_settings(values)}"
        elif name in seed_runs:
            base, seed = seed_runs[name]
            kind, text = "seed_run", f"seed run: {base} with train.seed={seed}"
        else:
            kind = "run"
            text = f"run: {_settings(block['runs'][name]) or f'{workload}.train as configured'}"
        found.extend(_run_folders(config, workload, name, kind, text))
    return found


def _run_folders(
    config: dict[str, Any], workload: str, name: str, kind: str, text: str
) -> list[Target]:
    """A named run's result folder, or its folds and cv."""
    path = f"results/{workload}"
    if "folds" not in config[workload]:
        check_run(config, workload, name)
        return [Target(f"{path}/{name}", kind, workload, text)]
    folds = config[workload]["folds"]
    runs = [fold_run(name, k) for k in range(folds)]
    for run in runs:
        check_run(config, workload, run)
    cv = runs[0].removesuffix("fold0") + "cv"
    return [
        Target(f"{path}/{run}", "fold", workload, f"{text}; fold {k} of {folds}")
        for k, run in enumerate(runs)
    ] + [Target(f"{path}/{cv}", "cv", workload, f"{text}; the {folds} folds and their mean")]


def _grid_target(config: dict[str, Any], workload: str) -> list[Target]:
    try:
        runs = check_grid(config, workload)
    except ConfigError:  # no grid: no target
        return []
    metric = registry.workload(workload).metric
    which = " (fold 0 of each)" if "folds" in config[workload] else ""
    text = f"the {len(runs)} grid runs{which} ranked by {metric}"
    return [Target(f"results/{workload}/grid", "grid", workload, text)]


def _ttt_target(config: dict[str, Any], workload: str) -> list[Target]:
    try:
        runs = check_ttt(config, workload)
    except ConfigError:  # no seeds: no target
        return []
    which = " (fold 0 of each)" if "folds" in config[workload] else ""
    text = f"time to target over {len(runs)} seed runs{which}: olympic mean and spread"
    return [Target(f"results/{workload}/ttt", "ttt", workload, text)]


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
            *_ttt_target(config, workload),
            *_benchmark_targets(config, workload),
            *_data_targets(config, workload),
        ):
            found.setdefault(target.path, target)
    now = (
        f"{finished_runs} finished now" if finished_runs else "none finished yet: make a run first"
    )
    text = f"every finished run on one page ({now})"
    return [*found.values(), Target("results/compare", "compare", "all", text)]
