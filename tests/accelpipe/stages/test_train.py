"""The train stage's own logic: the arguments its workers get, and where it resumes from."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from accelpipe import cli
from accelpipe.stages import train


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
    from accelpipe import stage_config
    from accelpipe.config import validate

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
    from accelpipe import workloads
    from accelpipe.engines import torch_trainer
    from accelpipe.runtime import EVAL_SETTINGS_ENV

    argv = _train_argv(tmp_path, tmp_path, eval_every=1)
    assert "batch_size" not in json.loads(argv[argv.index("--config-json") + 1])["evaluate"]
    seen: list[dict] = []

    class Recorder:
        def train(self, prepared: Path, run: str, cfg: dict, work_dir: Path) -> None:
            seen.append(cfg)  # as a rank other than 0: nothing to publish

    monkeypatch.setattr(workloads, "get", lambda name: Recorder())
    monkeypatch.setattr(torch_trainer, "limit_threads", lambda n: None)
    monkeypatch.setenv(EVAL_SETTINGS_ENV, json.dumps({"unet2d": {"batch_size": 3}}))
    assert cli.main(argv) == 0
    assert seen[0]["evaluate"]["batch_size"] == 3
