"""`accelpipe <stage>`: the one command every Snakemake rule runs.

Each stage reads its config slice (JSON, passed by the rule's params), writes
its declared output atomically and a stage.json with timings beside the data.
User-fixable problems exit with status 2 and one line naming the file or key.
`accelpipe targets` and `accelpipe runs` are for a person: what the config can build,
and the finished runs' headline numbers. Every stage's --help ends with an example.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from accelpipe import stages
from accelpipe.config import registry
from accelpipe.config.runtime import lease_wait_s, read_runtime
from accelpipe.config.schema import load_slice, slice_schema, validate_slice
from accelpipe.core import containers, leases
from accelpipe.core.errors import AccelpipeError
from accelpipe.core.io import no_space_error
from accelpipe.core.redact import RedactingFilter
from accelpipe.plan import images
from accelpipe.stages import examples

Handler = Callable[[argparse.Namespace], None]

log = logging.getLogger("accelpipe")


def handler_for(stage: str) -> Handler:
    """`run_<stage>` of the stage's module, imported only now: a stage loads its own code."""
    module = importlib.import_module(stages.MODULES[stage])
    return getattr(module, "run_" + stage.replace("-", "_"))


def _parser(sub: argparse._SubParsersAction, name: str, help_: str) -> argparse.ArgumentParser:
    """A stage's sub-command, its example as the epilog of its --help."""
    return sub.add_parser(
        name,
        help=help_,
        epilog=examples.epilog(name),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _add(
    sub: argparse._SubParsersAction,
    name: str,
    help_: str,
    *options: tuple[str, str],
) -> argparse.ArgumentParser:
    parser = _parser(sub, name, help_)
    for flag, text in options:
        parser.add_argument(flag, required=True, help=text)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accelpipe", description=__doc__.splitlines()[0])
    parser.add_argument("--log", help="log file (the rule's log); errors also go to stderr")
    parser.add_argument(
        "--framework",
        default=None,
        help="the framework whose runtime in $ACCELPIPE_RUNTIME runs the stage (local, or "
        "docker with its image); set by the rules; absent: here",
    )
    parser.add_argument("--accel", type=int, default=0, help="accelerators to lease for the stage")
    sub = parser.add_subparsers(dest="stage", required=True, metavar="<stage>")
    cfg = ("--config-json", "the rule's config slice as JSON")
    _add(
        sub,
        "raw",
        "fetch, synthesize or link a raw dataset",
        ("--dataset", "dataset name"),
        cfg,
        ("--out", "raw dataset folder"),
        ("--downloads", "folder for partial and finished downloads (kept between runs)"),
    )
    prepare = _add(
        sub,
        "prepare",
        "preprocess a raw dataset",
        ("--dataset", "dataset name"),
        ("--variant", "prepared variant, e.g. 2d"),
        ("--raw", "raw dataset folder"),
        cfg,
        ("--out", "prepared folder"),
    )
    prepare.add_argument("--workers", type=int, default=1, help="parallel processes (cases)")
    _add(
        sub,
        "weights",
        "fetch, check and convert a model's starting weights",
        ("--name", "weights name, e.g. resnet34-mlperf"),
        cfg,
        ("--out", "converted weights folder"),
        ("--downloads", "folder for partial and finished downloads (kept between runs)"),
    )
    run = (("--workload", "workload name"), ("--run", "run name, e.g. fold0"))
    train = _add(
        sub,
        "train",
        "train one run",
        *run,
        ("--prepared", "prepared data"),
        cfg,
        ("--out", "train output folder"),
    )
    train.add_argument(
        "--weights", default="", help="the weights stage's folder the model starts from, if any"
    )
    evaluate = _add(
        sub,
        "evaluate",
        "evaluate a trained run",
        *run,
        ("--prepared", "prepared data"),
        ("--model", "train output folder"),
        cfg,
        ("--out", "evaluation output folder"),
    )
    for compute_stage in (train, evaluate):
        compute_stage.add_argument("--threads", type=int, default=1, help="CPU threads")
    summarize = _add(
        sub,
        "summarize-trace",
        "summarize profiler traces",
        ("--traces", "folder of chrome traces"),
        ("--out", "summary folder"),
    )
    summarize.add_argument(
        "--short-kernel-us",
        type=float,
        default=None,
        help="kernels shorter than this are short (default: 10, accelpipe.traces.device)",
    )
    publish = _add(
        sub,
        "publish",
        "assemble results/<workload>/<run>",
        ("--workload", "workload name"),
        ("--raw", "raw stage output"),
        ("--prepared", "prepare stage output"),
        ("--model", "train stage output"),
        ("--eval", "evaluate stage output"),
        ("--trace", "trace stage output"),
        cfg,
        ("--out", "result folder"),
    )
    publish.add_argument("--preflight", default="", help="the preflight of the run's image, if any")
    # Stages that gather many folders into one: (name, help, options, (list flag, its help)).
    workload, run_folders = ("--workload", "workload name"), ("--runs", "published run folders")
    gathering: tuple[tuple[str, str, list[tuple[str, str]], tuple[str, str]], ...] = (
        ("aggregate", "aggregate cross-validation folds", [], ("--runs", "published fold folders")),
        ("grid", "rank the runs of a hyperparameter grid", [workload, cfg], run_folders),
        ("ttt", "combine the seed runs' times to target", [workload], run_folders),
        (
            "benchmark",
            "tabulate the benchmark rows of a workload",
            [workload, cfg],
            ("--rows", "benchmark rows' train outputs"),
        ),
        ("compare", "one page comparing every finished run", [cfg], run_folders),
    )
    for name, help_text, options, (flag, flag_help) in gathering:
        stage = _add(sub, name, help_text, *options, ("--out", f"{name} folder"))
        stage.add_argument(flag, nargs="+", required=True, help=flag_help)
    _diff_parser(sub)
    doctor = _parser(sub, "doctor", "check driver, framework build and devices before a long run")
    doctor.add_argument(
        "--backend",
        choices=leases.BACKENDS,
        help="default: the workflow's ($ACCELPIPE_RUNTIME), else cpu",
    )
    doctor.add_argument(
        "--framework",
        dest="check_framework",
        choices=("pytorch", "tensorflow"),
        help="the framework to ask (default: the global --framework, else pytorch)",
    )
    doctor.add_argument("--devices", type=int, default=1, help="devices one job uses per node")
    doctor.add_argument("--world-size", type=int, help="processes of one job (default: devices)")
    doctor.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp16", "fp32"),
        default="auto",
        help="what the runs train in (auto: bf16 on accelerators): bf16 is checked for bf16",
    )
    doctor.add_argument(
        "--pool", help="device ids jobs may use, e.g. 0,1 (default: accelerators.pool, else all)"
    )
    doctor.add_argument("--json", help="also write the report as JSON here")
    _accelerator_check_parser(sub)
    images = _parser(sub, "images", "tag or build the container image of a backend")
    images.add_argument("action", choices=("tag", "build"))
    images.add_argument("--backend", required=True, help="cpu, cuda, rocm or gaudi")
    images.add_argument("--framework", default="pytorch")
    images.add_argument("--registry", default="localhost", help="image name prefix")
    images.add_argument("--base-image", default=None, help="override the Dockerfile's BASE_IMAGE")
    images.add_argument(
        "--offline", action="store_true", help="pip --no-index: docker/wheelhouse only"
    )
    images.add_argument("--docker-host", default=None, help="Engine API URL (default DOCKER_HOST)")
    targets = _parser(sub, "targets", "list what `snakemake <target>` can build under the config")
    _config_arguments(targets, "config files over config.yaml, merged as snakemake's --configfile")
    targets.add_argument("--json", action="store_true", help="print the targets as JSON")
    runs = _parser(sub, "runs", "list the runs under results/ with their headline numbers")
    runs.add_argument("--results", default="results", help="the results folder (default: results)")
    _config_arguments(runs, "the config a run is stale under: files over config.yaml")
    runs.add_argument("--json", action="store_true", help="print the runs as JSON")
    drop = _parser(
        sub,
        "drop-archives",
        "drop a dataset's downloaded archives once its raw folder records them verified and "
        "extracted (the others are kept)",
    )
    drop.add_argument("--dataset", required=True, help="dataset name")
    drop.add_argument("--data-root", default="data", help="the config's data_root (default: data)")
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
    for handler in handlers:  # a URL's credentials never reach a log or the console
        handler.addFilter(RedactingFilter())
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


