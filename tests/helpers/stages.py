"""One run of the tiny config, stage by stage through the `accelpipe` CLI, with the arguments
and config slices the rules pass (rules/*.smk, accelpipe.plan.stage_config): for the venvs where
Snakemake cannot be installed (TF 2.15: wrapt; torch 2.6 on Python 3.10: Snakemake >= 8
needs 3.11). Where Snakemake is installed, tests/workflow runs the same stages through it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from accelpipe.config import registry
from accelpipe.config.schema import validate
from accelpipe.plan import stage_config
from tests.workflow.project import REPO

HAS_SNAKEMAKE = importlib.util.find_spec("snakemake") is not None


def skip_where_snakemake(reason: str) -> pytest.MarkDecorator:
    """Skip in a venv with Snakemake, where the tests named in `reason` run these stages
    through it."""
    return pytest.mark.skipif(HAS_SNAKEMAKE, reason=reason)


@dataclass(frozen=True)
class RunFolders:
    """The stages' outputs under the run's root, at the paths the rules give them."""

    raw: Path
    prepared: Path
    work: Path  # work/<workload>/<run>: train/, eval/, trace/
    result: Path  # results/<workload>/<run>


def accelpipe(root: Path, stage: str, *argv: str, framework: str | None = None) -> None:
    """`accelpipe [--framework F] <stage> <argv>` in `root` with this venv's Python, as a
    rule's shell command runs it (no $ACCELPIPE_RUNTIME: here, on the cpu); a failure shows
    the stage's stderr."""
    # PATH as the Snakefile sets it: this venv first, then the system's (torch.compile's
    # inductor finds the C++ compiler there)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {"PYTHONPATH": str(REPO / "workflow"), "PATH": path}
    options = ("--framework", framework) if framework else ()
    proc = subprocess.run(
        [sys.executable, "-m", "accelpipe", *options, stage, *argv],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"accelpipe {stage} failed:\n{proc.stderr[-4000:]}"


def run_stages(root: Path, raw_config: dict[str, Any], workload: str, run: str) -> RunFolders:
    """raw, prepare, train, evaluate, summarize-trace and publish of `workload`'s `run` on
    `raw_config` (validated here, defaults filled in, as the Snakefile does), in `root`."""
    config = validate(raw_config)
    entry = registry.workload(workload)
    dataset, variant = entry.dataset, entry.variant
    folders = RunFolders(
        raw=root / f"data/raw/{dataset}",
        prepared=root / f"data/prepared/{dataset}/{variant}",
        work=root / f"work/{workload}/{run}",
        result=root / f"results/{workload}/{run}",
    )
    raw, prepared, work = folders.raw, folders.prepared, folders.work

    def stage(name: str, *argv: str) -> None:
        accelpipe(root, name, *argv, framework=entry.framework)

    def slice_json(slice_of: Any, *names: str) -> str:
        return json.dumps(slice_of(config, *names))

    run_args = ("--workload", workload, "--run", run, "--prepared", str(prepared))
    stage(
        "raw", "--dataset", dataset, "--config-json", slice_json(stage_config.raw, dataset),
        "--out", str(raw), "--downloads", str(root / f"data/downloads/{dataset}"),
    )  # fmt: skip
    stage(
        "prepare", "--dataset", dataset, "--variant", variant, "--raw", str(raw),
        "--config-json", slice_json(stage_config.prepare, dataset, variant),
        "--out", str(prepared), "--workers", "2",
    )  # fmt: skip
    stage(
        "train", *run_args, "--config-json", slice_json(stage_config.train, workload, run),
        "--out", str(work / "train"), "--threads", "2",
    )  # fmt: skip
    stage(
        "evaluate", *run_args, "--model", str(work / "train"),
        "--config-json", slice_json(stage_config.evaluate, workload, run),
        "--out", str(work / "eval"), "--threads", "2",
    )  # fmt: skip
    stage("summarize-trace", "--traces", str(work / "train/traces"), "--out", str(work / "trace"))
    stage(
        "publish", "--workload", workload, "--raw", str(raw), "--prepared", str(prepared),
        "--model", str(work / "train"), "--eval", str(work / "eval"),
        "--trace", str(work / "trace"),
        "--config-json", slice_json(stage_config.publish, workload, run),
        "--out", str(folders.result),
    )  # fmt: skip
    return folders
