"""SSD-ResNet34 input pipeline vs the train step: batches/s of tf.data vs steps/s; prints one JSON.

Measured in this process on CPU (fp32), at one batch size for both sides:

* input: the SSD training pipeline (inputs.coco_input.train_dataset: interleaved TFRecord
  readers, parse, shuffle, SSD random crop, flip, colour jitter, normalisation, anchor
  matching against models.ssd_boxes.default_boxes(), batch, prefetch) over synthetic COCO
  TFRecords made in a temp dir by the package's own code (sources.make_raw with coco's
  `synthetic` source, coco.prepare_variant("tfrecord", ...)), JPEGs at `--size` (default
  640x480, COCO's typical size, so decoding costs what it does). The dataset is the job's own
  `dataset(epoch, shard)`, i.e. train_dataset(files, coco_ids, anchors, batch, seed,
  num_workers=1, index=0). Batches/s over `--batches` batches after `--warmup` batches (the
  reader start-up and the prefetch fill are not throughput); median of `--rounds`.
* step: the real engine step. The job is the one workloads.ssd.workload.train builds (its
  `make_job`, captured by standing in for tf_trainer.run_training while ssd.train runs, then built
  the way run_training builds it: device policy, seed, TFTrainer with the profiler off). Timed is
  TFTrainer's step function (the `tf.function` run_training calls each step) on batches of the
  same pipeline fetched into memory beforehand, so the loader is excluded; median of rounds.

ratio = input batches/s / step/s: how many times faster the pipeline makes batches than the
step eats them. Target >= 3 (headroom for the pipeline to share the cores with the step).
Reported for `--width` (64 = the real ResNet-34 widths) and each of `--also-widths` (the
pipeline is measured once: it does not depend on the model).

    PYTHONPATH=workflow python benchmarks/bench_ssd_input.py --batch 8 --width 64 --also-widths 8
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import smoke  # the sibling modules (sys.path[0] when run as a script)
import tf_bench
from tf_bench import (
    build_trainer,
    capture_job_factory,
    fetch_batches,
    input_rate,
    sig,
    step_seconds,
)

from accelpipe.config.schema import validate
from accelpipe.config.settings import TFTrain
from accelpipe.datasets import coco
from accelpipe.engines import tf_trainer
from accelpipe.engines.tf_trainer import JobFactory, TFTrainer, TFTrainJob
from accelpipe.plan import stage_config
from accelpipe.workloads.ssd import workload as ssd

TARGET = 3.0
RUN = "fp32"  # the default run whose train slice the benchmark starts from


def make_prepared(scratch: Path, images: int, size: tuple[int, int], shards: int) -> Path:
    """Synthetic COCO TFRecords in scratch (tf_bench.make_prepared)."""
    return tf_bench.make_prepared(coco, scratch, images, size, shards)


def train_slice(width: int, batch: int, precision: str, compile_: bool) -> dict[str, Any]:
    """The train stage's config slice (schema defaults, run fp32) with the bench's settings."""
    cfg = copy.deepcopy(stage_config.train(validate({}), "ssd", RUN))
    cfg["model"]["width"] = width
    # random init, as the shipped CPU config trains: the step costs the same from any starting
    # weights, and the schema's default (converted published weights) is a download
    cfg["model"]["pretrained"] = "none"
    cfg["train"].update(batch_size=batch, precision=precision, compile=compile_)
    cfg["profile"]["enabled"] = False
    return cfg


def ssd_job_factory(
    prepared: Path, cfg: dict[str, Any], work_dir: Path
) -> tuple[JobFactory, TFTrain]:
    """The `make_job` and train settings workloads.ssd.workload.train hands
    tf_trainer.run_training."""
    return capture_job_factory(ssd.train, prepared, RUN, cfg, work_dir)


def build_ssd_trainer(
    prepared: Path, cfg: dict[str, Any], work_dir: Path
) -> tuple[TFTrainJob, TFTrainer]:
    """The SSD job and trainer as tf_trainer.run_training builds them in a one-process run."""
    return build_trainer(ssd_job_factory(prepared, cfg, work_dir), cfg, work_dir)


def measure_width(
    prepared: Path, width: int, args: argparse.Namespace, scratch: Path
) -> tuple[dict[str, Any], TFTrainJob, TFTrainer]:
    cfg = train_slice(width, args.batch, args.precision, args.compile)
    job, trainer = build_ssd_trainer(prepared, cfg, scratch / f"work{width}")
    batches = fetch_batches(job, trainer, args.distinct_batches)
    step_seconds(trainer._step_fn, batches, args.warmup_steps)  # traces the step
    times = [step_seconds(trainer._step_fn, batches, args.steps)[0] for _ in range(args.rounds)]
    per_s = 1.0 / statistics.median(times)
    return (
        {
            "step_per_s": sig(per_s),
            "step_images_per_s": sig(per_s * args.batch),
            "step_ms": round(statistics.median(times) * 1e3, 1),
            "step_ms_rounds": [round(t * 1e3, 1) for t in times],
        },
        job,
        trainer,
    )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8, help="batch size of both sides")
    ap.add_argument("--width", type=int, default=64, help="model width (64 = the real model)")
    ap.add_argument("--also-widths", type=int, nargs="*", default=[8], help="more widths")
    ap.add_argument("--images", type=int, default=96, help="synthetic train images")
    ap.add_argument("--size", type=int, nargs=2, default=(640, 480), metavar=("W", "H"))
    ap.add_argument("--shards", type=int, default=8, help="train TFRecord shards")
    ap.add_argument("--batches", type=int, default=40, help="input batches timed per round")
    ap.add_argument("--warmup", type=int, default=5, help="input batches before timing")
    ap.add_argument("--steps", type=int, default=1, help="train steps timed per round")
    ap.add_argument("--warmup-steps", type=int, default=1, help="untimed (the first traces)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--distinct-batches", type=int, default=4, help="batches the step cycles")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--compile", action="store_true", help="XLA (train.compile)")
    ap.add_argument("--threads", type=int, default=0, help="TF op threads (0: all usable CPUs)")
    ap.add_argument("--tmp", default=None, help="scratch folder (default: system temp)")
    args = smoke.parse_args(
        ap,
        argv,
        batch=2,
        width=8,
        also_widths=[],
        images=4,
        size=(64, 48),
        shards=1,
        batches=1,
        warmup=1,
        **smoke.STEP_LOOP,
    )

    if args.threads:
        tf_trainer.limit_threads(args.threads)
    scratch = Path(tempfile.mkdtemp(prefix="bench_ssd_input.", dir=args.tmp))
    try:
        prepared = make_prepared(scratch, args.images, tuple(args.size), args.shards)
        widths = [args.width, *(w for w in args.also_widths if w != args.width)]
        steps: dict[int, dict[str, Any]] = {}
        dataset = None
        for width in widths:
            steps[width], job, trainer = measure_width(prepared, width, args, scratch)
            if dataset is None:
                dataset = job.dataset(0, trainer.shard)
        batches_per_s = input_rate(dataset, args.warmup, args.batches, args.rounds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def summary(width: int) -> dict[str, Any]:
        ratio = batches_per_s / steps[width]["step_per_s"]
        return {"ratio": sig(ratio), "meets_target": ratio >= TARGET, **steps[width]}

    result = {
        "bench": "ssd_input",
        "smoke": args.smoke,
        "device": "cpu",
        "precision": args.precision,
        "compiled": args.compile,
        "batch": args.batch,
        "width": args.width,
        "target": TARGET,
        "input_batches_per_s": sig(batches_per_s),
        "input_images_per_s": sig(batches_per_s * args.batch),
        **summary(args.width),
        "other_widths": {str(w): summary(w) for w in widths[1:]},
        "data": {"train_images": args.images, "size": list(args.size), "shards": args.shards},
        "rounds": args.rounds,
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
