"""The registry is the one list of workloads and datasets: everything it names exists."""

from __future__ import annotations

import importlib.util

import pytest

from accelpipe import engines
from accelpipe.config.schema import schema
from accelpipe.core import registry
from accelpipe.core.errors import ConfigError
from accelpipe.stages import entry_modules


@pytest.mark.parametrize("name", sorted(registry.WORKLOADS))
def test_each_workload_has_its_modules_config_block_and_engine(name: str) -> None:
    entry = registry.WORKLOADS[name]
    assert importlib.util.find_spec(f"accelpipe.workloads.{name}") is not None
    assert entry.dataset in registry.DATASETS
    assert entry.framework in registry.FRAMEWORKS
    props = schema()["properties"]
    assert name in props and entry.dataset in props["datasets"]["properties"]
    engine = engines.for_workload(name)
    assert engine.framework == entry.framework
    assert importlib.util.find_spec(engine.module) is not None
    # the train stage's code inputs include the engine it calls by name
    assert engine.module in entry_modules("train", name)


@pytest.mark.parametrize("name", sorted(registry.WORKLOADS))
def test_each_workload_names_its_metric_and_has_runs_and_a_grid(name: str) -> None:
    entry = registry.WORKLOADS[name]
    assert entry.metric  # a metrics.json key: results/compare reads it for every run
    assert {"runs", "grid"} <= set(schema()["properties"][name]["properties"])


@pytest.mark.parametrize("name", sorted(registry.DATASETS))
def test_each_dataset_has_its_module_and_a_workload(name: str) -> None:
    assert importlib.util.find_spec(f"accelpipe.datasets.{name}") is not None
    assert registry.DATASETS[name].framework in registry.FRAMEWORKS
    assert any(w.dataset == name for w in registry.WORKLOADS.values())


def test_unknown_names_are_refused_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown workload 'ssd3'.*unet2d"):
        registry.workload("ssd3")
    with pytest.raises(ConfigError, match=r"unknown dataset 'mnist'.*brats"):
        registry.dataset("mnist")
    with pytest.raises(ConfigError, match=r"no prepared variant '3d'.*\(known: 2d\)"):
        registry.variant_owner("brats", "3d")
    assert registry.variant_owner("imagenet", "index").name == "resnet50"
