"""The tiny SSD run, stage by stage through the `accelpipe` CLI with the slices the rules pass
(tests/helpers/stages.py).

Marked `tensorflow`, so `make test-tf215` runs it under TF 2.15 (Habana's last TF release),
where Snakemake cannot be installed beside TensorFlow. Where Snakemake is installed (the main
venv, TF 2.21) it skips: tests/workflow/test_ssd.py runs the same stages through Snakemake.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.helpers.stages import run_stages, skip_where_snakemake
from tests.workflow.project import TINY_CONFIG

pytestmark = pytest.mark.tensorflow


@skip_where_snakemake("tests/workflow/test_ssd.py runs these stages through Snakemake in this venv")
def test_tiny_ssd_run_stage_by_stage(tmp_path: Path) -> None:
    raw_config = copy.deepcopy(TINY_CONFIG)
    raw_config["ssd"]["runs"] = {"fp32": {"precision": "fp32"}}
    run = run_stages(tmp_path, raw_config, "ssd", "fp32")
    result = run.result

    import tensorflow as tf

    metrics = json.loads((result / "metrics.json").read_text())
    assert 0 <= metrics["AP50"] <= 1 and metrics["images"] == 8
    stage = json.loads((run.work / "train/stage.json").read_text())
    assert stage["steps"] == 6 and stage["device"].endswith(f"TensorFlow {tf.__version__})")
    summary = json.loads((result / "trace_summary.json").read_text())
    assert {"forward", "backward", "optimizer_step"} <= set(summary["sections"])
    provenance = json.loads((result / "provenance.json").read_text())
    assert provenance["packages"]["tensorflow-cpu"] == tf.__version__
