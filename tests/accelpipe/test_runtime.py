"""The runtime file every stage reads through `--runtime`: read back, and refused with one
line naming it when it is not one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelpipe.errors import ConfigError
from accelpipe.runtime import read_runtime


def test_no_file_means_here_on_the_cpu() -> None:
    assert read_runtime(None) == {"runtime": "local", "backend": "cpu"}


def test_a_runtime_file_is_read_as_written(tmp_path: Path) -> None:
    settings = {"runtime": "docker", "backend": "cuda", "image": "localhost/accelpipe/x:1"}
    path = tmp_path / "pytorch.json"
    path.write_text(json.dumps(settings))
    assert read_runtime(path) == settings


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "cannot read the runtime file"),
        ("{", "not JSON"),
        ("[]", "not a runtime file"),
        ('{"runtime": "slurm"}', "must be one of local, docker"),
        ('{"runtime": "docker"}', "names no `image`"),
    ],
)
def test_a_bad_runtime_file_is_one_error_naming_it(
    tmp_path: Path, text: str | None, says: str
) -> None:
    path = tmp_path / "pytorch.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=says) as err:
        read_runtime(path)
    assert str(err.value).startswith(str(path))
