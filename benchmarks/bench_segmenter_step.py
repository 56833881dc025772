"""ViT Segmenter train step: our engine's step vs a minimal tf.function loop; prints one JSON.

Measured in this process on CPU (fp32 by default), on the same input tensors: `--distinct-
batches` batches of the Segmenter training pipeline (synthetic ADE20K TFRecords made in a
temp dir, as bench_segmenter_input.py makes them) fetched into memory before timing, so the
loader is excluded.

* ours: TFTrainer's step function (the `tf.function` tf_trainer.run_training calls each step:
  GradientTape, the forward / loss / backward / optimizer_step name scopes, the job's coupled
  L2 regularization when train.weight_decay > 0 (none by default, as Segmenter), the replica
  division, Nesterov SGD with the poly-decay schedule on all trainable variables) for the job
  workloads.segmenter.workload.train builds (its make_job, captured and built as run_training builds
  it; see tf_bench.py), profiler off.
* minimal: a plain `tf.function` on a second Segmenter of the same architecture (encoder,
  decoder, crop, dropout, drop_path) and init seed: forward, segmentation_loss(logits,
  labels, 255) (+ weight_decay * l2_loss of the decayed weights, if any), tape.gradient,
  apply_gradients of a keras SGD with the same momentum, Nesterov flag and learning-rate
  schedule over model.trainable_variables, so the math is ours: only the engine's machinery
  differs.

The two alternate in `--rounds` rounds (the order flips every round: A B B A ...), so drift
and other jobs' load hit both alike; the ratio is the median of the per-round ratios
ours / minimal of the time per step, step_ms the median per variant. Target: ratio <= 1.05.
ratio_cpu_time (this process's CPU time) is the steadier cross-check on a machine shared
with other jobs. The defaults are the CPU config's model (encoder tiny, crop 64), a step of
~0.2 s on 2 cores; Segmenter's real model (B_16, crop 512) takes minutes a step there:

    PYTHONPATH=workflow python benchmarks/bench_segmenter_step.py  # tiny, crop 64, mask
    PYTHONPATH=workflow python benchmarks/bench_segmenter_step.py --decoder linear
    PYTHONPATH=workflow python benchmarks/bench_segmenter_step.py --encoder B_16 \\
        --image-size 512 --batch 2 --rounds 4 --steps 1  # the real model (slow)
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
from bench_segmenter_input import (
    ADE20K_SIZE,
    build_segmenter_trainer,
    make_prepared,
    train_slice,
)
from tf_bench import alternate, fetch_batches, same_weights, step_ratio

from accelpipe.core.keras2 import keras, tf
from accelpipe.datasets.ade20k import IGNORE_INDEX
from accelpipe.engines import tf_trainer
from accelpipe.engines.tf_trainer import TFTrainJob
from accelpipe.models import segmenter
from accelpipe.models.segmentation_loss import segmentation_loss
from accelpipe.models.ssd_loss import l2_loss

TARGET = 1.05


def minimal_step(job: TFTrainJob, seed: int, weight_decay: float) -> tuple:
    """(step function, model) of the plainest loop over a fresh model with the same init."""
    arch = job.facts["architecture"]
    keras.utils.set_random_seed(seed)  # as run_training, before the model is built
    model = segmenter.build_segmenter(
        num_classes=arch["classes"],
        image_size=arch["image_size"],
        encoder=arch["encoder"],
        decoder=arch["decoder"],
        dropout=arch["dropout"],
        drop_path=arch["drop_path"],
        decoder_dropout=arch["decoder_dropout"],
    )
    variables = model.trainable_variables
    skip = {id(v) for v in segmenter.no_decay_variables(model)}
    decayed = [v for v in variables if id(v) not in skip]
    optimizer = keras.optimizers.SGD(
        job.optimizer.learning_rate,
        momentum=float(job.optimizer.momentum),
        nesterov=job.optimizer.nesterov,
    )
    optimizer.build(variables)

    @tf.function
    def step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = segmentation_loss(logits, labels, IGNORE_INDEX)
            total = loss + weight_decay * l2_loss(decayed) if weight_decay else loss
        grads = tape.gradient(total, variables)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    return step, model


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--encoder", default="tiny", help="ViT encoder (B_16 = Segmenter's)")
    ap.add_argument("--image-size", type=int, default=64, help="crop (512 = Segmenter's)")
    ap.add_argument("--decoder", default="mask", choices=list(segmenter.DECODERS))
    ap.add_argument("--weight-decay", type=float, default=None, help="default: the schema's")
    # 20: on a shared 2-core machine one ~90 ms step varies by +-15 % round to round; 10
    # rounds left the median ratio +-3 % noisy (1.055, then 1.022 and 0.983 with 20)
    ap.add_argument("--rounds", type=int, default=20, help="alternating rounds")
    ap.add_argument("--steps", type=int, default=8, help="steps per variant per round")
    ap.add_argument("--warmup-steps", type=int, default=2, help="per variant, untimed")
    ap.add_argument("--distinct-batches", type=int, default=4, help="batches both cycle")
    ap.add_argument("--images", type=int, default=16, help="synthetic train images")
    ap.add_argument("--size", type=int, nargs=2, default=ADE20K_SIZE, metavar=("W", "H"))
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=0, help="TF op threads (0: all usable CPUs)")
    ap.add_argument("--tmp", default=None, help="scratch folder (default: system temp)")
    args = smoke.parse_args(
        ap,
        argv,
        batch=2,
        image_size=32,
        images=4,
        size=(64, 48),
        **smoke.STEP_LOOP,
    )

    if args.threads:
        tf_trainer.limit_threads(args.threads)
    scratch = Path(tempfile.mkdtemp(prefix="bench_segmenter_step.", dir=args.tmp))
    try:
        prepared = make_prepared(scratch, args.images, tuple(args.size), shards=2)
        cfg = train_slice(args.encoder, args.image_size, args.batch, args.precision, False)
        cfg["model"]["decoder"] = args.decoder
        if args.weight_decay is not None:
            cfg["train"]["weight_decay"] = args.weight_decay
        job, trainer = build_segmenter_trainer(prepared, cfg, scratch / "work")
        batches = fetch_batches(job, trainer, args.distinct_batches)
        train = cfg["train"]
        minimal, model = minimal_step(job, train["seed"], train["weight_decay"])
        same_init = same_weights(job.model, model)
        variants = {"ours": trainer._step_fn, "minimal": minimal}
        times, cpu = alternate(variants, batches, args.rounds, args.steps, args.warmup_steps)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    result: dict[str, Any] = {
        "bench": "segmenter_step",
        "smoke": args.smoke,
        "device": "cpu",
        "precision": args.precision,
        "batch": args.batch,
        "encoder": args.encoder,
        "image_size": args.image_size,
        "decoder": args.decoder,
        "weight_decay": train["weight_decay"],
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
