"""Fixtures shared by the dataset tests of more than one module."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.imagenet_raw import build_index, build_synthetic


@pytest.fixture(scope="module")
def imagenet_raw(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """(raw folder, generated archives, make_raw facts) of the synthetic ImageNet, made once
    per test module."""
    return build_synthetic(tmp_path_factory)


@pytest.fixture(scope="module")
def imagenet_index(imagenet_raw, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `index` variant of imagenet_raw."""
    return build_index(imagenet_raw[0], tmp_path_factory)
