"""SSD-ResNet34 train step: our engine's step vs a minimal tf.function loop; prints one JSON.

Measured in this process on CPU (fp32 by default), on the same input tensors: `--distinct-
batches` batches of the SSD training pipeline (synthetic COCO TFRecords made in a temp dir, as
bench_ssd_input.py makes them) fetched into memory before timing, so the loader is excluded.

* ours: TFTrainer's step function (the `tf.function` tf_trainer.run_training calls each step:
  GradientTape, the forward / loss / backward / optimizer_step name scopes, the job's coupled
  L2 regularization, the replica division, SGD on the job's variable list with the frozen
  stem left out) for the job workloads.ssd.train builds (its make_job, captured and built as
  run_training builds it; see bench_ssd_input.py), profiler off.
* minimal: a plain `tf.function` on a second SSD300-ResNet34 of the same width and init
  seed: forward, ssd_loss(...)["total"] + weight_decay * l2_loss(ssd_resnet34.l2_variables),
  tape.gradient, apply_gradients of a keras SGD (same momentum and LR schedule) over the
  same selection of variables (ssd_resnet34.trainable_variables: the frozen stem left out),
  so the math is ours: only the engine's machinery differs.

The two alternate in `--rounds` rounds (the order flips every round: A B B A ...), so drift
and other jobs' load hit both alike; the ratio is the median of the per-round ratios
ours / minimal of the time per step, step_ms the median per variant. Target: ratio <= 1.05.
On a machine shared with other jobs one full-width step (~20-30 s on 2 cores) swings
several-fold with their load: ratio_cpu_time (this process's CPU time) is the steadier
cross-check there, and `--width 8` runs enough rounds in a minute or two to settle the ratio.

    PYTHONPATH=workflow python benchmarks/bench_ssd_step.py --batch 8 --width 64 --rounds 4
    PYTHONPATH=workflow python benchmarks/bench_ssd_step.py --width 8 --rounds 8 --steps 3  # quick
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import smoke  # the sibling module (sys.path[0] when run as a script)
from bench_ssd_input import (
    build_ssd_trainer,
    make_prepared,
    train_slice,
)
from tf_bench import alternate, fetch_batches, same_weights, step_ratio

from accelpipe.core.keras2 import keras, tf
from accelpipe.engines import tf_trainer
from accelpipe.engines.tf_trainer import TFTrainJob
from accelpipe.models import ssd_resnet34
from accelpipe.models.ssd_loss import l2_loss, ssd_loss

TARGET = 1.05


def minimal_step(job: TFTrainJob, width: int, seed: int, weight_decay: float) -> tuple:
    """(step function, model) of the plainest loop over a fresh model with the same init."""
    keras.utils.set_random_seed(seed)  # as run_training, before the model is built
    classes = job.model.outputs[0].shape[-1]
    model = ssd_resnet34.build_ssd300(num_classes=classes, width=width)
    variables = ssd_resnet34.trainable_variables(model)
    l2_vars = ssd_resnet34.l2_variables(model)
    optimizer = keras.optimizers.SGD(
        job.optimizer.learning_rate, momentum=float(job.optimizer.momentum)
    )
    optimizer.build(variables)

    @tf.function
    def step(images: tf.Tensor, targets: tuple) -> tf.Tensor:
        with tf.GradientTape() as tape:
            cls_logits, boxes = model(images, training=True)
            loss = ssd_loss(cls_logits, boxes, *targets)["total"]
            total = loss + weight_decay * l2_loss(l2_vars)
        grads = tape.gradient(total, variables)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    return step, model


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--width", type=int, default=64, help="model width (64 = the real model)")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    ap.add_argument("--steps", type=int, default=1, help="steps per variant per round")
    ap.add_argument("--warmup-steps", type=int, default=1, help="per variant, untimed")
    ap.add_argument("--distinct-batches", type=int, default=4, help="batches both cycle")
    ap.add_argument("--images", type=int, default=32, help="synthetic train images")
    ap.add_argument("--size", type=int, nargs=2, default=(640, 480), metavar=("W", "H"))
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=0, help="TF op threads (0: all usable CPUs)")
    ap.add_argument("--tmp", default=None, help="scratch folder (default: system temp)")
    args = smoke.parse_args(
        ap,
        argv,
        batch=2,
        width=8,
        images=4,
        size=(64, 48),
        **smoke.STEP_LOOP,
    )

    if args.threads:
        tf_trainer.limit_threads(args.threads)
    scratch = Path(tempfile.mkdtemp(prefix="bench_ssd_step.", dir=args.tmp))
    try:
        prepared = make_prepared(scratch, args.images, tuple(args.size), shards=2)
        cfg = train_slice(args.width, args.batch, args.precision, compile_=False)
        job, trainer = build_ssd_trainer(prepared, cfg, scratch / "work")
        batches = fetch_batches(job, trainer, args.distinct_batches)
        train = cfg["train"]
        minimal, model = minimal_step(job, args.width, train["seed"], train["weight_decay"])
        same_init = same_weights(job.model, model)
        variants = {"ours": trainer._step_fn, "minimal": minimal}
        times, cpu = alternate(variants, batches, args.rounds, args.steps, args.warmup_steps)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    result: dict[str, Any] = {
        "bench": "ssd_step",
        "smoke": args.smoke,
        "device": "cpu",
        "precision": args.precision,
        "batch": args.batch,
        "width": args.width,
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "same_init": same_init,
        **step_ratio(times, cpu, TARGET),
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
