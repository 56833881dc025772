"""`accelpipe <stage>`: the one command every Snakemake rule runs.

Each stage reads its config slice (JSON, passed by the rule's params), writes
its declared output atomically and a stage.json with timings beside the data.
User-fixable problems exit with status 2 and one line naming the file or key.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelpipe import containers, datasets, distributed, leases, provenance, workloads
from accelpipe.config import TrainConfig, load_slice, view
from accelpipe.errors import AccelpipeError, ConfigError
from accelpipe.io import atomic_path, write_json

Handler = Callable[[argparse.Namespace], None]
log = logging.getLogger("accelpipe")


def _slice(args: argparse.Namespace) -> dict[str, Any]:
    return load_slice(args.config_json)


def _write_stage(out: Path, stage: str, started: float, **facts: Any) -> None:
    write_json(out / provenance.STAGE_FILE, provenance.stage_record(stage, started, **facts))


def cmd_raw(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    module = datasets.get(args.dataset)
    with atomic_path(args.out) as tmp:
        facts = module.make_raw(_slice(args), tmp, downloads=args.downloads)
        _write_stage(tmp, "raw", started, dataset=args.dataset, **facts)


def cmd_prepare(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    module = datasets.get(args.dataset)
    # The dataset's prepare writes its output atomically itself.
    module.prepare_variant(
        args.variant, Path(args.raw), Path(args.out), _slice(args), workers=args.workers
    )
    _write_stage(Path(args.out), "prepare", started, dataset=args.dataset, variant=args.variant)


def _resume_dir(out: Path, args: argparse.Namespace) -> Path:
    """Progress lives beside the output, keyed by everything that defines the run.

    A changed config or dataset gets a fresh directory instead of resuming a stale run. The
    number of processes (train.devices, train.nodes) is not part of the key: checkpoints load
    into any world size, so a job may resume on fewer or more devices.
    """
    cfg = load_slice(args.config_json)
    if isinstance(cfg.get("train"), dict):
        cfg["train"] = {k: v for k, v in cfg["train"].items() if k not in ("devices", "nodes")}
    key = hashlib.sha256()
    key.update(json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode())
    key.update(args.run.encode())
    for name in ("config.json", "folds.json", "datalist.json", "classes.json"):  # the data split
        path = Path(args.prepared) / name
        if path.exists():
            key.update(path.read_bytes())
    return out.parent / f".{out.name}-partial-{key.hexdigest()[:12]}"


def _limit_threads(threads: int) -> None:
    """Intra-op threads: the rule's `threads`, but never more than the CPUs we may run on.

    Snakemake scales `threads` to `--cores`, which can exceed the real cores.
    """
    import torch

    torch.set_num_threads(max(1, min(threads, len(os.sched_getaffinity(0)))))


def train_worker_argv(args: argparse.Namespace) -> list[str]:
    """The train stage's own arguments, as the launched processes get them.

    Global options stay with the launching process: it holds the accelerator lease (--accel)
    and the log (--log), and the workers run where it runs (--runtime). Keep in step with the
    train parser in `build_parser`.
    """
    return [
        "train",
        *("--workload", args.workload, "--run", args.run, "--prepared", args.prepared),
        *("--config-json", args.config_json, "--out", args.out, "--threads", str(args.threads)),
    ]


def _check_launch(args: argparse.Namespace, cfg: TrainConfig) -> None:
    """User errors a launch would only meet inside the workers: report them here, status 2."""
    world = cfg.devices * cfg.nodes
    distributed.check_global_batch(cfg.batch_size, world, f"{args.workload}.train.batch_size")
    if 0 < args.accel < cfg.devices:  # one leased device per process on this node
        raise ConfigError(
            f"config key '{args.workload}.train.devices': {cfg.devices} processes per node, but "
            f"the job leased {args.accel} accelerators"
        )


def cmd_train(args: argparse.Namespace) -> None:
    """Train in this process, or start torchrun workers that each run this function.

    In the workers rank 0 finishes the stage (stage.json, renaming the work dir onto --out).
    """
    started = distributed.stage_started()
    cfg = _slice(args)
    train_cfg = view(TrainConfig, cfg.get("train", {}))
    if train_cfg.devices * train_cfg.nodes > 1 and not distributed.in_worker():
        _check_launch(args, train_cfg)
        distributed.launch_training(train_cfg, train_worker_argv(args), args.threads)
        return
    # The node's CPUs are shared by its ranks.
    _limit_threads(max(1, args.threads // int(os.environ.get("LOCAL_WORLD_SIZE", 1))))
    out = Path(args.out)
    work_dir = _resume_dir(out, args)
    work_dir.mkdir(parents=True, exist_ok=True)
    facts = workloads.get(args.workload).train(Path(args.prepared), args.run, cfg, work_dir)
    if facts is None:  # a rank other than 0: rank 0 finishes the stage
        return
    (work_dir / "checkpoint.pt").unlink(missing_ok=True)
    _write_stage(work_dir, "train", started, workload=args.workload, run=args.run, **facts)
    if out.exists():
        shutil.rmtree(out)
    work_dir.rename(out)


def cmd_evaluate(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    _limit_threads(args.threads)
    module = workloads.get(args.workload)
    with atomic_path(args.out) as tmp:
        metrics = module.evaluate(
            Path(args.prepared), args.run, _slice(args), Path(args.model), tmp
        )
        _write_stage(tmp, "evaluate", started, workload=args.workload, run=args.run)
    log.info("metrics: %s", json.dumps(metrics))


def cmd_summarize_trace(args: argparse.Namespace) -> None:
    from accelpipe import traces

    started = time.perf_counter()
    paths = sorted(
        p for p in Path(args.traces).iterdir() if p.name.endswith((".json", ".json.gz", ".zip"))
    )
    if not paths:
        raise AccelpipeError(f"{args.traces}: no trace files (*.json, *.json.gz, *.zip)")
    with atomic_path(args.out) as tmp:
        traces.write_summary(paths, tmp)
        _write_stage(tmp, "trace", started, traces=[p.name for p in paths])


def cmd_publish(args: argparse.Namespace) -> None:
    from accelpipe.publish import publish_run

    stage_dirs = {
        "raw": Path(args.raw),
        "prepare": Path(args.prepared),
        "train": Path(args.model),
        "evaluate": Path(args.eval),
        "trace": Path(args.trace),
    }
    publish_run(stage_dirs, _slice(args), Path(args.out))


def cmd_aggregate(args: argparse.Namespace) -> None:
    from accelpipe.publish import aggregate_folds

    summary = aggregate_folds([Path(r) for r in args.runs], Path(args.out))
    log.info("cross-validation mean: %s", json.dumps(summary["mean"]))


def cmd_images(args: argparse.Namespace) -> None:
    """`images tag` prints the image reference; `images build` builds it via the Engine API."""
    spec = containers.spec_for(args.backend, args.framework)
    ref = containers.image_ref(spec, args.registry)
    if args.action == "tag":
        print(ref)
        return
    engine = containers.client(args.docker_host)
    pip_args = "--no-index" if args.offline else ""
    containers.build(spec, ref, engine, base_image=args.base_image, pip_extra_args=pip_args)
    if args.out:
        write_json(Path(args.out), {"image": ref, "backend": args.backend})


def _add(
    sub: argparse._SubParsersAction,
    name: str,
    handler: Handler,
    help_: str,
    *options: tuple[str, str],
) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_)
    for flag, text in options:
        parser.add_argument(flag, required=True, help=text)
    parser.set_defaults(handler=handler)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accelpipe", description=__doc__.splitlines()[0])
    parser.add_argument("--log", help="log file (the rule's log); errors also go to stderr")
    parser.add_argument(
        "--runtime",
        default='{"runtime":"local"}',
        help="JSON: where the stage runs (local, or docker with its image); set by the rules",
    )
    parser.add_argument("--accel", type=int, default=0, help="accelerators to lease for the stage")
    sub = parser.add_subparsers(dest="stage", required=True, metavar="<stage>")
    cfg = ("--config-json", "the rule's config slice as JSON")
    _add(
        sub,
        "raw",
        cmd_raw,
        "fetch, synthesize or link a raw dataset",
        ("--dataset", "dataset name"),
        cfg,
        ("--out", "raw dataset folder"),
        ("--downloads", "folder for partial and finished downloads (kept between runs)"),
    )
    prepare = _add(
        sub,
        "prepare",
        cmd_prepare,
        "preprocess a raw dataset",
        ("--dataset", "dataset name"),
        ("--variant", "prepared variant, e.g. 2d"),
        ("--raw", "raw dataset folder"),
        cfg,
        ("--out", "prepared folder"),
    )
    prepare.add_argument("--workers", type=int, default=1, help="parallel processes (cases)")
    run = (("--workload", "workload name"), ("--run", "run name, e.g. fold0"))
    train = _add(
        sub,
        "train",
        cmd_train,
        "train one run",
        *run,
        ("--prepared", "prepared data"),
        cfg,
        ("--out", "train output folder"),
    )
    evaluate = _add(
        sub,
        "evaluate",
        cmd_evaluate,
        "evaluate a trained run",
        *run,
        ("--prepared", "prepared data"),
        ("--model", "train output folder"),
        cfg,
        ("--out", "evaluation output folder"),
    )
    for torch_stage in (train, evaluate):
        torch_stage.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
    _add(
        sub,
        "summarize-trace",
        cmd_summarize_trace,
        "summarize profiler traces",
        ("--traces", "folder of chrome traces"),
        ("--out", "summary folder"),
    )
    _add(
        sub,
        "publish",
        cmd_publish,
        "assemble results/<workload>/<run>",
        ("--raw", "raw stage output"),
        ("--prepared", "prepare stage output"),
        ("--model", "train stage output"),
        ("--eval", "evaluate stage output"),
        ("--trace", "trace stage output"),
        cfg,
        ("--out", "result folder"),
    )
    aggregate = _add(
        sub,
        "aggregate",
        cmd_aggregate,
        "aggregate cross-validation folds",
        ("--out", "aggregate folder"),
    )
    aggregate.add_argument("--runs", nargs="+", required=True, help="published fold folders")
    images = sub.add_parser("images", help="tag or build the container image of a backend")
    images.add_argument("action", choices=("tag", "build"))
    images.add_argument("--backend", required=True, help="cpu, cuda, rocm or gaudi")
    images.add_argument("--framework", default="pytorch")
    images.add_argument("--registry", default="localhost", help="image name prefix")
    images.add_argument("--base-image", default=None, help="override the Dockerfile's BASE_IMAGE")
    images.add_argument(
        "--offline", action="store_true", help="pip --no-index: docker/wheelhouse only"
    )
    images.add_argument("--docker-host", default=None, help="Engine API URL (default DOCKER_HOST)")
    images.add_argument("--out", default=None, help="marker file written after a successful build")
    images.set_defaults(handler=cmd_images)
    return parser


def setup_logging(log_file: str | None, capture_stderr: bool = False) -> None:
    """Everything to the log file (or stderr); errors always to the console as well.

    With `capture_stderr` (the real command, not tests calling `main`), file descriptor 2
    also goes to the log: C++ output (kineto's profiler lines), warnings and tracebacks belong
    to the rule's log, not the console; a duplicate of the real stderr keeps the one-line
    error message visible.
    """
    console_stream = sys.stderr
    file_mode = "w"
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        if capture_stderr:
            console_stream = os.fdopen(os.dup(2), "w", buffering=1)
            fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            os.dup2(fd, 2)
            os.close(fd)
            file_mode = "a"  # both writers append to the one file
    console = logging.StreamHandler(console_stream)
    handlers: list[logging.Handler] = [console]
    if log_file:
        handlers.append(logging.FileHandler(log_file, mode=file_mode))
        console.setLevel(logging.ERROR)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,  # replace handlers of an earlier call (tests call main() repeatedly)
    )


def stage_argv(argv: list[str]) -> list[str]:
    """`argv` from the stage name on: what runs inside a container (global options dropped)."""
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        i += 1 if "=" in argv[i] else 2
    return argv[i:]


def run_stage(args: argparse.Namespace, argv: list[str]) -> int:
    """Lease accelerators, then run the stage here or in its container."""
    runtime = load_slice(args.runtime)
    backend = runtime.get("backend", "cpu")
    # Inside a Slurm job the scheduler already allocated the devices (gres/gpus) and set
    # the visibility variables: leasing again from a node-wide pool would fight it.
    accel = 0 if "SLURM_JOB_ID" in os.environ else args.accel
    pool = leases.resolve_pool(backend, runtime.get("pool")) if accel else []
    with leases.lease(accel, pool, leases.default_lock_dir()) as devices:
        if devices:
            log.info("leased %s devices %s", backend, ",".join(devices))
        if runtime["runtime"] != "docker":
            os.environ.update(leases.visibility_env(backend, devices))
            args.handler(args)
            return 0
        engine = containers.client(runtime.get("docker_host"))
        return containers.run(
            engine,
            runtime["image"],
            ["accelpipe", *stage_argv(argv)],
            workdir=Path.cwd(),
            mounts=[Path(m) for m in runtime.get("mounts", [])],
            backend=backend,
            devices=devices,
            env_names=runtime.get("env", []),
            log_file=Path(args.log) if args.log else None,
        )


def main(argv: list[str] | None = None) -> int:
    capture_stderr = argv is None  # the console command, not a test calling main()
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    setup_logging(args.log, capture_stderr)
    try:
        return run_stage(args, argv)
    except AccelpipeError as err:
        log.error("accelpipe %s: %s", args.stage, err)
        return 2


if __name__ == "__main__":
    sys.exit(main())
