"""The train stage's own logic: the arguments its workers get, and where it resumes from."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accelpipe import cli
from accelpipe.config.settings import TrainSlice
from accelpipe.stages import train
from tests.helpers.brats_data import tiny_prepared


def test_worker_argv_is_the_train_stage_without_global_options() -> None:
    parser = cli.build_parser()
    stage = [
        *("train", "--workload", "unet2d", "--run", "fold1", "--prepared", "p"),
        *("--config-json", '{"train": {}}', "--out", "o", "--threads", "3"),
    ]
    args = parser.parse_args(["--log", "l", "--accel", "2", *stage])
    worker = train.worker_argv(args)
    assert worker == stage
    again = vars(parser.parse_args(worker))
    for name in ("log", "accel", "framework"):  # the launching process keeps these
        again.pop(name), vars(args).pop(name)
    assert again == vars(args)


def test_the_workers_get_the_starting_weights_folder() -> None:
    """A run that starts from pretrained weights: every launched worker loads them."""
    parser = cli.build_parser()
    stage = [
        *("train", "--workload", "ssd", "--run", "fp32", "--prepared", "p"),
        *("--config-json", '{"train": {}}', "--out", "o", "--threads", "3"),
        "--weights=data/weights/resnet34-mlperf",
    ]
    worker = train.worker_argv(parser.parse_args(["--accel", "2", *stage]))
    assert worker == stage
    assert parser.parse_args(worker).weights == "data/weights/resnet34-mlperf"


def test_resume_dir_does_not_depend_on_the_number_of_processes(tmp_path: Path) -> None:
    def resume_dir(settings: dict) -> Path:
        args = argparse.Namespace(
            config_json=json.dumps({"train": settings}),
            workload="unet2d",
            run="fold0",
            prepared=str(tmp_path),
        )
        return train.resume_dir(tmp_path / "train", args)

    base = resume_dir({"lr": 0.01})
    assert resume_dir({"lr": 0.01, "devices": 4, "nodes": 2}) == base
    assert resume_dir({"lr": 0.02}) != base


def test_resume_dir_changes_with_the_workloads_split_files_only(tmp_path: Path) -> None:
    """The registry names the files that define a workload's split: a new split starts afresh."""

    def resume_dir(workload: str) -> Path:
        args = argparse.Namespace(
            config_json='{"train": {}}', workload=workload, run="r", prepared=str(tmp_path)
        )
        return train.resume_dir(tmp_path / "train", args)

    (tmp_path / "folds.json").write_text('{"fold0": [1]}')
    (tmp_path / "classes.json").write_text('["a"]')
    unet2d, resnet50 = resume_dir("unet2d"), resume_dir("resnet50")
    (tmp_path / "folds.json").write_text('{"fold0": [2]}')
    assert resume_dir("unet2d") != unet2d
    assert resume_dir("resnet50") == resnet50


# ----------------------------------------------------------------------------- failed attempts


def _train_argv(tmp_path: Path, prepared: Path, **train: object) -> list[str]:
    from accelpipe.config.schema import validate
    from accelpipe.plan import stage_config

    config = validate({"unet2d": {"train": train}})
    cfg = json.dumps(stage_config.train(config, "unet2d", "fold0"))
    return [
        *("train", "--workload", "unet2d", "--run", "fold0", "--prepared", str(prepared)),
        *("--config-json", cfg, "--out", str(tmp_path / "train")),
    ]


def _work_dir(argv: list[str]) -> Path:
    args = cli.build_parser().parse_args(argv)
    return train.resume_dir(Path(args.out), args)


def test_a_failed_attempt_without_a_checkpoint_leaves_nothing(tmp_path: Path) -> None:
    """It used to leave an empty .train-partial-* folder beside the output."""
    argv = _train_argv(tmp_path, tmp_path / "missing")  # fails once the work dir is made
    assert cli.main(argv) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_failed_attempt_keeps_the_checkpoint_it_would_resume_from(tmp_path: Path) -> None:
    argv = _train_argv(tmp_path, tmp_path / "missing")
    work_dir = _work_dir(argv)
    work_dir.mkdir()
    (work_dir / "checkpoint.pt").write_bytes(b"epoch 3")
    (work_dir / "train_log.csv").write_text("step\n1\n")
    assert cli.main(argv) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [work_dir.name]
    assert (work_dir / "checkpoint.pt").read_bytes() == b"epoch 3"


def test_an_empty_checkpoint_folder_is_nothing_to_resume(tmp_path: Path) -> None:
    work_dir = tmp_path / ".train-partial-x"
    (work_dir / "checkpoints").mkdir(parents=True)
    assert not train._resumable(work_dir, ("checkpoints",))
    (work_dir / "checkpoints" / "checkpoint").write_text("model_checkpoint_path")
    assert train._resumable(work_dir, ("checkpoints",))


