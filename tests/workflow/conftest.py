"""Fixtures for the end-to-end workflow tests."""

from __future__ import annotations

import pytest

from tests.workflow.project import Project, built_project


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """This module's own workflow copy with results/unet2d/fold0 already built."""
    return built_project(tmp_path_factory, ("results/unet2d/fold0",))
