"""TensorFlow's multi-worker launch through a real srun (scripts/slurm-local.sh start).

The launcher runs inside a job step, as under Snakemake's Slurm executor; it starts its 2
workers as the tasks of a new srun step on the one node, each task's TF_CONFIG derived from
the step's variables. They must agree on the cluster, take the indexes of their Slurm ranks
and, training the toy model of tests/helpers/tf_toy.py, end at one process's weights. A step
across two nodes runs through Snakemake in test_slurm.py, on slurm-local.sh's two-node partition.

Without a usable Slurm the test skips, saying why, unless ACCELPIPE_REQUIRE_SLURM=1 (CI sets
it): then it fails instead.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.integration.test_slurm import _slurm_problem

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

TWO_TASKS = """
import json, os, sys
from pathlib import Path
from accelpipe.launch import tf_launch
out = Path(sys.argv[1])
train = {"epochs": 2, "lr": 0.05, "seed": 3, "batch_size": 4, "devices": 2}
cfg = {"backend": "cpu", "train": train, "profile": {"enabled": False}}
slurm = ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID")
seen = {name: os.environ.get(name) for name in ("TF_CONFIG", *slurm)}
if len(sys.argv) > 2:  # a task of the launcher's step: TF_CONFIG set by the wrapper
    from tests.helpers import tf_toy
    from tests.helpers.settings import tf_run
    index, world = tf_launch.cluster()
    (out / f"task{index}.json").write_text(json.dumps({**seen, "cluster": [index, world]}))
    facts = tf_run(cfg, out, tf_toy.make_job)
    (out / f"facts{index}.json").write_text(json.dumps(facts))
else:  # the launcher, with this script as the workers' command instead of the CLI
    from tests.helpers.settings import tf_train
    (out / "launcher.json").write_text(json.dumps(seen))
    tf_launch.worker_command = lambda argv: [sys.executable, __file__, str(out), "worker"]
    tf_launch.launch_training(tf_train(**train), ["train"], 2)
"""


@pytest.fixture(scope="module")
def slurm() -> None:
    if (problem := _slurm_problem()) is not None:
        if os.environ.get("ACCELPIPE_REQUIRE_SLURM") == "1":
            pytest.fail(f"ACCELPIPE_REQUIRE_SLURM=1 but {problem}")
        pytest.skip(problem)


def _srun(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """`cmd` as the one task of a new Slurm job; SIGTERM (srun cancels the job) on timeout."""
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'workflow'}{os.pathsep}{REPO}"}
    srun = ["srun", "--job-name=accelpipe-tf-test", "--nodes=1", "--ntasks=1"]
    proc = subprocess.Popen(
        [*srun, "--cpus-per-task=2", "--mem=4G", *cmd],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"srun did not finish in {timeout} s:\n{out}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


def _log_steps(work: Path) -> list[str]:
    with (work / "train_log.csv").open(newline="") as f:
        return [row["step"] for row in csv.DictReader(f)]


def test_two_srun_tasks_agree_on_the_cluster_and_train_like_one_process(
    slurm: None, tmp_path: Path
) -> None:
    from accelpipe.core.keras2 import keras
    from accelpipe.devices import tf_device
    from accelpipe.engines.tf_trainer import MODEL_FILE
    from tests.helpers import tf_toy
    from tests.helpers.settings import tf_run, tf_train

    two = tmp_path / "two"
    two.mkdir()
    script = tmp_path / "two_tasks.py"
    script.write_text(TWO_TASKS)
    proc = _srun([sys.executable, str(script), str(two)])
    assert proc.returncode == 0, proc.stdout

    launcher = json.loads((two / "launcher.json").read_text())
    tasks = [json.loads((two / f"task{i}.json").read_text()) for i in (0, 1)]
    assert launcher["SLURM_STEP_ID"] is not None and launcher["TF_CONFIG"] is None
    configs = [json.loads(t["TF_CONFIG"]) for t in tasks]
    workers = configs[0]["cluster"]["worker"]
    assert configs[1]["cluster"]["worker"] == workers  # the same cluster in both
    assert len({w.rsplit(":", 1)[0] for w in workers}) == 1  # one node, two ports
    assert len({w.rsplit(":", 1)[1] for w in workers}) == 2
    for i, (task, config) in enumerate(zip(tasks, configs, strict=True)):
        assert config["task"] == {"type": "worker", "index": i}
        assert task["cluster"] == [i, 2]  # cluster() as the trainer reads it
        assert task["SLURM_PROCID"] == str(i)  # the index is the Slurm rank
        assert task["SLURM_JOB_ID"] == launcher["SLURM_JOB_ID"]
        assert task["SLURM_STEP_ID"] != launcher["SLURM_STEP_ID"]  # a step of their own
    facts = json.loads((two / "facts0.json").read_text())
    assert facts["world_size"] == 2 and facts["global_batch"] == 4
    assert json.loads((two / "facts1.json").read_text()) is None  # only the chief reports

    one = tmp_path / "one"
    train = {"epochs": 2, "lr": 0.05, "seed": 3, "batch_size": 4}
    try:
        tf_run({"backend": "cpu", "train": train}, one, tf_toy.make_job)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert _log_steps(two) == _log_steps(one)
    weights = []
    for work in (one, two):
        model = tf_toy.make_job(tf_train(lr=0.05), tf_device.resolve("cpu")).model
        model.load_weights(str(work / MODEL_FILE))
        weights.append(model.get_weights())
    for a, b in zip(*weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
