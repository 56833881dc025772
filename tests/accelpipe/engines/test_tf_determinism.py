"""train.deterministic (issue 22): two fresh runs of the tiny SSD and Segmenter configs
(.test/config.yaml) log the same losses, end with the same weights and score the same
metrics; a resumed SSD run continues the same sequence; a damaged shard stops train and
evaluate with one line naming it.

Each run is a process of its own, as a train stage is, calling the workload's train and
evaluate on a tiny prepared dataset (the real TensorFlow engine, input pipeline and metrics,
without snakemake).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import pytest
import yaml

from accelpipe.config.schema import validate
from accelpipe.core.errors import DataError
from accelpipe.core.keras2 import keras
from accelpipe.datasets import ade20k, coco
from accelpipe.datasets.ade20k_synthetic import synthesize as synthesize_ade20k
from accelpipe.datasets.coco_synthetic import synthesize as synthesize_coco
from accelpipe.devices import tf_device
from accelpipe.plan import stage_config
from tests.helpers.settings import train_job_slice
from tests.workflow.project import TINY_CONFIG

pytestmark = pytest.mark.tensorflow

REPO = Path(__file__).resolve().parents[3]
DATASETS = {"ssd": "coco", "segmenter": "ade20k"}

RUN = """
import importlib, json, sys
from pathlib import Path
from accelpipe.plan import stage_config
from accelpipe.config.schema import validate
from accelpipe.engines import tf_trainer
from tests.helpers.settings import train_job_slice
from tests.workflow.project import TINY_CONFIG

workload, prepared, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
epochs, evaluate = int(sys.argv[4]), sys.argv[5] == "evaluate"
tf_trainer.limit_threads(2)  # as the train stage: the thread pools fixed before any op
block = TINY_CONFIG[workload]
config = validate(TINY_CONFIG | {workload: block | {"train": block["train"] | {"epochs": epochs}}})
cfg = train_job_slice(config, workload, "fp32", profiling=False)
module = importlib.import_module(f"accelpipe.workloads.{workload}.workload")
work = out / "train"
facts = module.train(prepared, "fp32", cfg, work)
(work / "stage.json").write_text(json.dumps({"architecture": facts["architecture"]}))
if evaluate:
    (out / "eval").mkdir()
    eval_cfg = stage_config.evaluate(config, workload, "fp32")
    module.evaluate(prepared, "fp32", eval_cfg, work, out / "eval")
"""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny config's synthetic COCO and ADE20K, prepared as its prepare settings say."""
    root = tmp_path_factory.mktemp("prepared")
    made = {}
    for workload, dataset in DATASETS.items():
        sizes = TINY_CONFIG["datasets"][dataset]["synthetic"]
        shards = TINY_CONFIG[workload]["prepare"]
        if dataset == "coco":
            raw = synthesize_coco(root / "coco_raw", **sizes)
            # as the prepare stage sizes its shards (shard_mb or the counts)
            made[workload] = coco.prepare_variant(
                "tfrecord", raw, root / "coco", {"prepare": shards}, 1
            )
        else:
            raw = synthesize_ade20k(root / "ade20k_raw", **sizes)
            made[workload] = ade20k.prepare(raw, root / "ade20k", **shards)
    return made


