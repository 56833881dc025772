"""Which targets can exist under a config, checked while Snakemake plans, before any job runs.

A result folder is `results/<workload>/<run>`: a fold `fold<k>` with k < `<workload>.folds`
for workloads that cross-validate (unet2d), else a name in `<workload>.runs`. Data folders are
`data/raw/<dataset>` and `data/prepared/<dataset>/<variant>` of a workload's dataset.
"""

from __future__ import annotations

import re
from typing import Any

from accelpipe.errors import ConfigError

# workload -> (dataset, prepared variant)
WORKLOAD_DATA = {
    "unet2d": ("brats", "2d"),
    "swinunetr": ("nsclc", "nifti"),
    "resnet50": ("imagenet", "index"),
}
_FOLD = re.compile(r"fold(0|[1-9][0-9]*)")


def _known(names: Any) -> str:
    return ", ".join(sorted(names))


def workload_data(workload: str) -> tuple[str, str]:
    """The (dataset, variant) a workload trains on; an unknown workload is refused."""
    if workload not in WORKLOAD_DATA:
        raise ConfigError(f"unknown workload {workload!r} (known: {_known(WORKLOAD_DATA)})")
    return WORKLOAD_DATA[workload]


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
    elif run not in block.get("runs", {}):
        raise ConfigError(
            f"config key '{workload}.runs' has no run {run!r} "
            f"(known: {_known(block.get('runs', {})) or 'none'})"
        )


def check_cross_validation(config: dict[str, Any], workload: str) -> int:
    """`results/<workload>/cv` exists only for a workload with folds; their number."""
    workload_data(workload)
    if "folds" not in config[workload]:
        raise ConfigError(
            f"{workload} has no cross-validation (no config key '{workload}.folds'); "
            f"its runs are named in '{workload}.runs'"
        )
    return config[workload]["folds"]


def datasets() -> set[str]:
    return {dataset for dataset, _ in WORKLOAD_DATA.values()}


def check_dataset(dataset: str) -> None:
    if dataset not in datasets():
        raise ConfigError(f"unknown dataset {dataset!r} (known: {_known(datasets())})")


def variant_owner(dataset: str, variant: str) -> str:
    """The workload whose `prepare` settings define `data/prepared/<dataset>/<variant>`."""
    check_dataset(dataset)
    for workload, data in WORKLOAD_DATA.items():
        if data == (dataset, variant):
            return workload
    variants = {v for d, v in WORKLOAD_DATA.values() if d == dataset}
    raise ConfigError(
        f"dataset {dataset!r} has no prepared variant {variant!r} (known: {_known(variants)})"
    )
