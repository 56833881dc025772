"""Fixtures for the end-to-end workflow tests."""

from __future__ import annotations

import pytest

from tests.workflow.project import Project, make_project


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A workflow copy with results/unet2d/fold0 already built."""
    proj = make_project(tmp_path_factory.mktemp("workflow"))
    proj.snakemake("results/unet2d/fold0")
    return proj