def check_config_json(args: argparse.Namespace) -> None:
    """Check the stage's --config-json against its slice schema (config.slice_schema) before
    anything runs or is leased: a missing, unknown or invalid key is one error naming it.
    The one parse of the slice in this process: the stage reads the checked slice, its
    defaults filled in, as `args.config` (config.stage_slice); `args.config_json` is
    re-serialised for the processes a stage launches (a rule's slice already has every
    default, so both are what the rule passed)."""
    if getattr(args, "config_json", None) is None:
        return
    node = slice_schema(
        args.stage,
        dataset=getattr(args, "dataset", None),
        variant=getattr(args, "variant", None),
        workload=getattr(args, "workload", None),
    )
    value = load_slice(args.config_json)
    if node is not None:
        value = validate_slice(value, node, args.stage)
    args.config = value
    args.config_json = json.dumps(value, sort_keys=True, separators=(",", ":"))


def run_stage(args: argparse.Namespace, argv: list[str]) -> int:
    """Lease accelerators, then run the stage here or in its container."""
    runtime = read_runtime(args.framework)
    backend = stage_backend(args, runtime)
    if args.stage == "accelerator-check":  # runs its parts here; each leases what it needs
        handler_for(args.stage)(args)
        return 0
    if args.stage == "doctor":
        # The doctor looks at every device of the pool, busy ones included: it leases none and
        # hides none (a lease's visibility variable would); its container gets the whole pool.
        return _run(args, argv, runtime, backend, _pool_for_doctor(backend, runtime), False)
    # Inside a Slurm job the scheduler already allocated the devices (gres/gpus) and set
    # the visibility variables: leasing again from a node-wide pool would fight it.
    accel = 0 if "SLURM_JOB_ID" in os.environ else args.accel
    pool = leases.resolve_pool(backend, runtime.get("pool")) if accel else []
    with leases.lease(
        accel,
        pool,
        leases.default_lock_dir(),
        wait_s=lease_wait_s(runtime),
        job=job_name(args),
    ) as devices:
        if devices:
            log.info("leased %s devices %s", backend, ",".join(devices))
        return _run(args, argv, runtime, backend, devices, True)


