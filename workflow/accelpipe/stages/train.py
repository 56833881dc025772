"""`train`: one run in this process, or launched workers (one per device) running `run_train`."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accelpipe import engines, provenance, registry, workloads
from accelpipe.config import load_slice
from accelpipe.devices import host
from accelpipe.errors import ConfigError
from accelpipe.launch import torch_launch
from accelpipe.runtime import with_eval_settings
from accelpipe.settings import TrainSettings, common_train


def resume_dir(out: Path, args: argparse.Namespace) -> Path:
    """Progress lives beside the output, keyed by everything that defines the run.

    A changed config or dataset gets a fresh directory instead of resuming a stale run. The
    number of processes (train.devices, train.nodes) is not part of the key: checkpoints load
    into any world size, so a job may resume on fewer or more devices.
    """
    cfg = load_slice(args.config_json)
    cfg["train"] = {k: v for k, v in cfg["train"].items() if k not in ("devices", "nodes")}
    key = hashlib.sha256()
    key.update(json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode())
    key.update(args.run.encode())
    for name in registry.workload(args.workload).split_files:
        path = Path(args.prepared) / name
        if path.exists():
            key.update(path.read_bytes())
    return out.parent / f".{out.name}-partial-{key.hexdigest()[:12]}"


def worker_argv(args: argparse.Namespace) -> list[str]:
    """The train stage's own arguments, as the launched processes get them.

    Global options stay with the launching process: it holds the accelerator lease (--accel)
    and the log (--log), and the workers run where it runs (--framework picks the runtime).
    Keep in step with the train parser in `cli.build_parser`.
    """
    return [
        "train",
        *("--workload", args.workload, "--run", args.run, "--prepared", args.prepared),
        *("--config-json", args.config_json, "--out", args.out, "--threads", str(args.threads)),
    ]


def _check_launch(args: argparse.Namespace, cfg: TrainSettings) -> None:
    """User errors a launch would only meet inside the workers: report them here, status 2."""
    world = cfg.devices * cfg.nodes
    torch_launch.check_global_batch(cfg.batch_size, world, f"{args.workload}.train.batch_size")
    if 0 < args.accel < cfg.devices:  # one leased device per process on this node
        raise ConfigError(
            f"config key '{args.workload}.train.devices': {cfg.devices} processes per node, but "
            f"the job leased {args.accel} accelerators"
        )


def _resumable(work_dir: Path, checkpoints: tuple[str, ...]) -> bool:
    """Whether `work_dir` holds resume state: an epoch checkpoint file, or a checkpoint
    folder with something in it."""
    for name in checkpoints:
        path = work_dir / name
        if path.is_file() or (path.is_dir() and any(path.iterdir())):
            return True
    return False


@contextlib.contextmanager
def _resume_state_only(work_dir: Path, checkpoints: tuple[str, ...]) -> Iterator[None]:
    """A failed attempt leaves its work directory only if the next one can resume from it
    (a checkpoint, with the log and traces up to it); otherwise nothing at all."""
    try:
        yield
    except BaseException:
        if not _resumable(work_dir, checkpoints):
            shutil.rmtree(work_dir, ignore_errors=True)
        raise


def run_train(args: argparse.Namespace) -> None:
    """Train here, or launch the workers; in the workers rank 0 finishes the stage
    (stage.json, renaming the work dir onto --out)."""
    host.mark_job_root()  # the workers' host window counts this process tree as the job's
    started = torch_launch.stage_started()
    spec = engines.for_workload(args.workload)
    engine = importlib.import_module(spec.module)
    # the evaluate settings outside train's key (batch size, ...) come with the job's environment
    cfg = with_eval_settings(load_slice(args.config_json), args.workload)
    train_cfg = common_train(cfg["train"])
    out = Path(args.out)
    work_dir = resume_dir(out, args)
    if train_cfg.devices * train_cfg.nodes > 1 and not engine.in_worker():
        _check_launch(args, train_cfg)
        # The launching process tidies up after its workers (they share the directory).
        with _resume_state_only(work_dir, spec.checkpoints):
            engine.launch_training(train_cfg, worker_argv(args), args.threads)
        return
    # The node's CPUs are shared by its ranks.
    engine.limit_threads(max(1, args.threads // int(os.environ.get("LOCAL_WORLD_SIZE", 1))))
    in_worker = engine.in_worker()  # launched: the launching process tidies up
    with contextlib.nullcontext() if in_worker else _resume_state_only(work_dir, spec.checkpoints):
        _train_into(args, spec, cfg, started, out, work_dir)


def _train_into(
    args: argparse.Namespace,
    spec: engines.Engine,
    cfg: dict[str, Any],
    started: float,
    out: Path,
    work_dir: Path,
) -> None:
    """Train into `work_dir`; rank 0 then writes stage.json and renames it onto `out`."""
    work_dir.mkdir(parents=True, exist_ok=True)
    facts = workloads.get(args.workload).train(Path(args.prepared), args.run, cfg, work_dir)
    if facts is None:  # a rank other than 0: rank 0 finishes the stage
        return
    for name in spec.checkpoints:  # resume state has no place in the finished output
        path = work_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    packages = provenance.package_versions(provenance.PACKAGES + spec.packages)
    provenance.write_stage(
        work_dir, "train", started, workload=args.workload, run=args.run, packages=packages, **facts
    )
    if out.exists():
        shutil.rmtree(out)
    work_dir.rename(out)
