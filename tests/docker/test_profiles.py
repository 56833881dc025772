"""The Apptainer Snakemake profiles: one per accelerator backend.

Each profile must run rules under Apptainer with its vendor's device flag and a clean
environment, and set the workflow config's runtime and backend. The checks read the YAML
and, where Snakemake is installed, also let Snakemake's own argument parser read the profile.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"
PROFILE_FILE = "config.v8+.yaml"
SCHEMA = REPO / "workflow" / "accelpipe" / "schemas" / "config.schema.yaml"
VENDOR_FLAGS = {"cuda": "--nv", "rocm": "--rocm", "gaudi": "--intel-hpu"}
VISIBILITY_VAR = re.compile(r"(CUDA|NVIDIA|HIP|ROCR)_VISIBLE_DEVICES|HABANA_VISIBLE_\w+")

per_backend = pytest.mark.parametrize("backend", sorted(VENDOR_FLAGS))


def profile_path(backend: str) -> Path:
    return PROFILES / f"apptainer-{backend}" / PROFILE_FILE


def load_profile(backend: str) -> dict[str, Any]:
    data = yaml.safe_load(profile_path(backend).read_text())
    assert isinstance(data, dict), "a profile is a mapping of option names to values"
    return data


def config_pairs(value: Any) -> dict[str, str]:
    """A profile's `config:` as a dict: Snakemake takes a mapping or KEY=VALUE strings."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    items = [value] if isinstance(value, str) else list(value or [])
    return dict(str(item).split("=", 1) for item in items)


def as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def test_every_apptainer_profile_is_covered() -> None:
    found = {p.name for p in PROFILES.glob("apptainer-*") if p.is_dir()}
    assert found == {f"apptainer-{b}" for b in VENDOR_FLAGS}


@per_backend
def test_profile_uses_apptainer(backend: str) -> None:
    profile = load_profile(backend)
    assert as_list(profile.get("software-deployment-method")) == ["apptainer"]


@per_backend
def test_profile_passes_its_vendor_flag_and_a_clean_environment(backend: str) -> None:
    args = shlex.split(load_profile(backend)["apptainer-args"])
    assert VENDOR_FLAGS[backend] in args and "--cleanenv" in args
    others = set(VENDOR_FLAGS.values()) - {VENDOR_FLAGS[backend]}
    assert not others & set(args), "another vendor's device flag"
    assert not VISIBILITY_VAR.search(" ".join(args)), "device visibility is the runtime's job"


@per_backend
def test_profile_sets_runtime_and_backend(backend: str) -> None:
    config = config_pairs(load_profile(backend).get("config"))
    assert config == {"runtime": "apptainer", "backend": backend}


@per_backend
def test_profile_config_values_are_in_the_schema(backend: str) -> None:
    properties = yaml.safe_load(SCHEMA.read_text())["properties"]
    assert "apptainer" in properties["runtime"]["enum"]
    assert backend in properties["backend"]["enum"]


@per_backend
def test_snakemake_reads_the_profile(backend: str) -> None:
    cli = pytest.importorskip("snakemake.cli")
    args = cli.get_argument_parser(profiles=[str(profile_path(backend).parent)]).parse_args([])
    assert [m.name for m in args.software_deployment_method] == ["APPTAINER"]
    assert VENDOR_FLAGS[backend] in shlex.split(args.apptainer_args)
    assert config_pairs(args.config) == {"runtime": "apptainer", "backend": backend}
