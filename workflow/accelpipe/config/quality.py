"""Quality targets: the quality each workload's reference reaches (its
workloads/<name>/published.yaml, `targets`), or the
one a config sets (`<workload>.target`), and whether a run's metrics reach it.

The evaluate stage writes the verdict into metrics.json (`quality_target`), so every run says
whether it reached its target, against which figure, the recipe that figure was measured with,
how it was computed and what it measures, and whether reaching it is `comparable` (a
benchmark's threshold, or a figure of our recipe computed as our metrics.json is) or only
indicative (`differences` says why). No framework: Snakemake may read it while planning.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from accelpipe.config import recipes, registry
from accelpipe.core.errors import ConfigError
from accelpipe.core.io import read_yaml

SCHEMA = Path(__file__).parents[1] / "schemas" / "quality_targets.schema.yaml"
VERDICT_KEY = "quality_target"  # metrics.json's block
# How a published figure was computed (a target's `computed`, its schema's enum).
COMPUTED = {
    "final": "one run's final model",
    "best_epoch": "the best evaluation of one run",
    "fold_mean_of_best_epochs": "each fold's best evaluation, averaged over the folds",
    "best_of_grid": "the best of a grid of runs",
    "median_of_runs": "the median over several runs",
    "threshold": "a benchmark's threshold (a bar, not a measurement)",
    "none": "nothing published",
    "unknown": "computed in a way its source does not say",
}
OURS_COMPUTED = "final"  # metrics.json scores the run's trained model
CONFIGURED = "config"  # the recipe of a target the config sets


@dataclass(frozen=True)
class QualityTarget:
    workload: str
    metric: str  # the metrics.json key, higher is better
    value: float | None  # a fraction 0..1; None: nothing published (`note` says why)
    source: str
    definition: str
    # the release or commit of the recipe the figure was measured with (its published.yaml
    # requires it; a target built in code is the caller's own bar, as the config's is)
    recipe: str = CONFIGURED
    computed: str = "threshold"  # a key of COMPUTED
    computed_note: str | None = None
    note: str | None = None


def _entries(path: Path) -> list[dict[str, Any]]:
    """The `targets` of `path`, checked against their schema (a file that breaks it names
    itself and what is wrong)."""
    data: dict[str, Any] = {"targets": (read_yaml(path) or {}).get("targets")}
    schema = read_yaml(SCHEMA)
    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema).iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise ConfigError(f"{path}: {where or 'top level'}: {error.message}")
    entries: list[dict[str, Any]] = data["targets"]
    return entries


@cache
def load_targets(path: Path | None = None) -> dict[str, QualityTarget]:
    """Every workload's published target, from each workload's published.yaml (`path`: one
    file holding them all instead); a file that breaks its schema, lists a workload twice or
    misses one, names itself and what is wrong."""
    files = [path] if path is not None else [registry.published(n) for n in registry.WORKLOADS]
    targets: dict[str, QualityTarget] = {}
    for file in files:
        for entry in _entries(file):
            workload = registry.workload(entry["workload"])
            if entry["workload"] in targets:
                raise ConfigError(f"{file}: {entry['workload']} is listed twice")
            if entry["metric"] != workload.metric:
                raise ConfigError(
                    f"{file}: {workload.name}'s metric is {workload.metric!r}, "
                    f"not {entry['metric']!r}"
                )
            fields = {f.name for f in dataclasses.fields(QualityTarget)}
            targets[workload.name] = QualityTarget(
                **{k: v for k, v in entry.items() if k in fields}
            )
    missing = sorted(set(registry.WORKLOADS) - set(targets))
    if missing:
        where = path if path is not None else registry.published(missing[0])
        raise ConfigError(f"{where}: no target for {', '.join(missing)}")
    return targets


def target_for(workload: str, configured: float | None) -> QualityTarget:
    """The target a run is judged by: the config's `<workload>.target` where set, else the
    published one."""
    published = load_targets()[registry.workload(workload).name]
    if configured is None:
        return published
    return dataclasses.replace(
        published,
        value=configured,
        source=f"config key '{workload}.target' (published: {published.value}, {published.source})",
        recipe=CONFIGURED,
        computed="threshold",
        computed_note="the config's own bar, not a published figure",
        note=None,
    )


def differences(target: QualityTarget) -> list[str] | None:
    """Why reaching `target` is not like for like with the published figure: another recipe,
    or a figure computed otherwise than one run's final model. [] where it is comparable (a
    benchmark's threshold, or our recipe's final model); None for a target the config sets
    (its own bar) or where nothing is published."""
    if target.recipe == CONFIGURED or target.value is None:
        return None
    if target.computed == "threshold":
        return []
    ours = recipes.recipe_id(target.workload)
    found = []
    if target.recipe != ours:
        found.append(
            f"the target was measured with another recipe ({target.recipe}); this run follows "
            f"{ours}"
        )
    if target.computed != OURS_COMPUTED:
        found.append(
            f"the target is {COMPUTED[target.computed]}; this run's value is "
            f"{COMPUTED[OURS_COMPUTED]}"
        )
    return found


def verdict(metrics: Mapping[str, Any], target: QualityTarget) -> dict[str, Any]:
    """Whether `metrics` reach `target` (value >= target): `reached` true or false, or null with
    the reason where it cannot be decided (no target, or no value of the metric); the target's
    recipe and how it was computed, and whether the verdict is `comparable` with the published
    figure (null for the config's own target), with the `differences` where it is not."""
    value = metrics.get(target.metric)
    reached: bool | None = None
    reason = None
    if target.value is None:
        reason = target.note or "no published target: set the config's target"
    elif value is None or (isinstance(value, float) and math.isnan(value)):
        reason = f"metrics.json has no value of {target.metric}"
    else:
        reached = bool(value >= target.value)
    found = differences(target)
    return {
        "metric": target.metric,
        "value": value,
        "target": target.value,
        "reached": reached,
        "source": target.source,
        "recipe": target.recipe,
        "our_recipe": recipes.recipe_id(target.workload),
        "computed": target.computed,
        "computed_note": target.computed_note,
        "definition": target.definition,
        "comparable": None if found is None else not found,
        "differences": found or [],
        "not_decided": reason,
    }
