"""A tiny TensorFlow job for engine tests: a small Keras model on fixed random tensors."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from accelpipe.config.quality import QualityTarget
from accelpipe.config.settings import TFTrain
from accelpipe.core.keras2 import keras, tf
from accelpipe.devices.tf_device import TFDevice
from accelpipe.engines.evaluations import InTrainingEval
from accelpipe.engines.tf_trainer import TFTrainJob
from accelpipe.launch.tf_launch import InputShard

STEPS_PER_EPOCH = 3
BATCH = 4


def toy_dataset(epoch: int, shard: InputShard, delay_s: float = 0.0) -> tf.data.Dataset:
    """Fixed data per epoch (seeded by the epoch), so runs and resumes see the same batches.

    Worker i of n takes rows i, i+n, ... of every global batch, so n workers together see
    exactly the batches one process sees.
    """
    gen = tf.random.Generator.from_seed(1000 + epoch)
    x = gen.normal((STEPS_PER_EPOCH * BATCH, 8))
    y = tf.reduce_sum(x[:, :2], axis=1, keepdims=True)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shard(shard.num_workers, shard.index)
    data = data.batch(shard.batch_size, drop_remainder=True)
    if delay_s:  # a slow loader, so a test can kill the run between two checkpoints

        def slow(x: tf.Tensor) -> tf.Tensor:
            time.sleep(delay_s)
            return x

        data = data.map(lambda a, b: (tf.py_function(slow, [a], tf.float32), b))
        data = data.map(lambda a, b: (tf.ensure_shape(a, (shard.batch_size, 8)), b))
    return data


def make_job(cfg: TFTrain, device: TFDevice, delay_s: float = 0.0) -> TFTrainJob:
    model = keras.Sequential(
        [
            keras.layers.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )
    schedule = keras.optimizers.schedules.PolynomialDecay(cfg.lr, 100, cfg.lr / 10)
    optimizer = keras.optimizers.SGD(schedule, momentum=0.9)

    def loss_fn(pred: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(tf.square(pred - target))

    return TFTrainJob(
        model=model,
        optimizer=optimizer,
        loss_fn=loss_fn,
        dataset=lambda epoch, shard: toy_dataset(epoch, shard, delay_s),
        steps_per_epoch=STEPS_PER_EPOCH,
        batch_size=cfg.batch_size,
        regularization=lambda: (
            1e-4 * tf.add_n([tf.nn.l2_loss(v) for v in model.trainable_variables])
        ),
        facts={"toy": True},
    )


def validation_score(model: keras.Model) -> Mapping[str, Any]:
    """A real score of the toy regression, higher is better: 1 / (1 + MSE) on fixed points."""
    gen = tf.random.Generator.from_seed(7)
    x = gen.normal((32, 8))
    y = tf.reduce_sum(x[:, :2], axis=1, keepdims=True)
    mse = float(tf.reduce_mean(tf.square(tf.cast(model(x, training=False), tf.float32) - y)))
    return {"top1": round(1 / (1 + mse), 6)}


def evaluated_job(target: float | None) -> Callable[[TFTrain, TFDevice], TFTrainJob]:
    """`make_job` with an evaluation inside training against `target`."""
    goal = QualityTarget("resnet50", "top1", target, "a test", "1 / (1 + MSE) of the toy")

    def make(cfg: TFTrain, device: TFDevice) -> TFTrainJob:
        job = make_job(cfg, device)
        evaluation = InTrainingEval(
            validation_score,
            goal,
            train_samples=STEPS_PER_EPOCH * cfg.batch_size,
            eval_samples=32,  # validation_score's points
        )
        return dataclasses.replace(job, evaluation=evaluation)

    return make


def profile_custom_loop(logdir: Path, steps: int = 4) -> Path:
    """A training loop written outside the pipeline, profiled the way TF's guide shows:
    `tf.profiler.experimental.start(logdir)`, each step in
    `Trace("step", step_num=i, _r=1)`, stop. The step is a `tf.function` with the
    engines' name scopes and Adam (whose variable reads run while `forward` does). Returns
    the XSpace TF wrote: `logdir/plugins/profile/<run>/<host>.xplane.pb`."""
    tf.random.set_seed(7)
    model = keras.Sequential(
        [keras.layers.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.Adam(0.01)
    x, y = tf.random.normal((BATCH, 8)), tf.random.normal((BATCH, 1))

    @tf.function
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            with tf.name_scope("forward"):
                pred = model(x, training=True)
            with tf.name_scope("loss"):
                loss = tf.reduce_mean(tf.square(pred - y))
        with tf.name_scope("backward"):
            grads = tape.gradient(loss, model.trainable_variables)
        with tf.name_scope("optimizer_step"):
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    train_step(x, y)  # trace and build the optimizer's slots before profiling
    tf.profiler.experimental.start(str(logdir))
    try:
        for i in range(1, steps + 1):
            with tf.profiler.experimental.Trace("step", step_num=i, _r=1):
                train_step(x, y)
    finally:
        tf.profiler.experimental.stop()
    (xplane,) = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    return xplane