def stage_backend(args: argparse.Namespace, runtime: dict) -> str:
    """The device family a stage leases and runs on, from one source: its slice's `backend`
    (the config as Snakemake validated it) where the slice has one, as the stage itself
    reads it; else (stages whose results do not depend on the device) $ACCELPIPE_RUNTIME's,
    else cpu."""
    config = getattr(args, "config", None)
    if isinstance(config, dict) and "backend" in config:
        backend: str = config["backend"]
        return backend
    return runtime.get("backend", "cpu")


def job_name(args: argparse.Namespace) -> str:
    """What a lock's holder record says it is running, e.g. `train:<workload>/default`."""
    names = [getattr(args, key, None) for key in ("dataset", "variant", "workload", "run")]
    return f"{args.stage}:{'/'.join(str(n) for n in names if n)}"


def _pool_for_doctor(backend: str, runtime: dict) -> list[str]:
    """The devices the doctor's container is given (runtime docker only); none where the
    vendor tool cannot list them, which the doctor inside then reports."""
    if runtime["runtime"] != "docker" or backend == "cpu":
        return []
    try:
        return leases.resolve_pool(backend, runtime.get("pool"))
    except AccelpipeError as err:
        log.warning("doctor: no device given to the container: %s", err)
        return []


def _run(
    args: argparse.Namespace,
    argv: list[str],
    runtime: dict,
    backend: str,
    devices: list[str],
    restrict: bool,
) -> int:
    """Run the stage here (restricted to `devices` by the visibility variable) or in its
    container (given `devices`)."""
    if runtime["runtime"] != "docker":
        if restrict:
            os.environ.update(leases.visibility_env(backend, devices))
        handler_for(args.stage)(args)
        return 0
    engine = containers.client(runtime.get("docker_host"))
    build = runtime.get("build") or {}
    containers.build_once(
        images.spec_for(backend, args.framework),
        runtime["image"],
        engine,
        leases.default_lock_dir(),
        wait_s=lease_wait_s(runtime),
        job=job_name(args),
        base_image=build.get("base_image"),
        pip_extra_args="--no-index" if build.get("offline") else "",
    )
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


def _before_log(args: argparse.Namespace) -> str | None:
    """The stage's `before_log(args)` where it has one (train keeps the log of an interrupted
    attempt), run before setup_logging empties the log, on the checked slice; what it did,
    to log."""
    if not getattr(args, "log", None) or args.stage not in stages.MODULES:
        return None
    hook = getattr(importlib.import_module(stages.MODULES[args.stage]), "before_log", None)
    if hook is None:
        return None
    result: str | None = hook(args)
    return result


