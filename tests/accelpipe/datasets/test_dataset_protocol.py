"""Every registered dataset module is a `datasets.Dataset`, with the protocol's signature."""

from __future__ import annotations

import inspect

import pytest

from accelpipe import datasets
from accelpipe.config import registry
from accelpipe.datasets.sources import RawSources


@pytest.mark.parametrize("name", sorted(registry.DATASETS))
def test_each_dataset_module_is_a_dataset(name: str) -> None:
    module = datasets.get(name)
    assert isinstance(module, datasets.Dataset)
    assert isinstance(module.SOURCES, RawSources) and module.SOURCES.dataset == name
    expected = [p for p in inspect.signature(datasets.Dataset.prepare_variant).parameters][1:]
    assert list(inspect.signature(module.prepare_variant).parameters) == expected
