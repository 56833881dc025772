"""ViT Segmenter input pipeline vs the train step: batches/s of tf.data vs steps/s; prints one JSON.

Measured in this process on CPU (fp32), at one batch size for both sides:

* input: the Segmenter training pipeline (inputs.ade20k_input.train_dataset: per-worker
  TFRecord readers, shuffle, repeat, parse, JPEG + PNG decode, label shift, mmseg's keep-ratio
  random rescale to (4 * crop, crop) x U(0.5, 2), RandomCrop with the cat_max_ratio retries,
  flip, PhotoMetricDistortion, normalisation, pad, batch, prefetch) over synthetic ADE20K
  TFRecords made in a temp dir by the package's own code (sources.make_raw with ade20k's
  `synthetic` source, ade20k.prepare_variant("tfrecord", ...)), images of `--size` (default 683x512,
  ADE20K's typical size, +-20 % aspect as the synthesizer draws them) so decoding and
  rescaling cost what they do. The dataset is the job's own `dataset(epoch, shard)`, i.e.
  train_dataset(files, batch, crop=image_size, seed, num_workers=1, index=0, scale).
  Batches/s over `--batches` batches after `--warmup` batches (the reader start-up and the
  prefetch fill are not throughput); median of `--rounds`. The pipeline's cost depends on
  the crop (the rescale targets a short side of crop x 0.5..2), so it is measured once per
  distinct crop, not per encoder.
* step: the real engine step. The job is the one workloads.segmenter.workload.train builds (its
  `make_job`, captured by standing in for tf_trainer.run_training while segmenter.train
  runs, then built the way run_training builds it: device policy, seed, TFTrainer with the
  profiler off; see tf_bench.py). Timed is TFTrainer's step function (the `tf.function`
  run_training calls each step) on batches of the same pipeline fetched into memory
  beforehand, so the loader is excluded; median of rounds.

ratio = input batches/s / step/s: how many times faster the pipeline makes batches than the
step eats them. Target >= 3 (headroom for the pipeline to share the cores with the step).

Reported for the model `--encoder` at `--image-size` and for each `--also ENCODER:SIZE`.
Defaults are the CPU config's model (config.yaml: encoder tiny, crop 64), which finishes in
a minute or two on 2 cores; Segmenter's real model is B_16 at crop 512, whose step takes
minutes on 2 CPU cores at batch 8 (~6 s at crop 224 and batch 1), so it is opt-in:

    PYTHONPATH=workflow python benchmarks/bench_segmenter_input.py  # tiny:64, S_16:128
    PYTHONPATH=workflow python benchmarks/bench_segmenter_input.py --batch 2 \\
        --encoder B_16 --image-size 512 --also tiny:64 --rounds 2  # the real model (slow)
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
from accelpipe.core.keras2 import tf
from accelpipe.datasets import ade20k
from accelpipe.engines import tf_trainer
from accelpipe.engines.tf_trainer import TFTrainer, TFTrainJob
from accelpipe.plan import stage_config
from accelpipe.workloads.segmenter import workload as segmenter

TARGET = 3.0
RUN = "fp32"  # the default run whose train slice the benchmark starts from
ADE20K_SIZE = (683, 512)  # (W, H): ADE20K's typical image


def make_prepared(scratch: Path, images: int, size: tuple[int, int], shards: int) -> Path:
    """Synthetic ADE20K TFRecords in scratch (tf_bench.make_prepared)."""
    return tf_bench.make_prepared(ade20k, scratch, images, size, shards)


def train_slice(
    encoder: str, image_size: int, batch: int, precision: str, compile_: bool
) -> dict[str, Any]:
    """The train stage's config slice (schema defaults, run fp32) with the bench's settings."""
    cfg = copy.deepcopy(stage_config.train(validate({}), "segmenter", RUN))
    # random init, as the shipped CPU config trains: the step costs the same from any starting
    # weights, and the schema's default (converted published weights) is a download
    cfg["model"].update(encoder=encoder, image_size=image_size, pretrained="none")
    cfg["train"].update(batch_size=batch, precision=precision, compile=compile_)
    cfg["profile"]["enabled"] = False
    return cfg


def build_segmenter_trainer(
    prepared: Path, cfg: dict[str, Any], work_dir: Path
) -> tuple[TFTrainJob, TFTrainer]:
    """The job workloads.segmenter.workload.train makes, and its trainer, as run_training
    builds them."""
    factory = capture_job_factory(segmenter.train, prepared, RUN, cfg, work_dir)
    return build_trainer(factory, cfg, work_dir)


def model_spec(text: str) -> tuple[str, int]:
    """`B_16:512` -> ("B_16", 512)."""
    encoder, _, size = text.partition(":")
    if not size.isdigit():
        raise argparse.ArgumentTypeError(f"expected ENCODER:SIZE (e.g. tiny:64), got {text!r}")
    return encoder, int(size)


def measure_model(
    prepared: Path, encoder: str, size: int, args: argparse.Namespace, scratch: Path
) -> tuple[dict[str, Any], tf.data.Dataset]:
    cfg = train_slice(encoder, size, args.batch, args.precision, args.compile)
    job, trainer = build_segmenter_trainer(prepared, cfg, scratch / f"work_{encoder}_{size}")
    batches = fetch_batches(job, trainer, args.distinct_batches)
    step_seconds(trainer._step_fn, batches, args.warmup_steps)  # traces the step
    times = [step_seconds(trainer._step_fn, batches, args.steps)[0] for _ in range(args.rounds)]
    per_s = 1.0 / statistics.median(times)
    step = {
        "step_per_s": sig(per_s),
        "step_images_per_s": sig(per_s * args.batch),
        "step_ms": round(statistics.median(times) * 1e3, 1),
        "step_ms_rounds": [round(t * 1e3, 1) for t in times],
        "params": int(sum(v.shape.num_elements() for v in job.model.trainable_variables)),
    }
    return step, job.dataset(0, trainer.shard)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8, help="batch size of both sides")
    ap.add_argument("--encoder", default="tiny", help="ViT encoder (B_16 = Segmenter's)")
    ap.add_argument("--image-size", type=int, default=64, help="crop (512 = Segmenter's)")
    ap.add_argument(
        "--also", type=model_spec, nargs="*", default=[("S_16", 128)], metavar="ENCODER:SIZE"
    )
    ap.add_argument("--images", type=int, default=64, help="synthetic train images")
    ap.add_argument("--size", type=int, nargs=2, default=ADE20K_SIZE, metavar=("W", "H"))
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
        image_size=32,
        also=[],
        images=4,
        size=(64, 48),
        shards=1,
        batches=1,
        warmup=1,
        **smoke.STEP_LOOP,
    )

    if args.threads:
        tf_trainer.limit_threads(args.threads)
    head = (args.encoder, args.image_size)
    models = [head, *(m for m in dict.fromkeys(args.also) if m != head)]
    scratch = Path(tempfile.mkdtemp(prefix="bench_segmenter_input.", dir=args.tmp))
    try:
        prepared = make_prepared(scratch, args.images, tuple(args.size), args.shards)
        steps: dict[tuple[str, int], dict[str, Any]] = {}
        datasets: dict[int, tf.data.Dataset] = {}  # one pipeline per crop
        for encoder, size in models:
            steps[encoder, size], dataset = measure_model(prepared, encoder, size, args, scratch)
            datasets.setdefault(size, dataset)
        batches_per_s = {
            size: input_rate(ds, args.warmup, args.batches, args.rounds)
            for size, ds in datasets.items()
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def summary(encoder: str, size: int) -> dict[str, Any]:
        rate = batches_per_s[size]
        ratio = rate / steps[encoder, size]["step_per_s"]
        return {
            "ratio": sig(ratio),
            "meets_target": ratio >= TARGET,
            "input_batches_per_s": sig(rate),
            "input_images_per_s": sig(rate * args.batch),
            **steps[encoder, size],
        }

    result = {
        "bench": "segmenter_input",
        "smoke": args.smoke,
        "device": "cpu",
        "precision": args.precision,
        "compiled": args.compile,
        "batch": args.batch,
        "encoder": args.encoder,
        "image_size": args.image_size,
        "target": TARGET,
        **summary(*head),
        "other_models": {f"{e}:{s}": summary(e, s) for e, s in models[1:]},
        "data": {"train_images": args.images, "size": list(args.size), "shards": args.shards},
        "rounds": args.rounds,
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
