"""The registry is the one list of workloads and datasets: everything it names exists, and
each workload's facts come from its own folder."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from accelpipe import engines
from accelpipe.config import registry, views
from accelpipe.config.schema import schema
from accelpipe.core.errors import ConfigError
from accelpipe.stages import entry_modules


@pytest.mark.parametrize("name", sorted(registry.WORKLOADS))
def test_each_workload_has_its_modules_config_block_and_engine(name: str) -> None:
    entry = registry.WORKLOADS[name]
    assert importlib.util.find_spec(f"accelpipe.workloads.{name}.workload") is not None
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


@pytest.mark.parametrize("name", sorted(registry.WORKLOADS))
def test_each_workload_is_declared_in_its_own_folder(name: str) -> None:
    """Its declaration, framework module and data files sit in workloads/<name>/, and the
    central tables are derived from them."""
    folder = registry.folder(name)
    assert folder.name == name
    for part in ("__init__.py", "declaration.py", "workload.py", "schema.yaml", "recipe.yaml"):
        assert (folder / part).is_file(), part
    assert registry.published(name).is_file()
    module = importlib.import_module(f"accelpipe.workloads.{name}.declaration")
    assert module.WORKLOAD is registry.WORKLOADS[name]
    entry = registry.WORKLOADS[name]
    assert views.TRAIN_VIEWS[name] is entry.train
    assert (views.MODEL_VIEWS[name], views.EVALUATE_VIEWS[name]) == (entry.model, entry.evaluate)


def test_the_folders_hold_only_registered_workloads() -> None:
    """A folder under workloads/ is a registered workload (a forgotten registry entry, or a
    stale folder, fails here)."""
    folders = {p.name for p in registry.WORKLOADS_DIR.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(registry.WORKLOADS)


def test_the_declarations_load_no_framework() -> None:
    """Snakemake imports the registry, so every declaration, to plan: none may load a
    framework (or the workload's framework module)."""
    heavy = ("torch", "tensorflow", "keras", "tf_keras", "monai")
    probe = (
        "import sys; import accelpipe.config.registry, accelpipe.config.views, "
        "accelpipe.plan.stage_config, accelpipe.plan.targets, accelpipe.stages.examples; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r} "
        "or m.endswith('.workload')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"
