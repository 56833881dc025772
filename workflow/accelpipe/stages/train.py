"""`train`: one run in this process, or launched workers (one per device) running `run_train`."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from accelpipe import engines
from accelpipe.config import registry
from accelpipe.config.runtime import with_eval_settings
from accelpipe.config.schema import stage_slice
from accelpipe.config.settings import TrainSettings, TrainSlice
from accelpipe.config.views import train_slice
from accelpipe.core import provenance, resources
from accelpipe.core.errors import AccelpipeError, ConfigError
from accelpipe.core.io import read_json, write_json
from accelpipe.devices import host
from accelpipe.engines import attempts
from accelpipe.launch import lifeline, workers
from accelpipe.plan import capacity
from accelpipe.workloads import base as workloads


def resume_dir(out: Path, args: argparse.Namespace) -> Path:
    """Progress lives beside the output, keyed by everything that defines the run.

    A changed config or dataset gets a fresh directory instead of resuming a stale run. The
    number of processes (train.devices, train.nodes) is not part of the key: checkpoints load
    into any world size, so a job may resume on fewer or more devices.
    """
    parsed = stage_slice(args)
    train = {k: v for k, v in parsed["train"].items() if k not in ("devices", "nodes")}
    cfg = parsed | {"train": train}
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
    weights = getattr(args, "weights", "")
    return [
        "train",
        *("--workload", args.workload, "--run", args.run, "--prepared", args.prepared),
        *("--config-json", args.config_json, "--out", args.out, "--threads", str(args.threads)),
        *((f"--weights={weights}",) if weights else ()),
    ]


def _check_launch(args: argparse.Namespace, cfg: TrainSettings) -> None:
    """User errors a launch would only meet inside the workers: report them here, status 2."""
    world = cfg.devices * cfg.nodes
    workers.check_global_batch(cfg.batch_size, world, f"{args.workload}.train.batch_size")
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


# In the work dir: a hard link to the rule log of attempt n, so that the log outlives the
# rule's (Snakemake deletes a job's log before running it again).
ATTEMPT_LOG = re.compile(r"attempt(\d+)\.log")


def before_log(args: argparse.Namespace) -> str | None:
    """Run by the CLI before the stage's log is opened (which empties it): the logs of earlier
    attempts of this run (hard links in its work dir) are kept beside the log as
    `<log>.attempt<n>.log`, and this attempt's log is linked into the work dir in turn (a
    fresh run drops such logs of an older run instead); what was kept, for the new log."""
    log_file = Path(args.log)
    try:
        work_dir = resume_dir(Path(args.out), args)
        recorded = len(attempts.read(work_dir))
    except (AccelpipeError, OSError, ValueError, KeyError, TypeError):
        return None  # a bad config or work dir: the stage reports it, with the log open
    earlier = _keep_earlier_logs(work_dir, log_file)
    if not earlier and not recorded:  # a fresh run: none of the logs beside are its own
        for stale in log_file.parent.glob(f"{log_file.stem}.attempt*{log_file.suffix}"):
            stale.unlink()
    number = max([recorded, *earlier]) + 1
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.touch()  # the inode the log is written to (opened with O_TRUNC, not replaced)
    work_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # another file system: that attempt's log goes with it
        os.link(log_file, work_dir / f"attempt{number}.log")
    if not earlier:
        return None
    kept = ", ".join(str(_kept_name(log_file, n)) for n in earlier)
    return f"the log of each interrupted attempt of this run is kept: {kept}"


def _kept_name(log_file: Path, number: int) -> Path:
    return log_file.with_name(f"{log_file.stem}.attempt{number}{log_file.suffix}")


def _keep_earlier_logs(work_dir: Path, log_file: Path) -> list[int]:
    """Move the attempt logs linked into `work_dir` beside `log_file`; their numbers. Where
    the log itself is still one of them (not deleted by Snakemake), its name is freed first,
    or opening it would empty the kept copy too."""
    found = sorted(
        (int(match[1]), path)
        for path in (work_dir.iterdir() if work_dir.is_dir() else ())
        if (match := ATTEMPT_LOG.fullmatch(path.name))
    )
    for number, path in found:
        if log_file.exists() and log_file.samefile(path):
            log_file.unlink()
        os.replace(path, _kept_name(log_file, number))
    return [number for number, _ in found]


def run_train(args: argparse.Namespace) -> None:
    """Train here, or launch the workers (rank 0 writes stage.json in the work dir) and,
    once every one has succeeded, publish the work dir onto --out."""
    host.mark_job_root()  # the workers' host window counts this process tree as the job's
    with workers.stage_clock() as started:
        _run_train(args, started)


def _run_train(args: argparse.Namespace, started: float) -> None:
    spec = engines.for_workload(args.workload)
    engine = engines.hooks(spec)
    # the evaluate settings outside train's key (batch size, ...) come with the job's environment
    cfg = train_slice(args.workload, with_eval_settings(stage_slice(args), args.workload))
    train_cfg = cfg.train
    if not engine.in_worker():  # once per job, before anything starts: the launcher's
        _check_memory(args)
    out = Path(args.out)
    work_dir = resume_dir(out, args)
    if train_cfg.devices * train_cfg.nodes > 1 and not engine.in_worker():
        # The launching process tidies up after its workers (they share the directory), and
        # it alone publishes: a launcher killed outright leaves no output behind it.
        with _resume_state_only(work_dir, spec.checkpoints):
            _check_launch(args, train_cfg)
            (work_dir / provenance.STAGE_FILE).unlink(missing_ok=True)  # rank 0's, to come
            engine.launch_training(train_cfg, worker_argv(args), args.threads)
            _publish(work_dir, out, spec, started)
        return
    # The node's CPUs are shared by its ranks.
    engine.limit_threads(max(1, args.threads // int(os.environ.get("LOCAL_WORLD_SIZE", 1))))
    if engine.in_worker():  # launched: it dies with the launcher, which tidies up and publishes
        lifeline.watch_launcher()
        _train_into(args, spec, cfg, started, work_dir)
        return
    with _resume_state_only(work_dir, spec.checkpoints):
        if _train_into(args, spec, cfg, started, work_dir):
            _publish(work_dir, out, spec, started)


def _check_memory(args: argparse.Namespace) -> None:
    """The preflight's memory line (plan.capacity): what the job's processes on this node
    need against what the Slurm job, the cgroup or the machine has."""
    train = stage_slice(args)["train"]
    verdict = capacity.train_memory_verdict(
        args.workload, args.run, train, Path(args.prepared).absolute(), resources.job_memory()
    )
    if verdict is not None:
        raise ConfigError(verdict)


def _train_into(
    args: argparse.Namespace,
    spec: engines.Engine,
    cfg: TrainSlice,
    started: float,
    work_dir: Path,
) -> bool:
    """Train into `work_dir`; rank 0 then writes stage.json there (and says so: True)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    # the weights stage's folder, where the run starts from pretrained weights
    weights = Path(args.weights) if getattr(args, "weights", "") else None
    facts = workloads.get(args.workload).train(
        Path(args.prepared), args.run, cfg, work_dir, weights
    )
    if facts is None:  # a rank other than 0
        return False
    packages = provenance.package_versions(provenance.PACKAGES + spec.packages)
    provenance.write_stage(
        work_dir, "train", started, workload=args.workload, run=args.run, packages=packages, **facts
    )
    return True


