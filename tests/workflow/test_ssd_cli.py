"""The tiny SSD run, stage by stage through the `accelpipe` CLI with the slices the rules pass.

Marked `tensorflow`, so `make test-tf215` runs it under TF 2.15 (Habana's last TF release),
where Snakemake cannot be installed beside TensorFlow. Where Snakemake is installed (the main
venv, TF 2.21) it skips: tests/workflow/test_ssd.py runs the same stages through Snakemake.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelpipe import stage_config
from accelpipe.config import validate
from tests.workflow.project import REPO, TINY_CONFIG

pytestmark = pytest.mark.tensorflow


def _accelpipe(root: Path, *argv: str) -> None:
    env = {"PYTHONPATH": str(REPO / "workflow"), "PATH": str(Path(sys.executable).parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "accelpipe", *argv],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"accelpipe {argv[0:1]} failed:\n{proc.stderr[-4000:]}"


@pytest.mark.skipif(
    importlib.util.find_spec("snakemake") is not None,
    reason="tests/workflow/test_ssd.py runs these stages through Snakemake in this venv",
)
def test_tiny_ssd_run_stage_by_stage(tmp_path: Path) -> None:
    raw_config = copy.deepcopy(TINY_CONFIG)
    raw_config["ssd"]["runs"] = {"fp32": {"precision": "fp32"}}
    config = validate(raw_config)
    raw, prepared = tmp_path / "data/raw/coco", tmp_path / "data/prepared/coco/tfrecord"
    work, result = tmp_path / "work/ssd/fp32", tmp_path / "results/ssd/fp32"

    def slice_json(slice_of, *names: str) -> str:
        return json.dumps(slice_of(config, *names))

    _accelpipe(
        tmp_path, "raw", "--dataset", "coco", "--config-json", slice_json(stage_config.raw, "coco"),
        "--out", str(raw), "--downloads", str(tmp_path / "data/downloads"),
    )  # fmt: skip
    _accelpipe(
        tmp_path, "prepare", "--dataset", "coco", "--variant", "tfrecord", "--raw", str(raw),
        "--config-json", slice_json(stage_config.prepare, "coco", "tfrecord"),
        "--out", str(prepared), "--workers", "2",
    )  # fmt: skip
    run = ("--workload", "ssd", "--run", "fp32", "--prepared", str(prepared))
    _accelpipe(
        tmp_path, "train", *run, "--config-json", slice_json(stage_config.train, "ssd", "fp32"),
        "--out", str(work / "train"), "--threads", "2",
    )  # fmt: skip
    _accelpipe(
        tmp_path, "evaluate", *run, "--model", str(work / "train"),
        "--config-json", slice_json(stage_config.evaluate, "ssd", "fp32"),
        "--out", str(work / "eval"), "--threads", "2",
    )  # fmt: skip
    _accelpipe(
        tmp_path, "summarize-trace", "--traces", str(work / "train/traces"),
        "--out", str(work / "trace"),
    )  # fmt: skip
    _accelpipe(
        tmp_path, "publish", "--workload", "ssd", "--raw", str(raw), "--prepared", str(prepared),
        "--model", str(work / "train"), "--eval", str(work / "eval"),
        "--trace", str(work / "trace"),
        "--config-json", slice_json(stage_config.publish, "ssd", "fp32"), "--out", str(result),
    )  # fmt: skip

    import tensorflow as tf

    metrics = json.loads((result / "metrics.json").read_text())
    assert 0 <= metrics["AP50"] <= 1 and metrics["images"] == 8
    stage = json.loads((work / "train/stage.json").read_text())
    assert stage["steps"] == 6 and stage["device"].endswith(f"TensorFlow {tf.__version__})")
    summary = json.loads((result / "trace_summary.json").read_text())
    assert {"forward", "backward", "optimizer_step"} <= set(summary["sections"])
    provenance = json.loads((result / "provenance.json").read_text())
    assert provenance["packages"]["tensorflow-cpu"] == tf.__version__
