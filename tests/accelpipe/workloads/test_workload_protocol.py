"""Every registered workload module is a `workloads.Workload`, with the protocol's signatures."""

from __future__ import annotations

import inspect

import pytest

from accelpipe.config import registry
from accelpipe.workloads import base as workloads


def _parameters(function: object) -> list[str]:
    return [p for p in inspect.signature(function).parameters if p != "self"]  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(registry.WORKLOADS))
def test_each_workload_module_is_a_workload(name: str) -> None:
    module = workloads.get(name)
    assert isinstance(module, workloads.Workload)
    for method in ("train", "evaluate"):
        expected = _parameters(getattr(workloads.Workload, method))
        assert _parameters(getattr(module, method)) == expected, f"{name}.{method}"


def test_a_workload_without_pretrained_weights_refuses_a_weights_folder(tmp_path) -> None:
    from accelpipe.core.errors import ConfigError

    workloads.no_starting_weights("unet2d", None)  # the rules never pass one
    with pytest.raises(ConfigError, match="unet2d starts from random init: it takes no --weights"):
        workloads.get("unet2d").train(tmp_path, "fold0", {}, tmp_path, tmp_path / "weights")
