"""Integration tests need a Docker Engine API (Docker, or Podman's `podman system service`).

Without one they skip, saying why, unless ACCELPIPE_REQUIRE_CONTAINERS=1 (CI sets it):
then a missing engine fails instead of hiding the tests.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from accelpipe.core import containers
from accelpipe.core.errors import AccelpipeError

REPO = Path(__file__).resolve().parents[2]
# The base for the cpu image (scripts/debian-base-image.sh makes it) and offline builds
# from docker/wheelhouse (make wheelhouse): what works without registry access.
BASE_IMAGE = os.environ.get("ACCELPIPE_BASE_IMAGE", "localhost/accelpipe-base:bookworm-py311")


def _unavailable(reason: str) -> None:
    if os.environ.get("ACCELPIPE_REQUIRE_CONTAINERS") == "1":
        pytest.fail(f"ACCELPIPE_REQUIRE_CONTAINERS=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine():
    try:
        client = containers.client()
    except AccelpipeError as err:
        _unavailable(str(err))
    try:
        client.images.get(BASE_IMAGE)
    except Exception:  # any lookup failure means the same: no base image
        _unavailable(f"base image {BASE_IMAGE} missing (scripts/debian-base-image.sh makes it)")
    if not any((REPO / "docker/wheelhouse").glob("torch-*.whl")):
        _unavailable("docker/wheelhouse has no torch wheel (make wheelhouse)")
    return client


def copy_wheelhouse(root: Path) -> None:
    """The project copy builds its image offline from the checkout's wheelhouse."""
    shutil.copytree(REPO / "docker/wheelhouse", root / "docker/wheelhouse", dirs_exist_ok=True)
