"""The TensorFlow engine honours the contract: log columns, resume, profiler sections."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from accelpipe.config.settings import PROFILE_OFF, TFTrain
from accelpipe.core.errors import ConfigError
from accelpipe.core.keras2 import keras, tf
from accelpipe.devices import power, tf_device
from accelpipe.engines import ENGINES, run_sequence
from accelpipe.engines.tf_trainer import (
    MODEL_FILE,
    PROFILER_TABLE,
    TFRun,
    TFTrainer,
    TFTrainJob,
)
from accelpipe.engines.train_log import LOG_FIELDS, SCALARS, SECTIONS
from accelpipe.launch.tf_launch import InputShard
from tests.helpers import tf_toy
from tests.helpers.fake_power import rapl_energy, set_rapl_energy, write_rapl_zone
from tests.helpers.profile_schedule import PROFILED_STEPS, TINY_SCHEDULE
from tests.helpers.settings import tf_run, tf_train
from tests.helpers.tensorboard import log_scalars, read_scalars

pytestmark = pytest.mark.tensorflow

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _float32_policy() -> Iterator[None]:
    """run_training sets Keras's global policy; later tests expect the default."""
    yield
    keras.mixed_precision.set_global_policy("float32")


def _cfg(epochs: int, profile: bool = False, **train: object) -> dict:
    schedule = {"wait": 1, "warmup": 0, "active": 2, "repeat": 1}
    return {
        "backend": "cpu",
        "train": {"epochs": epochs, "lr": 0.05, "seed": 3, "batch_size": 4, **train},
        "profile": {"enabled": profile, "schedule": schedule},
    }


