"""The supported framework ranges: declared once in pyproject's extras, enforced at stage start."""

from __future__ import annotations

import pytest
import tomllib
from packaging.requirements import Requirement

from accelpipe.core.errors import BackendUnavailableError
from accelpipe.devices import frameworks
from tests.workflow.project import REPO


def _pyproject_range(extra: str, dist: str) -> str:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for line in extras["optional-dependencies"][extra]:
        requirement = Requirement(line)
        if requirement.name == dist:
            return str(requirement.specifier)
    raise AssertionError(f"pyproject's [{extra}] extra has no {dist}")


@pytest.mark.parametrize(("framework", "extra", "dist"), [
    ("pytorch", "torch", "torch"), ("tensorflow", "tensorflow", "tensorflow"),
])  # fmt: skip
def test_the_range_is_the_one_pyproject_declares(framework: str, extra: str, dist: str) -> None:
    # The installed metadata is what images carry; it must not lag the source of truth.
    assert str(frameworks.supported_range(framework)) == _pyproject_range(extra, dist)


@pytest.mark.parametrize("version", [
    "2.6.0", "2.6.0+cu124", "2.6.0+rocm6.4", "2.6.0a0+ecf3bae40a", "2.11.0+cu128", "2.13.0",
])  # fmt: skip
def test_vendor_builds_in_range_pass_whatever_their_tags(version: str) -> None:
    assert frameworks.unsupported("pytorch", version) is None
    frameworks.check_supported("pytorch", version)


@pytest.mark.parametrize(("framework", "version"), [
    ("pytorch", "2.5.1+cu121"), ("pytorch", "2.14.0"), ("tensorflow", "2.14.1"),
    ("tensorflow", "2.22.0"),
])  # fmt: skip
def test_a_release_out_of_range_is_one_line_naming_the_environment(
    framework: str, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACCELPIPE_IMAGE", raising=False)
    with pytest.raises(BackendUnavailableError) as caught:
        frameworks.check_supported(framework, version)
    message = str(caught.value)
    assert "\n" not in message and version in message and "environment " in message
    assert str(frameworks.supported_range(framework)) in message


def test_inside_a_container_the_error_names_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELPIPE_IMAGE", "localhost/accelpipe/rocm-pytorch:0123abcd")
    with pytest.raises(BackendUnavailableError, match=r"torch 2\.4\.1 in image localhost/"):
        frameworks.check_supported("pytorch", "2.4.1")


def test_a_version_that_is_no_version_is_named() -> None:
    with pytest.raises(BackendUnavailableError, match="'unknown'"):
        frameworks.check_supported("tensorflow", "unknown")
