"""The example at the end of each stage's `accelpipe <stage> --help`.

Realistic commands with the real argument names and paths the rules use; tests parse each
with the CLI's parser and check its --config-json against the stage's slice schema. For a
stage a rule runs, the help also names an output whose dry run prints the rule's exact
command, config slice included.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from accelpipe.config import registry
from accelpipe.config.declare import Workload
from accelpipe.config.schema import schema


def command(*argv: Any) -> str:
    """`accelpipe <argv>` as a shell line; a dict is its JSON (a --config-json slice)."""
    words = [json.dumps(a) if isinstance(a, dict) else str(a) for a in argv]
    return shlex.join(["accelpipe", *words])


def _example() -> Workload:
    """The workload the examples show: the first that names example runs."""
    return next(w for w in registry.WORKLOADS.values() if w.examples.runs)


def _cross_validated() -> str:
    """The first workload whose runs are cross-validated (its block has `folds`)."""
    blocks = schema()["properties"]
    return next(n for n in registry.WORKLOADS if "folds" in blocks[n]["properties"])


_W = _example()
_RUN_NAME = _W.examples.runs[0]
_GRIDDED = next(w for w in registry.WORKLOADS.values() if w.examples.grid_runs)
_CV = _cross_validated()
_PREPARED = f"data/prepared/{_W.dataset}/{_W.variant}"
_RUN = ("--workload", _W.name, "--run", _RUN_NAME, "--prepared", _PREPARED)
_WORK = f"work/{_W.name}/{_RUN_NAME}"
_RESULTS = f"results/{_W.name}"
_FOLDS = [f"results/{_CV}/fold{k}" for k in range(5)]
_GRID = [f"results/{_GRIDDED.name}/{run}" for run in _GRIDDED.examples.grid_runs]
_ROWS = [f"work/{_W.name}/benchmark/{p}-b32" for p in ("bf16", "fp32")]
_PAIR = [f"{_RESULTS}/{run}" for run in _W.examples.runs[:2]]  # A, the baseline; B
_DIFF = f"{_RESULTS}/diff/{_W.examples.runs[0]}_vs_{_W.examples.runs[1]}"
_SEEDS = [f"{_RESULTS}/{_RUN_NAME}-seed{k}" for k in range(1, 6)]
_PUBLISH_SLICE = {
    "backend": "cpu",
    "runtime": "local",
    "datasets": {_W.dataset: {}},
    "performance": {},
    "reference_figures": [],
    _W.name: {},
}

# stage -> (example command lines, the output of the rule that runs it, or None)
EXAMPLES: dict[str, tuple[list[str], str | None]] = {
    "raw": (
        [
            command(
                *("raw", "--dataset", "brats", "--config-json", {"source": "synthetic"}),
                *("--out", "data/raw/brats", "--downloads", "data/downloads/brats"),
            )
        ],
        "data/raw/brats",
    ),
    "prepare": (
        [
            command(
                *("prepare", "--dataset", "brats", "--variant", "2d", "--raw", "data/raw/brats"),
                *("--config-json", {"prepare": {}, "folds": 5}),
                *("--out", "data/prepared/brats/2d", "--workers", 4),
            )
        ],
        "data/prepared/brats/2d",
    ),
    "weights": (
        [
            command(
                *("weights", "--name", "resnet34-path-0123456789ab", "--config-json"),
                {"family": "resnet34", "source": "path:/data/ssd_r34-mlperf/mlperf_artifact"},
                *("--out", "data/weights/resnet34-path-0123456789ab"),
                *("--downloads", "data/downloads/weights/resnet34-path-0123456789ab"),
            )
        ],
        "data/weights/resnet34-mlperf",
    ),
    "train": (
        [
            command(
                "train",
                *_RUN,
                "--config-json",
                {"backend": "cpu", "model": {}, "train": {"precision": "fp32"}, "profile": {}},
                *("--out", f"{_WORK}/train", "--threads", 4),
            )
        ],
        f"{_WORK}/train",
    ),
    "evaluate": (
        [
            command(
                *("evaluate", *_RUN, "--model", f"{_WORK}/train", "--config-json"),
                {"backend": "cpu", "evaluate": {}, "train": {"precision": "fp32"}, "target": None},
                *("--out", f"{_WORK}/eval", "--threads", 2),
            )
        ],
        f"{_WORK}/eval",
    ),
    "summarize-trace": (
        [
            command(
                "summarize-trace", "--traces", f"{_WORK}/train/traces", "--out", f"{_WORK}/trace"
            )
        ],
        f"{_WORK}/trace",
    ),
    "publish": (
        [
            command(
                *("publish", "--workload", _W.name, "--raw", f"data/raw/{_W.dataset}"),
                *("--prepared", _PREPARED, "--model", f"{_WORK}/train"),
                *("--eval", f"{_WORK}/eval", "--trace", f"{_WORK}/trace"),
                *("--config-json", _PUBLISH_SLICE, "--out", f"{_RESULTS}/{_RUN_NAME}"),
            )
        ],
        f"{_RESULTS}/{_RUN_NAME}",
    ),
    "aggregate": (
        [command("aggregate", "--runs", *_FOLDS, "--out", f"results/{_CV}/cv")],
        f"results/{_CV}/cv",
    ),
    "grid": (
        [
            command(
                *("grid", "--workload", _GRIDDED.name),
                *("--config-json", {"keys": list(_GRIDDED.examples.grid_keys)}),
                *("--runs", *_GRID, "--out", f"results/{_GRIDDED.name}/grid"),
            )
        ],
        f"results/{_GRIDDED.name}/grid",
    ),
    "ttt": (
        [command("ttt", "--workload", _W.name, "--runs", *_SEEDS, "--out", f"{_RESULTS}/ttt")],
        f"{_RESULTS}/ttt",
    ),
    "benchmark": (
        [
            command(
                *("benchmark", "--workload", _W.name, "--config-json", {"warmup_steps": 10}),
                *("--rows", *_ROWS, "--out", f"{_RESULTS}/benchmark"),
            )
        ],
        f"{_RESULTS}/benchmark",
    ),
    "compare": (
        [
            command(
                *("compare", "--config-json", {"cost": {"per_hour": {"cuda": 2.5}}}),
                *("--runs", *(f"{_RESULTS}/{run}" for run in sorted(_W.examples.runs))),
                *("--out", "results/compare"),
            )
        ],
        "results/compare",
    ),
    "diff": (
        [
            command("diff", *_PAIR),
            command(
                *("diff", *_PAIR, "--config-json", {"diff": {"threshold": 0.03}}),
                *("--report-only", "--out", _DIFF),
            ),
        ],
        _DIFF,
    ),
    "doctor": (
        [
            command(
                *("doctor", "--backend", "cuda", "--framework", "pytorch", "--devices", 2),
                *("--precision", "bf16", "--json", "doctor.json"),
            )
        ],
        None,
    ),
    "accelerator-check": (
        [
            command("accelerator-check", "--backend", "cuda", "--out", "accelerator-check"),
            command(
                *("accelerator-check", "--backend", "cpu", "--budget-s", 150),
                *("--workloads", "unet2d", "--tests", "tests/accelpipe/devices/test_peaks.py"),
            ),
        ],
        None,
    ),
    "images": ([command("images", "build", "--backend", "cuda", "--framework", "pytorch")], None),
    "targets": (
        [
            command("targets"),
            command(
                *("targets", "--configfile", ".test/config.yaml"),
                *("--config", f"{_W.name}={{runs: {{fp16: {{precision: fp16}}}}}}", "--json"),
            ),
        ],
        None,
    ),
    "runs": (
        [command("runs"), command("runs", "--results", "/scratch/accelpipe/results", "--json")],
        None,
    ),
    "drop-archives": (
        [command("drop-archives", "--dataset", "brats", "--data-root", "/scratch/data")],
        None,
    ),
}


def epilog(stage: str) -> str:
    """The end of `accelpipe <stage> --help`: its example, and the rule's output if any."""
    commands, output = EXAMPLES[stage]
    text = ("examples:\n" if len(commands) > 1 else "example:\n") + "".join(
        f"  {line}\n" for line in commands
    )
    if output:
        text += (
            f"\nthe rule's exact command, its config slice included: snakemake -n -p -f {output}\n"
        )
    return text
