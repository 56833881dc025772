"""Where a stage runs: the runtime settings the workflow puts in $ACCELPIPE_RUNTIME, read
back per framework, and refused with one line naming the variable and key."""

from __future__ import annotations

import json

import pytest

from accelpipe.errors import ConfigError
from accelpipe.runtime import RUNTIME_ENV, read_runtime

DOCKER = {
    "runtime": "docker",
    "backend": "cuda",
    "pool": ["0", "1"],
    "image": "localhost/accelpipe/cuda-pytorch:abc",
    "mounts": ["/data"],
    "env": [],
    "docker_host": None,
    "build": {"base_image": None, "offline": False},
}


def test_no_setting_or_no_framework_means_here_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(RUNTIME_ENV, raising=False)
    assert read_runtime("pytorch") == {"runtime": "local", "backend": "cpu"}
    monkeypatch.setenv(RUNTIME_ENV, json.dumps({"pytorch": DOCKER}))
    assert read_runtime(None) == {"runtime": "local", "backend": "cpu"}


def test_each_framework_reads_its_own_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    local = {"runtime": "local", "backend": "cpu", "pool": None}
    monkeypatch.setenv(RUNTIME_ENV, json.dumps({"pytorch": DOCKER, "tensorflow": local}))
    assert read_runtime("pytorch") == DOCKER
    assert read_runtime("tensorflow") == local


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("{", "is not JSON"),
        ("[]", "has no runtime for the pytorch stages"),
        ('{"tensorflow": {}}', "has no runtime for the pytorch stages"),
        ('{"pytorch": {"runtime": "slurm", "backend": "cpu", "pool": null}}', "pytorch.runtime"),
        ('{"pytorch": {"runtime": "docker", "backend": "cpu", "pool": null}}', "'build'"),
    ],
)
def test_a_bad_setting_is_one_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    monkeypatch.setenv(RUNTIME_ENV, value)
    with pytest.raises(ConfigError, match=says) as err:
        read_runtime("pytorch")
    assert str(err.value).startswith(f"${RUNTIME_ENV}")
