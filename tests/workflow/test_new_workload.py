"""A new workload is its folder plus one registry entry (docs/development.md, "Adding a
workload"): the toy (tests/workflow/toy/) added to a copy of the workflow trains, evaluates and
publishes a complete result folder on the tiny config, which names no `toy:` block."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from accelpipe import engines
from tests.helpers.performance_checks import check_headline
from tests.workflow.project import TINY_CONFIG, make_project
from tests.workflow.test_result_folders import EVERY_RUN_PUBLISHES

pytestmark = pytest.mark.e2e

TOY = Path(__file__).parent / "toy"
PACKAGE = Path("workflow/accelpipe")
REGISTRY = PACKAGE / "config" / "registry.py"


def register(root: Path, name: str) -> None:
    """The registry entry: the declaration's import and its place in DECLARED."""
    path = root / REGISTRY
    text = path.read_text()
    imports = list(
        re.finditer(r"^from accelpipe\.workloads\.\w+ import declaration as \w+$", text, re.M)
    )
    end = imports[-1].end()
    text = f"{text[:end]}\nfrom accelpipe.workloads.{name} import declaration as {name}{text[end:]}"
    text, n = re.subn(r"^DECLARED = \((.*)\)$", rf"DECLARED = (\1, {name})", text, flags=re.M)
    assert n == 1
    path.write_text(text)


def _git(root: Path, *args: str) -> str:
    identity = ["-c", "user.name=accelpipe tests", "-c", "user.email=tests@localhost"]
    return subprocess.run(
        ["git", *identity, *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout


def test_a_toy_workload_added_in_its_folder_runs_end_to_end(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    assert "toy" not in TINY_CONFIG  # the schema's defaults are the toy's tiny run
    shutil.copytree(
        TOY,
        project.root / PACKAGE / "workloads" / "toy",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    register(project.root, "toy")
    _git(project.root, "add", "-A")
    _git(project.root, "commit", "-q", "-m", "the toy workload")
    touched = _git(project.root, "diff", "--name-only", "HEAD~1").split()
    outside = [f for f in touched if not f.startswith(f"{PACKAGE}/workloads/toy/")]
    assert outside == [str(REGISTRY)]  # adding a workload touches nothing else

    project.snakemake("results/toy/default")

    result = project.root / "results" / "toy" / "default"
    engine = engines.ENGINES["pytorch"]
    assert EVERY_RUN_PUBLISHES | {engine.weights} <= {p.name for p in result.iterdir()}
    check_headline(result, TINY_CONFIG["performance"]["warmup_steps"])
    metrics = json.loads((result / "metrics.json").read_text())
    assert 0 <= metrics["mean_dice"] <= 1
    assert metrics["quality_target"]["metric"] == "mean_dice"
    stage = json.loads((project.root / "work/toy/default/train/stage.json").read_text())
    assert stage["steps"] == 12  # the toy's schema defaults: 2 epochs of 6 steps
    provenance = json.loads((result / "provenance.json").read_text())
    assert provenance["backend"] == "cpu"
    assert provenance["config"]["toy"]["model"] == {"kernel": 3}
    assert set(engine.packages) & set(provenance["packages"])