# How long the launcher waits to see a file rank 0 wrote on another node of a shared file
# system (NFS caches a name's absence), as Snakemake's --latency-wait does for outputs.
LATENCY_WAIT_S = 60.0


def _visible(path: Path, wait_s: float = LATENCY_WAIT_S) -> bool:
    """Whether `path` exists, waiting up to `wait_s` for it to show."""
    deadline = time.monotonic() + wait_s
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        if path.parent.is_dir():
            os.listdir(path.parent)  # reading the directory revalidates NFS's cached absence
        time.sleep(0.5)
    return True


def _publish(work_dir: Path, out: Path, spec: engines.Engine, started: float) -> None:
    """The trained `work_dir` onto `out`: stage.json's time covering every attempt (its
    `attempts`), the resume state dropped. Only the process that started the stage does
    this, once training succeeded, so no output appears after a job was reported failed."""
    stage_file = work_dir / provenance.STAGE_FILE
    if not _visible(stage_file):
        raise AccelpipeError(f"{work_dir}: training ended without rank 0's {stage_file.name}")
    record = read_json(stage_file)
    entries = attempts.finish(work_dir, time.perf_counter() - started)
    if entries:  # seconds: the stage's over every attempt, as time to train and cost count
        record |= {"seconds": attempts.total_seconds(entries), "attempts": entries}
        write_json(stage_file, record)
    for name in (*spec.checkpoints, attempts.ATTEMPTS_FILE):  # resume state
        path = work_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    for path in work_dir.iterdir():  # this attempt's log: the rule's log holds it
        if ATTEMPT_LOG.fullmatch(path.name):
            path.unlink()
    if out.exists():
        shutil.rmtree(out)
    work_dir.rename(out)
