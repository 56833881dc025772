"""A run trained with several seeds, as named runs: `<workload>.seeds` names a run of
`<workload>.runs` and the seeds to train it with; each is the run `<run>-seed<k>` (its own job:
the seeds spread over devices and nodes), that run's settings with `train.seed: k`.
results/<workload>/ttt combines their times to target as MLPerf does (accelpipe.results.ttt).

No framework: Snakemake reads it while planning.
"""

from __future__ import annotations

import re
from typing import Any

from accelpipe.core.errors import ConfigError

_SEED_RUN = re.compile(r"(?P<run>[A-Za-z0-9_-]+)-seed(?P<seed>[0-9]+)(?:/fold0)?")


def seed_run(run: str, seed: int) -> str:
    return f"{run}-seed{seed}"


def split_seed_run(name: str) -> tuple[str, int] | None:
    """`fp32-seed3` (or a cross-validated workload's `default-seed3/fold0`) -> ("fp32", 3);
    None where `name` is no seed run."""
    match = _SEED_RUN.fullmatch(name)
    return None if match is None else (match["run"], int(match["seed"]))


def base_run(block: dict[str, Any], workload: str) -> str:
    """The run the seeds repeat: `seeds.run`, else the first of `<workload>.runs` by name."""
    run = block["seeds"]["run"] or sorted(block["runs"])[0]
    if run not in block["runs"]:
        known = ", ".join(sorted(block["runs"]))
        raise ConfigError(
            f"config key '{workload}.seeds.run': {run!r} is not a run of '{workload}.runs' "
            f"(known: {known})"
        )
    return str(run)


def expand(block: dict[str, Any], workload: str) -> dict[str, tuple[str, int]]:
    """The seed runs: name -> (the run they repeat, the seed), in the order of the seeds."""
    if not block.get("seeds", {}).get("values"):
        return {}
    run = base_run(block, workload)
    return {seed_run(run, seed): (run, seed) for seed in block["seeds"]["values"]}