def _log(work: Path) -> list[dict[str, str]]:
    with (work / "train_log.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def _weights(work: Path) -> list[np.ndarray]:
    model = tf_toy.make_job(tf_train(lr=0.05), tf_device.resolve("cpu")).model
    model.load_weights(str(work / MODEL_FILE))
    return model.get_weights()


def test_a_run_logs_every_step_with_the_torch_columns_and_saves_weights(tmp_path: Path) -> None:
    facts = tf_run(_cfg(epochs=2), tmp_path, tf_toy.make_job)
    rows = _log(tmp_path)
    assert tuple(rows[0]) == LOG_FIELDS
    assert [int(r["step"]) for r in rows] == list(range(1, 7))
    assert [int(r["epoch"]) for r in rows] == [1, 1, 1, 2, 2, 2]  # from 1, as mllog.txt
    assert float(rows[-1]["loss"]) < float(rows[0]["loss"])  # it learns
    assert float(rows[-1]["lr"]) < float(rows[0]["lr"])  # the schedule moves
    assert facts["steps"] == 6 and facts["resumed_from_step"] is None and facts["toy"]
    assert (tmp_path / ENGINES["tensorflow"].weights).is_file()
    assert read_scalars(tmp_path / "tensorboard") == log_scalars(rows, SCALARS)
    assert {r["profiled"] for r in rows} == {"0"}  # the profiler is off
    # the CPU keeps no device memory count; the host's peak is this process's
    assert (facts["peak_device_memory_bytes"], facts["device_memory_source"]) == (None, None)
    assert facts["peak_host_rss_bytes"] > 0


def test_each_logged_step_gets_the_energy_since_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in RAPL package that spends 0.5 J per step (as the step's row is written):
    train_log.csv's energy_j, and the whole window in the facts' `power`."""
    root, zone = tmp_path / "powercap", "intel-rapl:0"
    write_rapl_zone(root, zone, "package-0", 5_000_000)
    monkeypatch.setenv(power.RAPL_ROOT_ENV, str(root))
    learning_rate = TFTrainer._learning_rate

    def spending(self: TFTrainer) -> float:  # once per logged step, before its row
        set_rapl_energy(root, zone, rapl_energy(root, zone) + 500_000)
        return learning_rate(self)

    monkeypatch.setattr(TFTrainer, "_learning_rate", spending)
    facts = tf_run(_cfg(epochs=2), tmp_path / "work", tf_toy.make_job)
    assert [float(r["energy_j"]) for r in _log(tmp_path / "work")] == [0.5] * 6
    assert facts["power"]["joules"] == pytest.approx(3.0)
    assert facts["power"]["source"] == "rapl package energy counter"
    assert facts["power"]["devices"] == ["package-0"] and facts["power"]["incomplete"] is None


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path: Path) -> None:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    tf_run(_cfg(epochs=2), straight, tf_toy.make_job)
    tf_run(_cfg(epochs=1), resumed, tf_toy.make_job)
    facts = tf_run(_cfg(epochs=2), resumed, tf_toy.make_job)
    assert facts["resumed_from_step"] == 3
    assert [r["step"] for r in _log(resumed)] == [r["step"] for r in _log(straight)]
    rows = _log(resumed)
    assert read_scalars(resumed / "tensorboard") == log_scalars(rows, SCALARS)
    for a, b in zip(_weights(straight), _weights(resumed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_a_run_killed_before_its_first_checkpoint_restarts_its_log(tmp_path: Path) -> None:
    tf_run(_cfg(epochs=1), tmp_path, tf_toy.make_job)
    # killed in epoch 0: its rows are logged, the checkpoint and the weights are not
    shutil.rmtree(tmp_path / ENGINES["tensorflow"].checkpoints[0])
    (tmp_path / MODEL_FILE).unlink()
    facts = tf_run(_cfg(epochs=1), tmp_path, tf_toy.make_job)
    assert facts["resumed_from_step"] is None
    assert [int(r["step"]) for r in _log(tmp_path)] == [1, 2, 3]  # none logged twice
    assert [r["attempt"] for r in _log(tmp_path)] == ["0"] * 3


def test_deterministic_holds_op_determinism_for_the_run_only(tmp_path: Path) -> None:
    """train.deterministic: TensorFlow's op determinism on while the run builds its data and
    trains, and the process left as it was (a slice without the key asks for nothing)."""
    seen = []

    def make_job(cfg: TFTrain, device: tf_device.TFDevice) -> TFTrainJob:
        def dataset(epoch: int, shard: InputShard) -> tf.data.Dataset:
            seen.append(tf_device.determinism_enabled())
            return tf_toy.toy_dataset(epoch, shard)

        return dataclasses.replace(tf_toy.make_job(cfg, device), dataset=dataset)

    tf_run(_cfg(epochs=1, deterministic=True), tmp_path / "on", make_job)
    assert not tf_device.determinism_enabled()
    tf_run(_cfg(epochs=1, deterministic=False), tmp_path / "off", make_job)
    tf_run(_cfg(epochs=1), tmp_path / "unset", make_job)
    assert seen == [True, False, False]
    with tf_device.determinism(True):
        tf_run(_cfg(epochs=1, deterministic=False), tmp_path / "nested", make_job)
        assert tf_device.determinism_enabled()
    assert seen[-1] is False and not tf_device.determinism_enabled()


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_epoch_data_is_in_order_only_when_deterministic(
    tmp_path: Path, deterministic: bool
) -> None:
    """tf.data's `deterministic` option reaches every map and interleave of the pipeline that
    does not set its own; off, they may hand out elements as they finish."""
    device = tf_device.resolve("cpu")
    job = tf_toy.make_job(tf_train(lr=0.05), device)
    trainer = TFTrainer(job, device, tf_train(deterministic=deterministic), PROFILE_OFF, tmp_path)
    assert trainer._dataset(0).options().deterministic is deterministic


def test_an_op_without_a_deterministic_kernel_is_one_line_naming_the_keys(
    tmp_path: Path,
) -> None:
    """XLA has no deterministic MaxPool gradient (SSD's stem with train.compile): under
    train.deterministic TensorFlow raises UnimplementedError, reported as a ConfigError."""

    def make_job(cfg: TFTrain, device: tf_device.TFDevice) -> TFTrainJob:
        pooled = keras.Sequential(
            [
                keras.layers.Input((8,)),
                keras.layers.Dense(8),  # the pool's gradient is needed
                keras.layers.Reshape((2, 4, 1)),
                keras.layers.MaxPooling2D((1, 2)),
                keras.layers.Flatten(),
                keras.layers.Dense(1),
            ]
        )
        job = tf_toy.make_job(cfg, device)
        optimizer = keras.optimizers.SGD(0.01)
        return dataclasses.replace(job, model=pooled, optimizer=optimizer, regularization=None)

    with pytest.raises(ConfigError) as err:
        tf_run(_cfg(epochs=1, compile=True, deterministic=True), tmp_path, make_job)
    assert str(err.value) == (
        "train.deterministic: GPU MaxPool gradient ops do not yet have a deterministic XLA "
        "implementation. (TensorFlow has no deterministic kernel for an op of this model "
        "here); set train.deterministic: false, or train.compile: false"
    )
    facts = tf_run(_cfg(epochs=1, compile=True), tmp_path / "off", make_job)
    assert facts["steps"] == 3


KILLED_RUN = """
import sys
from pathlib import Path
from tests.helpers.settings import tf_run
from tests.helpers import tf_toy
from tests.helpers.fake_power import rapl_energy, set_rapl_energy, write_rapl_zone

train = {"epochs": 4, "lr": 0.05, "seed": 3, "batch_size": 4}
cfg = {"backend": "cpu", "train": train, "profile": {"enabled": False}}
delay = float(sys.argv[2])
tf_run(cfg, Path(sys.argv[1]), lambda c, d: tf_toy.make_job(c, d, delay_s=delay))
"""


@pytest.mark.main_suite_only
def test_sigkill_mid_run_then_resume_loses_no_step_and_logs_none_twice(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'workflow'}{os.pathsep}{REPO}"}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(tmp_path), "0.3"], env=env)
    checkpoints = tmp_path / ENGINES["tensorflow"].checkpoints[0]
    # kill in epoch 1, after its checkpoint-less rows reached the log
    while proc.poll() is None and not (
        list(checkpoints.glob("ckpt-3.index")) and int(_log(tmp_path)[-1]["step"]) > 3
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    logged_before = [int(r["step"]) for r in _log(tmp_path)]
    assert logged_before[-1] > 3  # rows after the checkpoint, which the resume must drop
    subprocess.run([sys.executable, "-c", KILLED_RUN, str(tmp_path), "0"], env=env, check=True)
    steps = [int(r["step"]) for r in _log(tmp_path)]
    assert steps == list(range(1, 13))
    # steps 1-3 from the killed process, 4-12 from the resumed one (its warm-up is its own)
    assert [r["attempt"] for r in _log(tmp_path)] == ["0"] * 3 + ["1"] * 9
    # TensorBoard drops the killed attempt's points after the checkpoint: one per step
    assert read_scalars(tmp_path / "tensorboard") == log_scalars(_log(tmp_path), SCALARS)


def test_the_steps_of_the_profilers_warmup_and_active_phases_are_marked_profiled(
    tmp_path: Path,
) -> None:
    """The same steps the torch engine's test marks under the same schedule (TF traces only
    the active ones)."""
    cfg = _cfg(epochs=2, profile=True)
    cfg["profile"]["schedule"] = TINY_SCHEDULE
    tf_run(cfg, tmp_path, tf_toy.make_job)
    rows = _log(tmp_path)
    assert [int(r["step"]) for r in rows if r["profiled"] == "1"] == PROFILED_STEPS
    assert {r["profiled"] for r in rows} == {"0", "1"}


def test_profiled_steps_leave_a_chrome_trace_with_the_reference_sections(tmp_path: Path) -> None:
    tf_run(_cfg(epochs=1, profile=True), tmp_path, tf_toy.make_job)
    traces = sorted((tmp_path / "traces").glob("trace_step*.json.gz"))
    assert [t.name for t in traces] == ["trace_step000003.json.gz"]  # steps 2 and 3 active
    with gzip.open(traces[0], "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"loader_next", "step", "train 2", "train 3"} <= names  # TF's step markers
    steps = {e["args"]["step_num"] for e in events if e.get("name", "").startswith("train ")}
    assert steps == {"2", "3"}
    scopes = {
        e["args"]["long_name"].split("/", 1)[0]
        for e in events
        if isinstance(e.get("args"), dict) and "long_name" in e["args"]
    }
    # inside the tf.function: ops carry the name scopes; gradients sit under gradient_tape/
    assert {"forward", "loss", "optimizer_step", "gradient_tape"} <= scopes
    assert set(SECTIONS) - {"loader_first", "backward"} <= names | scopes
    assert list((tmp_path / "profile").glob("cycle0/plugins/profile/*/*.xplane.pb"))


def test_each_profiler_cycle_leaves_xprofs_op_table_beside_its_trace(tmp_path: Path) -> None:
    cfg = _cfg(epochs=2, profile=True)
    cfg["profile"]["schedule"]["repeat"] = 2  # active steps 2-3 and 5-6
    tf_run(cfg, tmp_path, tf_toy.make_job)
    stems = ["trace_step000003", "trace_step000006"]
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == sorted(
        [f"{s}.json.gz" for s in stems] + [f"{s}{PROFILER_TABLE}" for s in stems]
    )
    for stem in stems:
        with (tmp_path / "traces" / f"{stem}{PROFILER_TABLE}").open(newline="") as f:
            rows = list(csv.DictReader(f))
        ops = {r["Operation Name"]: r for r in rows}
        assert {"Operation Type", "#Occurrences", "Total self-time (us)"} <= set(rows[0])
        # Each op of the forward pass, once per step of this cycle's two (not four).
        forward = [float(r["#Occurrences"]) for name, r in ops.items() if name[:8] == "forward/"]
        assert forward and set(forward) == {2}
        scopes = {name.split("/", 1)[0] for name in ops}
        assert {"forward", "loss", "gradient_tape", "optimizer_step"} <= scopes


def test_fp16_runs_with_loss_scaling_and_bf16_keeps_fp32_weights(tmp_path: Path) -> None:
    for precision in ("fp16", "bf16"):
        work = tmp_path / precision
        facts = tf_run(_cfg(epochs=1, precision=precision), work, tf_toy.make_job)
        assert facts["precision"] == precision
        assert all(np.isfinite(float(r["loss"])) for r in _log(work))


TWO_WORKERS = """
import json, os, sys
from pathlib import Path
from accelpipe.launch import tf_launch
from tests.helpers import tf_toy
from tests.helpers.fake_power import rapl_energy, set_rapl_energy, write_rapl_zone
out, mode = Path(sys.argv[1]), (sys.argv[2:] or ["plain"])[0]
train = {"epochs": 2, "lr": 0.05, "seed": 3, "batch_size": 4, "devices": 2, "deterministic": True}
cfg = {"backend": "cpu", "train": train, "profile": {"enabled": False}}
if "TF_CONFIG" in os.environ:  # a launched worker (TF_CONFIG set by the launcher): train
    from tests.helpers.settings import tf_run
    index = tf_launch.cluster()[0]
    if mode == "slow" and index == 1:  # worker 1 lingers after each checkpoint
        import time
        import tensorflow as tf
        save = tf.train.CheckpointManager.save
        def slow_save(self, *args, **kwargs):
            path = save(self, *args, **kwargs)
            time.sleep(1.5)
            (out / "worker1_saved").write_text(repr(time.time()))
            return path
        tf.train.CheckpointManager.save = slow_save
    if mode == "bad_data" and index == 1:  # worker 1's data fails a check at its 2nd batch
        from accelpipe.core.errors import DataError
        from accelpipe.engines import tf_trainer
        next_batch = tf_trainer._next_batch
        def failing(batches, epoch, i):
            if i == 1:
                raise DataError("worker 1: a bad record")
            return next_batch(batches, epoch, i)
        tf_trainer._next_batch = failing
    facts = tf_run(cfg, out, tf_toy.make_job)
    (out / f"facts{index}.json").write_text(json.dumps(facts))
    (out / f"returned{index}").write_text(repr(__import__("time").time()))
else:  # the launcher, with this script as the workers' command instead of the CLI
    from tests.helpers.settings import tf_train
    tf_launch.worker_command = lambda argv: [sys.executable, __file__, str(out), mode]
    tf_launch.launch_training(tf_train(**train), [], 2)
"""


def test_two_workers_train_like_one_process_on_the_same_global_batches(tmp_path: Path) -> None:
    """MultiWorkerMirroredStrategy over 2 local processes: each reads its own half of every
    global batch; gradients averaged, so the weights end where one process's do."""
    one, two = tmp_path / "one", tmp_path / "two"
    tf_run(_cfg(epochs=2), one, tf_toy.make_job)
    two.mkdir()
    script = tmp_path / "two_workers.py"
    script.write_text(TWO_WORKERS)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'workflow'}{os.pathsep}{REPO}"}
    subprocess.run([sys.executable, str(script), str(two)], env=env, check=True)
    facts = json.loads((two / "facts0.json").read_text())
    assert facts["world_size"] == 2 and facts["global_batch"] == 4
    assert json.loads((two / "facts1.json").read_text()) is None  # only the chief reports
    assert [r["step"] for r in _log(two)] == [r["step"] for r in _log(one)]
    for a, b in zip(_weights(one), _weights(two), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not list(two.glob(".checkpoints-worker*"))  # the other worker's scratch copy


@pytest.mark.main_suite_only
def test_the_chief_returns_only_after_every_worker_wrote_its_last_checkpoint(
    tmp_path: Path,
) -> None:
    """Once the chief returns, the train stage moves the work directory and drops the
    checkpoints: a worker still writing its own there failed once under Slurm."""
    script = tmp_path / "two_workers.py"
    script.write_text(TWO_WORKERS)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'workflow'}{os.pathsep}{REPO}"}
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([sys.executable, str(script), str(out), "slow"], env=env, check=True)
    chief_returned = float((out / "returned0").read_text())
    assert chief_returned >= float((out / "worker1_saved").read_text())


@pytest.mark.main_suite_only
def test_a_worker_failing_stops_the_launch_while_the_chief_waits_in_a_collective(
    tmp_path: Path,
) -> None:
    """Worker 1 stops at its 2nd batch while the chief waits for it in the all-reduce: the
    launch fails with worker 1's message and no worker finishes."""
    script = tmp_path / "two_workers.py"
    script.write_text(TWO_WORKERS)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'workflow'}{os.pathsep}{REPO}"}
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, str(script), str(out), "bad_data"], env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "worker 1: a bad record" in proc.stderr
    assert not list(out.glob("returned*"))  # neither worker finished training


