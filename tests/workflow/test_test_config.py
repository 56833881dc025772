"""The tiny config a user runs by hand is the one the tests run (issue 30, item 12).

A user types `snakemake <target> --cores 2 --configfile .test/config.yaml`, which Snakemake
merges over config.yaml; the tests replace config.yaml with .test/config.yaml
(tests/workflow/project.py). .test/config.yaml restates every key config.yaml sets, so both
resolve to one validated config: checked here with Snakemake's own merge, and once through
real Snakemake runs of each command."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import update_config

from accelpipe.config.schema import validate
from tests.workflow.project import REPO, TINY_CONFIG, make_project

SHIPPED = yaml.safe_load((REPO / "config.yaml").read_text())
USER_COMMAND = ("results/ssd/fp32", "--configfile", ".test/config.yaml")  # the README's
# A Snakefile that plans as the real one and writes the config the rules see (validated)
PROBE = 'include: "Snakefile"\n\nPath("resolved_config.json").write_text(json.dumps(config))\n'


def differences(a: Any, b: Any, key: str = "") -> list[str]:
    """The config keys whose values differ between `a` and `b`."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _key_differences(a, b, k, key)]
    return [] if a == b else [f"{key}: {a!r} != {b!r}"]


def _key_differences(a: dict, b: dict, k: str, key: str) -> list[str]:
    name = f"{key}.{k}" if key else k
    if k not in a or k not in b:
        return [f"{name}: only in the {'first' if k in a else 'second'}"]
    return differences(a[k], b[k], name)


def test_the_tiny_config_merged_over_the_shipped_one_is_the_tiny_config() -> None:
    merged = copy.deepcopy(SHIPPED)
    update_config(merged, copy.deepcopy(TINY_CONFIG))  # what --configfile does
    assert differences(validate(merged), validate(copy.deepcopy(TINY_CONFIG))) == [], (
        ".test/config.yaml must restate every key config.yaml sets"
    )


def test_the_check_sees_a_key_the_tiny_config_leaves_to_config_yaml() -> None:
    shipped = copy.deepcopy(SHIPPED) | {"ssd": SHIPPED["ssd"] | {"target": 0.15}}
    tiny = copy.deepcopy(TINY_CONFIG)
    del tiny["ssd"]["target"]
    update_config(shipped, tiny)
    assert differences(validate(shipped), validate(copy.deepcopy(TINY_CONFIG))) == [
        "ssd.target: 0.15 != None"
    ]


@pytest.mark.e2e
def test_the_users_command_and_the_tests_resolve_to_one_config(tmp_path: Path) -> None:
    for name in ("tests", "user"):
        (tmp_path / name).mkdir()
    tests = make_project(tmp_path / "tests")  # config.yaml replaced, as every e2e test runs
    user = make_project(tmp_path / "user", SHIPPED)  # a clone: the shipped config.yaml ...
    (user.root / ".test").mkdir()
    shutil.copy2(REPO / ".test/config.yaml", user.root / ".test/config.yaml")
    resolved = []
    for project, args in ((tests, USER_COMMAND[:1]), (user, USER_COMMAND)):
        (project.root / "probe.smk").write_text("import json\nfrom pathlib import Path\n\n" + PROBE)
        project.snakemake("-s", "probe.smk", "--dry-run", *args)  # ... and the user's command
        resolved.append(json.loads((project.root / "resolved_config.json").read_text()))
    assert resolved[1]["ssd"]["target"] is None  # not config.yaml's 0.15
    assert differences(*resolved) == []
