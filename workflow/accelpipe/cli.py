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

from accelpipe import datasets, provenance, workloads
from accelpipe.config import load_slice
from accelpipe.errors import AccelpipeError
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

    A changed config or dataset gets a fresh directory instead of resuming a stale run.
    """
    key = hashlib.sha256()
    key.update(args.config_json.encode())
    key.update(args.run.encode())
    for name in ("config.json", "folds.json"):
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


def cmd_train(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    _limit_threads(args.threads)
    out = Path(args.out)
    work_dir = _resume_dir(out, args)
    work_dir.mkdir(parents=True, exist_ok=True)
    facts = workloads.get(args.workload).train(
        Path(args.prepared), args.run, _slice(args), work_dir
    )
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
    return parser


def setup_logging(log_file: str | None) -> None:
    """Everything to the log file (or stderr); errors always to stderr as well."""
    console = logging.StreamHandler(sys.stderr)
    handlers: list[logging.Handler] = [console]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w"))
        console.setLevel(logging.ERROR)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,  # replace handlers of an earlier call (tests call main() repeatedly)
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log)
    try:
        args.handler(args)
    except AccelpipeError as err:
        log.error("accelpipe %s: %s", args.stage, err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