def test_a_resumed_run_keeps_the_trace_of_each_attempt(tmp_path: Path) -> None:
    """Both attempts end mid-cycle (cycles of 4 steps: 1-4, 5-8): each trace is named by the
    run's step it ends at, not one name for every run ending mid-cycle (which the resumed
    attempt's trace overwrote)."""
    cfg = _cfg(epochs=1, profile=True)
    cfg["profile"]["schedule"] = {"wait": 0, "warmup": 0, "active": 4, "repeat": 0}
    tf_run(cfg, tmp_path, tf_toy.make_job)  # steps 1-3
    tf_run(cfg | {"train": cfg["train"] | {"epochs": 2}}, tmp_path, tf_toy.make_job)  # 4-6
    traces = sorted(p.name for p in (tmp_path / "traces").glob("*.json.gz"))
    assert traces == ["trace_step000003.json.gz", "trace_step000006.json.gz"]
    recorded = json.loads((tmp_path / "attempts.json").read_text())["attempts"]
    assert [a["resumed_from_step"] for a in recorded] == [None, 3]


def test_the_tensorflow_steps_and_trainer_are_what_the_run_sequence_calls(tmp_path: Path) -> None:
    """mypy holds TFRun to run_sequence.EngineRun; here its trainer's answers to the sequence."""
    assert isinstance(TFRun(tf_toy.make_job), run_sequence.EngineRun)
    device = tf_device.resolve("cpu")
    job = tf_toy.make_job(tf_train(lr=0.05, batch_size=4), device)
    trainer = TFTrainer(job, device, tf_train(compile=True), PROFILE_OFF, tmp_path)
    assert isinstance(trainer, run_sequence.Trainer)
    assert (trainer.step, trainer.compiled, trainer.global_batch) == (0, True, 4)
    assert trainer.job_facts() == job.facts  # no evaluations inside training: nothing added
