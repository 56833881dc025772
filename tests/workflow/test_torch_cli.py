"""The three PyTorch workloads' tiny runs, stage by stage through the `accelpipe` CLI with the
arguments and config slices the rules pass (tests/helpers/stages.py).

Marked `torch`, so `make test-torch26` runs them under torch 2.6 on Python 3.10 (the rocm and
gaudi images' release), where Snakemake cannot be installed (it needs Python >= 3.11). Where
Snakemake is installed (the main venv) they skip: tests/workflow/test_pipeline.py,
test_swinunetr.py and test_resnet50.py run the same stages through Snakemake.
"""

from __future__ import annotations

import csv
import importlib.metadata
import json
import platform
from pathlib import Path

import pytest
import torch

from tests.helpers.performance_checks import check_headline
from tests.helpers.stages import run_stages, skip_where_snakemake
from tests.workflow.project import TINY_CONFIG

pytestmark = pytest.mark.torch

# The trace sections of the tiny profiler cycle (steps 3 and 4: the last of epoch 0 and the
# first of epoch 1), the same in every workload's loop.
SECTIONS = {"loader_first", "loader_next", "step", "forward", "loss", "backward", "optimizer_step"}


def _unet2d(result: Path, metrics: dict) -> None:
    assert set(metrics["dice"]) == {"1", "2", "3"}
    assert all(0.0 <= v <= 1.0 for v in metrics["dice"].values())
    assert metrics["mean_dice"] == pytest.approx(sum(metrics["dice"].values()) / 3, abs=1e-5)
    with (result / "per_case_dice.csv").open() as f:
        assert len(list(csv.DictReader(f))) == metrics["n_cases"] == 1  # 5 cases, 5 folds


def _swinunetr(result: Path, metrics: dict) -> None:
    assert set(metrics["dice"]) == {"GTV-1"} and 0.0 <= metrics["mean_dice"] <= 1.0
    with (result / "per_case_dice.csv").open() as f:
        assert len(list(csv.DictReader(f))) == metrics["n_cases"] >= 1


def _resnet50(result: Path, metrics: dict) -> None:
    assert 0 <= metrics["top1"] <= metrics["top5"] <= 1
    assert metrics["n_images"] == 8 and metrics["classes"] == 4
    with (result / "per_class_accuracy.csv").open() as f:
        assert sum(int(r["images"]) for r in csv.DictReader(f)) == 8


@skip_where_snakemake(
    "tests/workflow/test_pipeline.py, test_swinunetr.py and test_resnet50.py run these stages "
    "through Snakemake in this venv"
)
@pytest.mark.parametrize(
    ("workload", "run", "precision", "check_metrics"),
    [
        ("unet2d", "fold0", "fp32", _unet2d),
        ("swinunetr", "default", "fp32", _swinunetr),
        ("resnet50", "bf16", "bf16", _resnet50),  # autocast to bf16 on the cpu
    ],
)
def test_tiny_torch_run_stage_by_stage(
    tmp_path: Path, workload: str, run: str, precision: str, check_metrics
) -> None:
    folders = run_stages(tmp_path, TINY_CONFIG, workload, run)
    result, train = folders.result, folders.work / "train"

    metrics = json.loads((result / "metrics.json").read_text())
    check_metrics(result, metrics)

    stage = json.loads((train / "stage.json").read_text())
    assert stage["steps"] == 6 and stage["precision"] == precision  # 2 epochs x 3 steps
    assert stage["device"].endswith(f"PyTorch {torch.__version__})")
    with (result / "train_log.csv").open() as f:
        log = list(csv.DictReader(f))
    assert [int(r["step"]) for r in log] == list(range(1, 7))
    assert all(0 < float(r["loss"]) < 100 and float(r["samples_per_s"]) > 0 for r in log)
    # FLOPs counted by torch's FlopCounterMode, the measured matmul ceiling, the headline
    check_headline(result, TINY_CONFIG["performance"]["warmup_steps"])

    summary = json.loads((result / "trace_summary.json").read_text())
    assert summary["device"] == "cpu" and set(summary["sections"]) >= SECTIONS
    assert summary["sections"]["step"]["count"] == 2  # the 2 active profiler steps

    provenance = json.loads((result / "provenance.json").read_text())
    assert provenance["python"] == platform.python_version()
    assert provenance["packages"]["torch"] == importlib.metadata.version("torch")
    assert provenance["device"] == stage["device"] and provenance["precision"] == precision
    assert {"raw", "prepare", "train", "evaluate", "trace"} <= set(provenance["stages"])