def test_failed_launched_workers_leave_nothing_but_resume_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launching process tidies up after its workers, which share the work dir."""
    from accelpipe.engines import torch_trainer

    argv = _train_argv(tmp_path, tmp_path, devices=2, batch_size=4)
    work_dir = _work_dir(argv)

    def failing_workers(*args: object) -> None:
        (work_dir / "traces").mkdir(parents=True)  # a first epoch's leftovers, no checkpoint
        raise SystemExit(1)

    monkeypatch.setattr(torch_trainer, "launch_training", failing_workers)
    with pytest.raises(SystemExit):
        cli.main(argv)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_train_job_gets_the_evaluate_settings_left_out_of_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30 item 15: the slice (Snakemake's params) has no evaluation batch size; the job
    evaluating inside training still scores with the configured one, from the environment the
    workflow sets (rules/common.smk)."""
    from accelpipe.config.runtime import EVAL_SETTINGS_ENV
    from accelpipe.engines import torch_trainer
    from accelpipe.workloads import base as workloads

    argv = _train_argv(tmp_path, tmp_path, eval_every=1)
    assert "batch_size" not in json.loads(argv[argv.index("--config-json") + 1])["evaluate"]
    seen: list[dict] = []

    class Recorder:
        def train(
            self, prepared: Path, run: str, cfg: TrainSlice, work_dir: Path, weights: Path | None
        ) -> None:
            seen.append(cfg)  # as a rank other than 0: nothing to publish

    monkeypatch.setattr(workloads, "get", lambda name: Recorder())
    monkeypatch.setattr(torch_trainer, "limit_threads", lambda n: None)
    monkeypatch.setenv(EVAL_SETTINGS_ENV, json.dumps({"unet2d": {"batch_size": 3}}))
    assert cli.main(argv) == 0
    assert seen[0]["evaluate"]["batch_size"] == 3


# ------------------------------------------------------------------ a killed and resumed run

REPO = Path(__file__).resolve().parents[3]
DEADLINE_S = 300.0  # generous: the machine may be busy; nothing here is about speed


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_prepared(tmp_path_factory.mktemp("brats"))


def _evaluating_config() -> dict:
    """A tiny unet2d run evaluating after every epoch against a target its first evaluation
    reaches, profiling steps 2-3 of each attempt's profiler."""
    from accelpipe.config.schema import validate

    return validate(
        {
            "performance": {"warmup_steps": 0},
            "unet2d": {
                "model": {"filters": [8, 16, 32], "strides": [1, 2, 2], "deep_supr_num": 1},
                "train": {"epochs": 12, "steps_per_epoch": 3, "batch_size": 4, "eval_every": 1},
                "target": 0.001,  # the schema wants more than 0
                "profile": {"schedule": {"wait": 0, "warmup": 1, "active": 2, "repeat": 1}},
            },
        }
    )


