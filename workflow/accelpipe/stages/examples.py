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


def command(*argv: Any) -> str:
    """`accelpipe <argv>` as a shell line; a dict is its JSON (a --config-json slice)."""
    words = [json.dumps(a) if isinstance(a, dict) else str(a) for a in argv]
    return shlex.join(["accelpipe", *words])


_RUN = ("--workload", "resnet50", "--run", "fp32", "--prepared", "data/prepared/imagenet/index")
_WORK = "work/resnet50/fp32"
_FOLDS = [f"results/unet2d/fold{k}" for k in range(5)]
_GRID = [f"results/segmenter/decoder-{d}_lr-0p05" for d in ("mask", "linear")]
_ROWS = [f"work/resnet50/benchmark/{p}-b32" for p in ("bf16", "fp32")]
_SEEDS = [f"results/resnet50/fp32-seed{k}" for k in range(1, 6)]
_PUBLISH_SLICE = {
    "backend": "cpu",
    "runtime": "local",
    "datasets": {"imagenet": {}},
    "performance": {},
    "reference_figures": [],
    "resnet50": {},
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
                *("publish", "--workload", "resnet50", "--raw", "data/raw/imagenet"),
                *("--prepared", "data/prepared/imagenet/index", "--model", f"{_WORK}/train"),
                *("--eval", f"{_WORK}/eval", "--trace", f"{_WORK}/trace"),
                *("--config-json", _PUBLISH_SLICE, "--out", "results/resnet50/fp32"),
            )
        ],
        "results/resnet50/fp32",
    ),
    "aggregate": (
        [command("aggregate", "--runs", *_FOLDS, "--out", "results/unet2d/cv")],
        "results/unet2d/cv",
    ),
    "grid": (
        [
            command(
                *("grid", "--workload", "segmenter"),
                *("--config-json", {"keys": ["model.decoder", "train.lr"]}),
                *("--runs", *_GRID, "--out", "results/segmenter/grid"),
            )
        ],
        "results/segmenter/grid",
    ),
    "ttt": (
        [
            command(
                "ttt", "--workload", "resnet50", "--runs", *_SEEDS, "--out", "results/resnet50/ttt"
            )
        ],
        "results/resnet50/ttt",
    ),
    "benchmark": (
        [
            command(
                *("benchmark", "--workload", "resnet50", "--config-json", {"warmup_steps": 10}),
                *("--rows", *_ROWS, "--out", "results/resnet50/benchmark"),
            )
        ],
        "results/resnet50/benchmark",
    ),
    "compare": (
        [
            command(
                *("compare", "--config-json", {"cost": {"per_hour": {"cuda": 2.5}}}),
                *("--runs", "results/resnet50/bf16", "results/resnet50/fp32"),
                *("--out", "results/compare"),
            )
        ],
        "results/compare",
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
    "images": ([command("images", "build", "--backend", "cuda", "--framework", "pytorch")], None),
    "targets": (
        [
            command("targets"),
            command(
                *("targets", "--configfile", ".test/config.yaml"),
                *("--config", "resnet50={runs: {fp16: {precision: fp16}}}", "--json"),
            ),
        ],
        None,
    ),
    "runs": (
        [command("runs"), command("runs", "--results", "/scratch/accelpipe/results", "--json")],
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
