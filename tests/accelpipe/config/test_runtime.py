"""Where a stage runs: the runtime settings the workflow puts in $ACCELPIPE_RUNTIME, read
back per framework, and refused with one line naming the variable and key."""

from __future__ import annotations

import json

import pytest

from accelpipe.config.runtime import (
    EVAL_SETTINGS_ENV,
    RUNTIME_ENV,
    read_runtime,
    with_eval_settings,
)
from accelpipe.core.errors import ConfigError

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


TRAIN_SLICE = {"train": {"eval_every": 1}, "evaluate": {"overlap": 0.5, "sw_batch_size": 4}}


def test_a_train_job_gets_the_evaluate_settings_outside_its_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(EVAL_SETTINGS_ENV, json.dumps({"swinunetr": {"sw_batch_size": 2}}))
    cfg = with_eval_settings(TRAIN_SLICE, "swinunetr")
    assert cfg["evaluate"] == {"overlap": 0.5, "sw_batch_size": 2}
    no_evaluation = {"train": {"eval_every": 0}}
    assert with_eval_settings(no_evaluation, "swinunetr") == no_evaluation
    monkeypatch.delenv(EVAL_SETTINGS_ENV)  # a stage run by hand: the slice's own (defaults)
    assert with_eval_settings(TRAIN_SLICE, "swinunetr") == TRAIN_SLICE


@pytest.mark.parametrize(
    ("value", "says"),
    [("{", "is not JSON"), ("{}", "swinunetr must map"), ('{"swinunetr": {"lr": 1}}', "lr")],
)
def test_bad_evaluate_settings_are_one_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    monkeypatch.setenv(EVAL_SETTINGS_ENV, value)
    with pytest.raises(ConfigError, match=says) as err:
        with_eval_settings(TRAIN_SLICE, "swinunetr")
    assert str(err.value).startswith(f"${EVAL_SETTINGS_ENV}")