def _start(workload: str, prepared: Path, out: Path, epochs: int, evaluate: bool = True):
    """A train (and evaluate) of the tiny config's fp32 run in a fresh process, started."""
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'workflow'}{os.pathsep}{REPO}"}
    args = [workload, str(prepared), str(out), str(epochs), "evaluate" if evaluate else "-"]
    return subprocess.Popen(
        [sys.executable, "-c", RUN, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        _, stderr = proc.communicate()
        assert proc.returncode == 0, stderr[-3000:]


def _run(workload: str, prepared: Path, out: Path, epochs: int, evaluate: bool = True) -> None:
    _wait(_start(workload, prepared, out, epochs, evaluate))


def _weights(path: Path) -> str:
    """A digest of every array in a Keras weights file (the file's own bytes hold times)."""
    digest = hashlib.sha256()
    with h5py.File(path, "r") as f:
        arrays: list[tuple[str, Any]] = []
        f.visititems(
            lambda name, node: arrays.append((name, node[()])) if hasattr(node, "shape") else None
        )
        for name, array in sorted(arrays, key=lambda item: item[0]):
            digest.update(name.encode() + array.tobytes())
    return digest.hexdigest()


def _outcome(out: Path) -> dict[str, Any]:
    with (out / "train" / "train_log.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    return {
        "losses": [r["loss"] for r in rows],  # as logged: to the printed digit
        "lr": [r["lr"] for r in rows],
        "weights": _weights(out / "train" / "model.weights.h5"),
        "metrics": metrics,
    }


_FIRST: dict[str, dict[str, Any]] = {}  # workload: outcome of its first run (and "out")


def _first_run(workload: str, prepared: dict[str, Path], root: Path) -> dict[str, Any]:
    """The outcome of one fresh run of `workload`, made once for the module's tests."""
    if workload not in _FIRST:
        epochs = TINY_CONFIG[workload]["train"]["epochs"]
        _run(workload, prepared[workload], root / workload, epochs)
        _FIRST[workload] = _outcome(root / workload) | {"out": root / workload}
    return _FIRST[workload]


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


def test_the_shipped_and_tiny_configs_train_deterministically() -> None:
    """The schema's default: on, for both TensorFlow workloads."""
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())
    for config in (validate(shipped), validate(TINY_CONFIG)):
        assert config["ssd"]["train"]["deterministic"] is True
        assert config["segmenter"]["train"]["deterministic"] is True
        assert stage_config.train(config, "ssd", "fp32")["train"]["deterministic"] is True


@pytest.mark.parametrize(
    "workload", [pytest.param("ssd", marks=pytest.mark.main_suite_only), "segmenter"]
)
def test_two_fresh_runs_log_the_same_losses_and_score_the_same_metrics(
    workload: str, prepared: dict[str, Path], runs_root: Path
) -> None:
    """The two at the same time: neither the other process nor the order the threads of
    either finish in has a say."""
    epochs = TINY_CONFIG[workload]["train"]["epochs"]
    one, two = runs_root / workload, runs_root / f"{workload}-again"
    _wait(*(_start(workload, prepared[workload], out, epochs) for out in (one, two)))
    first = _FIRST[workload] = _outcome(one) | {"out": one}
    again = _outcome(two)
    train = TINY_CONFIG[workload]["train"]
    assert len(again["losses"]) == train["epochs"] * train["steps_per_epoch"]  # every step
    assert again["losses"] == first["losses"]
    assert again["lr"] == first["lr"]
    assert again["metrics"] == first["metrics"]
    assert again["weights"] == first["weights"]
    if workload == "ssd":
        detections = "eval/detections.json"
        assert (two / detections).read_bytes() == (one / detections).read_bytes()


@pytest.mark.main_suite_only
def test_a_resumed_ssd_run_continues_the_same_sequence(
    prepared: dict[str, Path], runs_root: Path
) -> None:
    """Epoch 1 in one process, epoch 2 resumed from its checkpoint in another: each epoch's
    data comes from (seed, epoch) alone and the checkpoint holds the rest (SSD has no random
    op in the model; Segmenter's dropout and drop-path restart with the process)."""
    first = _first_run("ssd", prepared, runs_root)
    resumed = runs_root / "ssd-resumed"
    _run("ssd", prepared["ssd"], resumed, 1, evaluate=False)
    _run("ssd", prepared["ssd"], resumed, 2)
    outcome = _outcome(resumed)
    assert outcome["losses"] == first["losses"]
    assert outcome["metrics"] == first["metrics"]
    assert outcome["weights"] == first["weights"]


@pytest.mark.main_suite_only
def test_a_truncated_shard_stops_train_and_evaluate_with_one_line_naming_it(
    prepared: dict[str, Path], runs_root: Path, tmp_path: Path
) -> None:
    """TensorFlow's reader says only "truncated record at N": the message names the shard
    and how to re-make it."""
    from accelpipe.workloads.ssd import workload as ssd

    first = _first_run("ssd", prepared, runs_root)
    damaged = tmp_path / "prepared"
    shutil.copytree(prepared["ssd"], damaged)
    train_shard, val_shard = (
        damaged / "train-00001-of-00002.tfrecord",
        damaged / "val-00000-of-00002.tfrecord",
    )
    for shard in (train_shard, val_shard):
        shard.write_bytes(shard.read_bytes()[:100])  # inside its first record
    config = validate(TINY_CONFIG)
    cfg = train_job_slice(config, "ssd", "fp32", profiling=False)
    try:
        with pytest.raises(DataError) as err:
            ssd.train(damaged, "fp32", cfg, tmp_path / "work")
        assert str(err.value).startswith(f"{train_shard}: truncated record at byte 0: ")
        assert str(err.value).endswith("`snakemake --forcerun prepare_dataset <target>`")
        assert not tf_device.determinism_enabled()  # the run put the process back
        with pytest.raises(DataError) as err:
            ssd.evaluate(
                damaged,
                "fp32",
                stage_config.evaluate(config, "ssd", "fp32"),
                first["out"] / "train",
                tmp_path / "eval",
            )
        assert str(err.value).startswith(f"{val_shard}: truncated record at byte 0: ")
    finally:
        keras.mixed_precision.set_global_policy("float32")