def _poll(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S:.0f} s: {what}")
        time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies waiting for a reaper do not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone while listed
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_a_killed_and_resumed_run_is_timed_logged_and_traced_over_both_attempts(
    prepared: Path, tmp_path: Path
) -> None:
    """Issue 30 items 11 and 10: SIGKILL after the first checkpoint, then the rerun. Time to
    train counts both attempts (it counted the last one alone, below the time to target),
    each attempt is listed, the resume is logged, the killed attempt's log is kept, and each
    attempt's profiler trace is kept under its own name."""
    from accelpipe.performance.report import run_performance
    from accelpipe.plan import stage_config

    config = _evaluating_config()
    log = tmp_path / "train.log"
    cmd = [
        *(sys.executable, "-m", "accelpipe", "--log", str(log), "train"),
        *("--workload", "unet2d", "--run", "fold0", "--prepared", str(prepared)),
        *("--config-json", json.dumps(stage_config.train(config, "unet2d", "fold0"))),
        *("--out", str(tmp_path / "train"), "--threads", "2"),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    # Its own process group, killed whole as Slurm kills a job step: a loader worker that
    # outlived the trainer would still write to the log it inherited.
    first = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        _poll(
            lambda: first.poll() is not None or list(tmp_path.glob(".*/checkpoint.pt")),
            "the first checkpoint",
        )
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL, log.read_text()
    _poll(lambda: not _group_alive(first.pid), "the killed run's processes gone")
    killed_log = log.read_text()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr

    out = tmp_path / "train"
    stage = json.loads((out / "stage.json").read_text())
    attempts = stage["attempts"]
    resumed = stage["resumed_from_step"]
    assert resumed > 0 and resumed % 3 == 0  # an epoch's checkpoint
    assert [(a["attempt"], a["status"], a["resumed_from_step"]) for a in attempts] == [
        (1, "interrupted", None),
        (2, "finished", resumed),
    ]
    assert all(a["seconds"] > 0 for a in attempts)
    assert stage["seconds"] == pytest.approx(sum(a["seconds"] for a in attempts), abs=1e-3)

    publish = stage_config.publish(config, "unet2d", "fold0")
    figures = run_performance({"train": out}, publish, "unet2d", "fold0")
    assert figures["attempts"] == attempts
    assert figures["time_to_train_s"] == stage["seconds"]
    assert figures["time_to_target_s"] is not None
    assert figures["time_to_train_s"] >= figures["time_to_target_s"]
    assert figures["stage_throughput"]["seconds"] == stage["seconds"]
    assert figures["stage_throughput"]["samples"] == 12 * 3 * 4  # every step of the run

    assert (tmp_path / "train.attempt1.log").read_text() == killed_log
    assert not list(out.glob("attempt*.log"))  # the work dir's link to the log stays out
    assert f"resuming from step {resumed}, attempt 2" in log.read_text()
    traces = sorted(p.name for p in (out / "traces").glob("*.json.gz"))
    assert traces == ["trace_step000003.json.gz", f"trace_step{resumed + 3:06d}.json.gz"]


def test_the_launching_process_publishes_rank_0s_work_once_every_rank_succeeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranks never publish (a rank outliving a killed launcher used to); the launcher does,
    with the resume state dropped and the attempts in stage.json."""
    from accelpipe.engines import torch_trainer

    argv = _train_argv(tmp_path, tmp_path, devices=2, batch_size=4)
    work_dir = _work_dir(argv)
    running = {"attempt": 1, "started": "t", "seconds": 5.0, "resumed_from_step": None}

    def ranks(*args: object) -> None:
        work_dir.mkdir(parents=True)
        (work_dir / "checkpoint.pt").write_bytes(b"resume state")
        (work_dir / "attempts.json").write_text(json.dumps({"attempts": [running]}))
        (work_dir / "stage.json").write_text(json.dumps({"stage": "train", "seconds": 4.0}))

    monkeypatch.setattr(torch_trainer, "launch_training", ranks)
    assert cli.main(argv) == 0
    out = tmp_path / "train"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]
    assert sorted(p.name for p in out.iterdir()) == ["stage.json"]
    stage = json.loads((out / "stage.json").read_text())
    (attempt,) = stage["attempts"]
    assert attempt["status"] == "finished" and attempt["seconds"] >= 5.0
    assert stage["seconds"] == attempt["seconds"]


def test_a_fresh_run_links_its_log_and_drops_the_attempt_logs_of_an_older_run(
    tmp_path: Path,
) -> None:
    log = tmp_path / "logs" / "train.log"
    args = cli.build_parser().parse_args(
        ["--log", str(log), *_train_argv(tmp_path, tmp_path / "prepared")]
    )
    cli.check_config_json(args)
    log.parent.mkdir()
    stale = log.with_name("train.attempt1.log")
    stale.write_text("an older run's interrupted attempt")
    assert train.before_log(args) is None
    assert not stale.exists()
    # Snakemake deletes the log before a rerun: the link in the work dir keeps it
    assert (train.resume_dir(Path(args.out), args) / "attempt1.log").samefile(log)


# ------------------------------------------------------- the slice, read once per process


def _count_slice_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts, in this process, the parses of a config slice (config.schema.load_slice), its
    checks against the slice schema (validate_slice) and the typed views of its train and
    profile blocks, wherever the package imported those functions from."""
    from accelpipe.config import schema, settings

    counts: Counter[str] = Counter()

    def counting(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if name != "view":
                counts[name] += 1
            elif args[0] is settings.ProfileSettings:
                counts["profile view"] += 1
            elif issubclass(args[0], settings.TrainSettings):
                counts["train view"] += 1
            return function(*args, **kwargs)

        return counted

    for module, name in ((schema, "load_slice"), (schema, "validate_slice"), (settings, "view")):
        original = getattr(module, name)
        wrapper = counting(name, original)
        for loaded in list(sys.modules.values()):  # where the name was imported already
            if (  # None: a module marked absent (accelpipe/__init__.py)
                loaded is not None
                and loaded.__name__.startswith("accelpipe")
                and getattr(loaded, name, None) is original
            ):
                monkeypatch.setattr(loaded, name, wrapper)
    return counts


ONCE = {"load_slice": 1, "validate_slice": 1, "train view": 1, "profile view": 1}


def test_a_train_process_reads_its_slice_once_down_to_the_engine(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32 item 3: the CLI parses and checks the slice, the stage views it once, and the
    workload and the engine train from that one value (before: 5 parses, 2 checks, the
    train block viewed twice and the profile block once more in the engine)."""
    from accelpipe.config.schema import validate
    from accelpipe.engines import torch_trainer
    from accelpipe.plan import stage_config

    config = validate(
        {
            "unet2d": {
                "model": {"filters": [8, 16, 32], "strides": [1, 2, 2], "deep_supr_num": 1},
                "train": {"epochs": 1, "steps_per_epoch": 1, "batch_size": 2, "eval_every": 0},
                "profile": {"enabled": False},
            },
        }
    )
    argv = [
        *("--log", str(tmp_path / "train.log"), "train", "--workload", "unet2d"),
        *("--run", "fold0", "--prepared", str(prepared), "--out", str(tmp_path / "train")),
        *("--config-json", json.dumps(stage_config.train(config, "unet2d", "fold0"))),
    ]
    monkeypatch.setattr(torch_trainer, "limit_threads", lambda n: None)
    counts = _count_slice_reads(monkeypatch)
    assert cli.main(argv) == 0
    assert json.loads((tmp_path / "train" / "stage.json").read_text())["steps"] == 1
    assert counts == ONCE


def test_the_launcher_and_each_worker_read_the_slice_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launched worker is a process of its own: it reads the slice the launcher checked,
    once, as the launcher did; its workload gets the typed value."""
    from accelpipe.engines import torch_trainer
    from accelpipe.workloads import base as workloads

    argv = _train_argv(tmp_path, tmp_path, devices=2, batch_size=4)
    counts = _count_slice_reads(monkeypatch)
    per_process: list[Counter[str]] = []
    seen: list[TrainSlice] = []

    class Recorder:
        def train(
            self, prepared: Path, run: str, cfg: TrainSlice, work_dir: Path, weights: Path | None
        ) -> None:
            seen.append(cfg)  # as a rank other than 0: nothing to publish

    def launch(train_cfg: object, stage_argv: list[str], threads: int) -> None:
        per_process.append(Counter(counts))  # the launcher's
        counts.clear()
        with monkeypatch.context() as worker:  # torchrun's variables: "I am a worker"
            worker.setenv("LOCAL_RANK", "0")
            worker.setenv("TORCHELASTIC_RUN_ID", "test")
            assert cli.main(stage_argv) == 0
        per_process.append(Counter(counts))
        raise SystemExit(1)  # rank 0 wrote nothing to publish

    monkeypatch.setattr(workloads, "get", lambda name: Recorder())
    monkeypatch.setattr(torch_trainer, "limit_threads", lambda n: None)
    monkeypatch.setattr(torch_trainer, "launch_training", launch)
    with pytest.raises(SystemExit):
        cli.main(argv)
    assert per_process == [ONCE, ONCE]
    (cfg,) = seen
    assert (cfg.backend, cfg.train.devices, type(cfg.train).__name__) == ("cpu", 2, "UNet2DTrain")


def test_the_backend_comes_from_the_slice_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The devices a train stage leases are those of the backend its slice names (the config
    Snakemake validated), which the engine trains on; ACCELPIPE_RUNTIME's says where stages
    without one run, never a second answer for this one."""
    import contextlib

    from accelpipe.config.runtime import RUNTIME_ENV
    from accelpipe.core import leases
    from accelpipe.engines import torch_trainer
    from accelpipe.workloads import base as workloads

    leased_for: list[str] = []
    trained_on: list[str] = []

    class Recorder:
        def train(
            self, prepared: Path, run: str, cfg: TrainSlice, work_dir: Path, weights: Path | None
        ) -> None:
            trained_on.append(cfg["backend"])  # the slice's, as the engine reads it

    def resolve_pool(backend: str, pool: list[str] | None) -> list[str]:
        leased_for.append(backend)
        return ["0"]

    monkeypatch.setattr(leases, "resolve_pool", resolve_pool)
    monkeypatch.setattr(leases, "lease", lambda *a, **k: contextlib.nullcontext(["0"]))
    monkeypatch.setattr(workloads, "get", lambda name: Recorder())
    monkeypatch.setattr(torch_trainer, "limit_threads", lambda n: None)
    runtime = {"runtime": "local", "backend": "cuda", "pool": None}
    monkeypatch.setenv(RUNTIME_ENV, json.dumps({"pytorch": runtime}))
    argv = ["--framework", "pytorch", "--accel", "1", *_train_argv(tmp_path, tmp_path)]
    assert cli.main(argv) == 0
    assert leased_for == trained_on == ["cpu"]
