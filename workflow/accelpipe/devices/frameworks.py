"""The framework versions accelpipe supports, declared once: pyproject's extras.

`torch` and `tensorflow` extras carry each framework's range (from the oldest vendor image's
release to the newest one CI pins). The device layer checks the imported framework against
it before a stage touches a device, so an image or environment outside the tested range is
one line naming it, not a stack trace an hour into a run. Framework-free: the framework's
device module passes its own version in.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from accelpipe.core.errors import BackendUnavailableError

# framework -> (pyproject extra, the distribution whose range that extra declares)
DECLARED = {"pytorch": ("torch", "torch"), "tensorflow": ("tensorflow", "tensorflow")}


def supported_range(framework: str) -> SpecifierSet:
    """The version range accelpipe's metadata declares for `framework`'s distribution."""
    extra, dist = DECLARED[framework]
    try:
        requires = importlib.metadata.requires("accelpipe") or []
    except importlib.metadata.PackageNotFoundError:
        raise BackendUnavailableError(
            f"accelpipe is not installed in the environment of {sys.executable} "
            "(pip install it): its supported framework versions come from its metadata"
        ) from None
    for line in requires:
        requirement = Requirement(line)
        marker = requirement.marker
        if requirement.name == dist and marker is not None and marker.evaluate({"extra": extra}):
            return requirement.specifier
    raise BackendUnavailableError(
        f"accelpipe's metadata declares no {dist} range in its [{extra}] extra (reinstall it)"
    )


def where_running() -> str:
    """The image a stage runs in (set by the container layer), else this environment."""
    image = os.environ.get("ACCELPIPE_IMAGE")
    return f"image {image}" if image else f"environment {sys.prefix}"


def unsupported(framework: str, version: str) -> str | None:
    """Why `version` is refused (one line naming the image or environment), or None. Vendor
    builds carry pre-release and local tags (NGC's 2.6.0a0+ecf3bae, ROCm's 2.6.0+rocm6.4):
    the release they build is what the range is about."""
    _, dist = DECLARED[framework]
    specifier = supported_range(framework)
    try:
        release = Version(Version(version).base_version)
    except InvalidVersion:
        return f"{dist} reports version {version!r} in {where_running()}, which is not a version"
    if release in specifier:
        return None
    return (
        f"{dist} {version} in {where_running()} is outside the versions accelpipe supports "
        f"({dist}{specifier}); use an image or environment with a {dist} in range"
    )


def check_supported(framework: str, version: str) -> None:
    """Refuse a framework release outside the declared range, before a stage touches a device."""
    reason = unsupported(framework, version)
    if reason is not None:
        raise BackendUnavailableError(reason)
