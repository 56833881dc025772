"""Quality targets: the quality each workload's reference reaches (quality_targets.yaml), or the
one a config sets (`<workload>.target`), and whether a run's metrics reach it.

The evaluate stage writes the verdict into metrics.json (`quality_target`), so every run says
whether it reached its target, against which figure and what that figure measures. No framework:
Snakemake may read it while planning.
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
import yaml

from accelpipe import registry
from accelpipe.errors import ConfigError

QUALITY_TARGETS = Path(__file__).with_name("quality_targets.yaml")
SCHEMA = Path(__file__).parent / "schemas" / "quality_targets.schema.yaml"
VERDICT_KEY = "quality_target"  # metrics.json's block


@dataclass(frozen=True)
class QualityTarget:
    workload: str
    metric: str  # the metrics.json key, higher is better
    value: float | None  # a fraction 0..1; None: nothing published (`note` says why)
    source: str
    definition: str
    note: str | None = None


@cache
def load_targets(path: Path = QUALITY_TARGETS) -> dict[str, QualityTarget]:
    """Every workload's published target; a file that breaks its schema, or that misses a
    workload, names itself and what is wrong."""
    data = yaml.safe_load(path.read_text())
    schema = yaml.safe_load(SCHEMA.read_text())
    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema).iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise ConfigError(f"{path}: {where or 'top level'}: {error.message}")
    targets: dict[str, QualityTarget] = {}
    for entry in data["targets"]:
        workload = registry.workload(entry["workload"])
        if entry["workload"] in targets:
            raise ConfigError(f"{path}: {entry['workload']} is listed twice")
        if entry["metric"] != workload.metric:
            raise ConfigError(
                f"{path}: {workload.name}'s metric is {workload.metric!r}, not {entry['metric']!r}"
            )
        fields = {f.name for f in dataclasses.fields(QualityTarget)}
        targets[workload.name] = QualityTarget(**{k: v for k, v in entry.items() if k in fields})
    missing = sorted(set(registry.WORKLOADS) - set(targets))
    if missing:
        raise ConfigError(f"{path}: no target for {', '.join(missing)}")
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
        note=None,
    )


def verdict(metrics: Mapping[str, Any], target: QualityTarget) -> dict[str, Any]:
    """Whether `metrics` reach `target` (value >= target): `reached` true or false, or null with
    the reason where it cannot be decided (no target, or no value of the metric)."""
    value = metrics.get(target.metric)
    reached: bool | None = None
    reason = None
    if target.value is None:
        reason = target.note or "no published target: set the config's target"
    elif value is None or (isinstance(value, float) and math.isnan(value)):
        reason = f"metrics.json has no value of {target.metric}"
    else:
        reached = bool(value >= target.value)
    return {
        "metric": target.metric,
        "value": value,
        "target": target.value,
        "reached": reached,
        "source": target.source,
        "definition": target.definition,
        "not_decided": reason,
    }
