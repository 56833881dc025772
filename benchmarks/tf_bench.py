"""Shared by the TensorFlow benchmarks (SSD, Segmenter): a workload's real train job captured
from its `train`, built as tf_trainer.run_training builds it, its batches held in memory,
the engine step timed on them, alternating rounds of two step variants, and the input
pipeline's batches/s."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from operator import truediv
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from accelpipe.config.schema import slice_schema, validate_slice
from accelpipe.config.settings import PROFILE_OFF, TFTrain, TrainSlice
from accelpipe.config.views import train_slice
from accelpipe.core.keras2 import keras, tf
from accelpipe.datasets.sources import make_raw
from accelpipe.devices import tf_device
from accelpipe.engines import tf_trainer
from accelpipe.engines.tf_trainer import JobFactory, TFTrainer, TFTrainJob

Step = Callable[[Any, Any], tf.Tensor]


def _workload_of(train: Callable[..., object]) -> str:
    """The workload whose `train` this is: accelpipe.workloads.<name>.workload."""
    return train.__module__.split(".")[2]


def make_prepared(
    dataset: ModuleType, scratch: Path, images: int, size: tuple[int, int], shards: int
) -> Path:
    """Synthetic TFRecords of `dataset` (datasets.coco or datasets.ade20k: train-*.tfrecord,
    val-*.tfrecord, dataset.json) in scratch, made by the package's own raw and prepare code."""
    name = dataset.SOURCES.dataset
    synthetic = {"train_images": images, "val_images": 2, "size": list(size), "seed": 0}
    raw_cfg = validate_slice(
        {"source": "synthetic", "synthetic": synthetic}, slice_schema("raw", dataset=name), "raw"
    )
    raw = scratch / "raw"
    make_raw(dataset.SOURCES, raw_cfg, raw, scratch / "downloads")
    options = validate_slice(
        {"prepare": {"train_shards": shards, "val_shards": 1}},
        slice_schema("prepare", dataset=name, variant="tfrecord"),
        "prepare",
    )
    return dataset.prepare_variant("tfrecord", raw, scratch / "prepared", options, workers=2)


def capture_job_factory(
    train: Callable[[Path, str, TrainSlice, Path], Any],
    prepared: Path,
    run: str,
    cfg: dict[str, Any],
    work_dir: Path,
) -> tuple[JobFactory, TFTrain]:
    """The `make_job` and train settings a workload's `train(prepared, run, cfg, work_dir)`
    hands tf_trainer.run_training, unchanged (run_training is stood in for while `train`
    runs); `cfg` read once as the train stage reads it (its workload: `train`'s module)."""
    captured: list[tuple[JobFactory, TFTrain]] = []

    def capture(
        cfg_: TrainSlice, train_cfg: TFTrain, work_dir_: Path, make_job: JobFactory
    ) -> dict:
        captured.append((make_job, train_cfg))
        return {}

    real = tf_trainer.run_training
    tf_trainer.run_training = capture
    try:
        train(prepared, run, train_slice(_workload_of(train), cfg), work_dir)
    finally:
        tf_trainer.run_training = real
    if len(captured) != 1:
        raise RuntimeError(f"{train.__module__}.train no longer calls run_training once")
    return captured[0]


def build_trainer(
    factory: tuple[JobFactory, TFTrain], cfg: dict[str, Any], work_dir: Path
) -> tuple[TFTrainJob, TFTrainer]:
    """The job and trainer as tf_trainer.run_training builds them in a one-process run
    (device policy, seed, then the job and a TFTrainer with the profiler off)."""
    make_job, train_cfg = factory
    device = tf_device.resolve(cfg["backend"], train_cfg.precision)
    device.apply_policy()
    keras.utils.set_random_seed(train_cfg.seed)
    with tf.device(device.device):
        job = make_job(train_cfg, device)
        trainer = TFTrainer(job, device, train_cfg, PROFILE_OFF, work_dir)
    return job, trainer


def fetch_batches(job: TFTrainJob, trainer: TFTrainer, count: int) -> list[Any]:
    """`count` batches of the job's epoch-0 pipeline, held in memory."""
    batches = iter(job.dataset(0, trainer.shard))
    return [next(batches) for _ in range(count)]


def step_seconds(step: Step, batches: list[Any], steps: int) -> tuple[float, float]:
    """(wall, process CPU) seconds per step over `steps` steps cycling `batches`, the loss
    read at the end. CPU time is less hit by other jobs' load."""
    wall, cpu = time.perf_counter(), time.process_time()
    loss = None
    for i in range(steps):
        inputs, targets = batches[i % len(batches)]
        loss = step(inputs, targets)
    float(loss)
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def alternate(
    variants: dict[str, Step], batches: list[Any], rounds: int, steps: int, warmup_steps: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per-step (wall, CPU) seconds of each variant per round after `warmup_steps` untimed
    steps of each (the first traces), the order flipped every round (A B B A A B ...) so
    drift and other jobs' load hit both alike."""
    for fn in variants.values():
        step_seconds(fn, batches, warmup_steps)
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            w, c = step_seconds(variants[name], batches, steps)
            wall[name].append(w)
            cpu[name].append(c)
    return wall, cpu


def step_ratio(
    times: dict[str, list[float]], cpu: dict[str, list[float]], target: float
) -> dict[str, Any]:
    """ours vs minimal from `alternate`'s per-round seconds: the median of the per-round
    ratios (the headline), two cross-checks and the per-variant step times."""
    ratio = statistics.median(map(truediv, times["ours"], times["minimal"]))
    return {
        "target": target,
        "ratio": round(ratio, 4),
        "meets_target": ratio <= target,
        "ratio_of_medians": round(
            statistics.median(times["ours"]) / statistics.median(times["minimal"]), 4
        ),
        "ratio_of_best": round(min(times["ours"]) / min(times["minimal"]), 4),
        # CPU time of this process: less hit by other jobs' load than wall time.
        "ratio_cpu_time": round(statistics.median(map(truediv, cpu["ours"], cpu["minimal"])), 4),
        "step_ms": {k: round(statistics.median(v) * 1e3, 1) for k, v in times.items()},
        "step_ms_rounds": {k: [round(t * 1e3, 1) for t in v] for k, v in times.items()},
        "cpu_ms": {k: round(statistics.median(v) * 1e3, 1) for k, v in cpu.items()},
    }


def input_rate(dataset: tf.data.Dataset, warmup: int, count: int, rounds: int) -> float:
    """Median batches/s of `rounds` runs of `count` batches, each after `warmup` batches
    (the reader start-up and the prefetch fill are not throughput)."""
    rates = []
    for _ in range(rounds):
        batches = iter(dataset)
        for _ in range(warmup):
            next(batches)
        started = time.perf_counter()
        for _ in range(count):
            next(batches)
        rates.append(count / (time.perf_counter() - started))
    return statistics.median(rates)


def same_weights(a: keras.Model, b: keras.Model) -> bool:
    wa, wb = a.get_weights(), b.get_weights()
    return len(wa) == len(wb) and all(np.array_equal(x, y) for x, y in zip(wa, wb, strict=True))


def sig(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant digits (step rates of the full models are ~0.03/s)."""
    return float(f"{x:.{digits}g}")