def main(argv: list[str] | None = None) -> int:
    capture_stderr = argv is None  # the console command, not a test calling main()
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:  # before the log opens, for the stage's `before_log`; a bad slice is logged below
        check_config_json(args)
        bad_slice = None
    except AccelpipeError as err:
        bad_slice = err
    kept = None if bad_slice else _before_log(args)
    setup_logging(args.log, capture_stderr)
    if kept:
        log.info("%s", kept)
    try:
        if bad_slice:
            raise bad_slice
        return run_stage(args, argv)
    except AccelpipeError as err:
        log.error("accelpipe %s: %s", args.stage, err)
        status: int = getattr(err, "exit_status", 2)  # diff's regression: its own status
        return status
    except OSError as err:  # a full disk where no writer named its file: still one line
        full = no_space_error(err, err.filename or Path.cwd())
        if full is None:
            raise
        log.error("accelpipe %s: %s", args.stage, full)
        return 2


def _config_arguments(parser: argparse.ArgumentParser, files_help: str) -> None:
    """--configfile and --config as Snakemake takes them (targets, runs)."""
    for flag, metavar, text in (
        ("--configfile", "PATH", files_help),
        ("--config", "KEY=VALUE", "config values over those, as snakemake's --config"),
    ):
        parser.add_argument(
            flag, nargs="+", action="extend", default=[], metavar=metavar, help=text
        )


def _diff_parser(sub: argparse._SubParsersAction) -> None:
    """`accelpipe diff <run A> <run B>`: the report, and the gate's exit status."""
    diff = _parser(
        sub,
        "diff",
        "two published runs side by side, each figure with an interval and a verdict; exits 3 "
        "when B's headline (throughput, step time) is slower than A's beyond the threshold",
    )
    diff.add_argument("run_a", help="run A, the baseline: results/<workload>/<run>")
    diff.add_argument("run_b", help="run B, the candidate: results/<workload>/<run>")
    diff.add_argument("--out", help="report folder (default: results/<workload>/diff/<A>_vs_<B>)")
    diff.add_argument(
        "--config-json", help="the rule's `diff` slice as JSON (default: the schema's)"
    )
    diff.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="the gate's fraction of A's headline (default: the config's diff.threshold)",
    )
    diff.add_argument(
        "--report-only",
        action="store_true",
        help="write the report and exit 0 whatever the gate says (the Snakemake target)",
    )


def _accelerator_check_parser(sub: argparse._SubParsersAction) -> None:
    """`accelpipe accelerator-check`: the first command on a new accelerator node."""
    # the PyTorch workloads, by the one registry (an accelerator node for PyTorch has no TF)
    torch_workloads = [n for n, w in registry.WORKLOADS.items() if w.framework == "pytorch"]
    parser = _parser(
        sub,
        "accelerator-check",
        "doctor, device tests, tiny fp32/bf16 runs with their traces, FLOPs, MFU and energy, "
        "and a benchmark row per PyTorch workload, inside a time budget; one markdown and "
        "one JSON report",
    )
    parser.add_argument("--backend", choices=leases.BACKENDS, default="cpu")
    parser.add_argument("--out", default="accelerator-check", help="the report's folder")
    parser.add_argument(
        "--workflow",
        default=".",
        help="the accelpipe checkout: its Snakefile, .test/config.yaml and tests (default: .)",
    )
    parser.add_argument(
        "--budget-s", type=float, default=480.0, help="the whole check's wall time (default 480)"
    )
    parser.add_argument("--workloads", nargs="+", choices=torch_workloads, default=torch_workloads)
    parser.add_argument(
        "--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"]
    )
    parser.add_argument(
        "--tests",
        nargs="+",
        default=["tests/accelpipe/devices"],
        help="the device tests: paths in the checkout (TensorFlow's left out where it is absent)",
    )
    parser.add_argument("--benchmark-steps", type=int, default=20, help="measured steps")
    parser.add_argument("--benchmark-warmup", type=int, default=5, help="unmeasured steps")
    parser.add_argument(
        "--cores", type=int, default=len(os.sched_getaffinity(0)), help="Snakemake's --cores"
    )


if __name__ == "__main__":
    sys.exit(main())
