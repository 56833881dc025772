"""The train stage's own logic: the arguments its workers get, and where it resumes from."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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
    for name in ("log", "accel", "runtime"):  # the launching process keeps these
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
            config_json="{}", workload=workload, run="r", prepared=str(tmp_path)
        )
        return train.resume_dir(tmp_path / "train", args)

    (tmp_path / "folds.json").write_text('{"fold0": [1]}')
    (tmp_path / "classes.json").write_text('["a"]')
    unet2d, resnet50 = resume_dir("unet2d"), resume_dir("resnet50")
    (tmp_path / "folds.json").write_text('{"fold0": [2]}')
    assert resume_dir("unet2d") != unet2d
    assert resume_dir("resnet50") == resnet50
