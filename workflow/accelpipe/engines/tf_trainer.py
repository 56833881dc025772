"""The TensorFlow training loop shared by the TensorFlow workloads.

A custom loop, not `model.fit`, so that it honours the engine contract feature for feature
with the PyTorch engine: the same train_log.csv columns, epoch checkpoints in the work
directory that a killed job resumes from (tf.train.CheckpointManager), the same profiler
schedule keys, and the reference's sections in the trace. The step is one `tf.function`
(XLA with `train.compile`): sections inside it are `tf.name_scope`s (`forward`, `loss`,
`backward`, `optimizer_step`), which the profiler records as op-name prefixes; sections
outside it (`loader_first`, `loader_next`, `step`) and the step markers are profiler
`Trace` events. Each profiler cycle's XSpace is converted to a Chrome-trace JSON (xprof)
for the one trace summarizer.

With `train.devices` > 1 the stage launches one worker per device (launch.tf_launch)
and each trains under MultiWorkerMirroredStrategy (Habana's HPUStrategy on gaudi:
tf_device.multi_worker_strategy) on its own shard of the data; worker 0 writes the log,
checkpoints, traces and weights.

A workload supplies the model, the loss, the per-epoch dataset and the optimizer; Keras 2
comes from keras2 on every TensorFlow this supports (2.15 to 2.21).

`train.deterministic` (the schema's default: on) makes a run a function of its config and
seed: Keras, NumPy and Python seeded as before, TensorFlow's op determinism on
(tf_device.set_determinism) and the input pipeline's elements kept in order (tf.data's
`deterministic` option; the pipelines draw their augmentations with stateless ops keyed by
the element, so their maps stay parallel). Two runs on the same hardware, software and
thread counts log the same losses and end with the same weights. A resumed run continues the
same sequence: each epoch's data comes from (seed, epoch) alone and the checkpoint holds the
rest, except the state of stateful random ops inside the model (dropout, drop-path), which
restart with the process. Off: ops pick their fastest kernels and tf.data may hand out
elements out of order.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from accelpipe.config.settings import PROFILE_OFF, ProfileSettings, TFTrain, TrainSlice
from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.io import free_space, write_gzip_text, write_text
from accelpipe.core.keras2 import keras, tf
from accelpipe.core.xspace import xspace_to_op_table, xspace_to_trace_json
from accelpipe.devices import tf_device, tf_gemm
from accelpipe.devices.power import NoPower, PowerMeter
from accelpipe.devices.tf_device import TFDevice
from accelpipe.engines import ENGINES, run_sequence, tf_flops
from accelpipe.engines.attempts import Attempts
from accelpipe.engines.evaluations import InTraining, InTrainingEval
from accelpipe.engines.run_log import RunLog
from accelpipe.engines.run_sequence import Place
from accelpipe.engines.train_log import Interval, log_row, open_log, truncate_log
from accelpipe.inputs.tf_data_checks import data_errors
from accelpipe.launch import tf_launch
from accelpipe.launch.tf_launch import InputShard

MODEL_FILE = ENGINES["tensorflow"].weights
PROFILER_TABLE = ENGINES["tensorflow"].profiler_table
(CHECKPOINT_DIR,) = ENGINES["tensorflow"].checkpoints
log = logging.getLogger(__name__)


@dataclass
class TFTrainJob:
    """What a workload hands the loop (built under the device's precision policy)."""

    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    loss_fn: Callable[[Any, Any], tf.Tensor]  # (model outputs, targets) -> reported loss
    # (epoch, this worker's shard) -> that epoch's (inputs, targets) batches of the shard's
    # batch size, from the shard's part of the data; at least steps_per_epoch of them
    dataset: Callable[[int, InputShard], tf.data.Dataset]
    steps_per_epoch: int
    batch_size: int  # global
    # Variables the optimizer updates (frozen layers left out); default: all trainable.
    variables: list[tf.Variable] | None = None
    # Added to the loss for the gradients only (a coupled L2 term); not logged.
    regularization: Callable[[], tf.Tensor] | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # added to the train stage.json
    # scores the model on the validation split (train.eval_every > 0 needs it)
    evaluation: InTrainingEval | None = None


# workload hook: (train settings, device) -> the job to run
Train = TypeVar("Train", bound=TFTrain)
JobFactory = Callable[[Train, TFDevice], TFTrainJob]

# The engine contract's process hooks (accelpipe.engines): threads of TF's op pools.
limit_threads = tf_device.limit_threads


launch_training = tf_launch.launch_training


def in_worker() -> bool:
    """A process started by a multi-worker launch (TF_CONFIG names its cluster role)."""
    return "TF_CONFIG" in os.environ


def run_training(
    cfg: TrainSlice, train_cfg: Train, work_dir: Path, make_job: JobFactory[Train]
) -> dict[str, Any] | None:
    """Train a workload's job into `work_dir`, resuming from its checkpoint if present
    (run_sequence.run, by `TFRun`'s steps).

    Writes the model's weights (MODEL_FILE) and returns the run facts for stage.json on the
    chief; the other workers of a multi-worker run return None. The chief meters the energy
    of the devices it sees from the start to the end of training (engines.energy.power_meter): per
    logged step in train_log.csv, in all in the facts' `power`.
    """
    return run_sequence.run(TFRun(make_job), cfg, train_cfg, work_dir)


class TFRun(Generic[Train]):
    """The TensorFlow steps of the run sequence (run_sequence.EngineRun) for one job: op
    determinism held for the run, the worker's place in the cluster, the strategy made before
    TensorFlow runs any op, the job built in the strategy's scope."""

    def __init__(self, make_job: JobFactory[Train]) -> None:
        self.make_job = make_job

    @contextlib.contextmanager
    def session(self, backend: str, train: Train) -> Iterator[Place]:
        with tf_device.determinism(train.deterministic):
            self.index, self.world = tf_launch.cluster()
            yield Place(self.index == 0, self.world)

    def prepare(self, backend: str, train: Train) -> TFDevice:
        # The strategy must exist before TensorFlow runs any op; one process: no strategy.
        self.strategy = tf_device.multi_worker_strategy(backend) if self.world > 1 else None
        self.device = tf_device.resolve(backend, train.precision)
        self.device.apply_policy()  # before the model is built: layers take the global policy
        keras.utils.set_random_seed(train.seed)  # the same on every worker: the same init
        return self.device

    def trainer(
        self,
        train: Train,
        profile: ProfileSettings,
        work_dir: Path,
        power: PowerMeter | NoPower,
        run_log: RunLog,
    ) -> TFTrainer:
        shard = InputShard(self.world, self.index, train.batch_size // self.world)
        place = self.strategy.scope() if self.strategy else tf.device(self.device.device)
        with place:
            self.job = self.make_job(train, self.device)
            return TFTrainer(
                self.job,
                self.device,
                train,
                profile,
                work_dir,
                shard,
                self.strategy,
                power,
                run_log,
            )

    def gemm(self) -> dict[str, Any]:
        with tf.device(self.device.device):
            gemm = tf_gemm.measure_gemm_tflops(self.device).as_dict()
        gemm["tf32_switches"] = tf_gemm.tf32_switches(self.device.backend)
        return gemm

    def save(self, work_dir: Path) -> None:
        """The chief's weights in `work_dir`; the other workers save too, and all wait for
        each other."""
        if self.index != 0:
            # Every worker saves: reading sync-on-read variables (BN moving statistics) is a
            # collective the chief would wait on forever. Only the chief's file is kept.
            with tempfile.TemporaryDirectory() as scratch:
                self.job.model.save_weights(str(Path(scratch) / MODEL_FILE))
        else:
            self.job.model.save_weights(str(work_dir / MODEL_FILE))
        if self.strategy is not None:
            # Once the chief returns, its stage moves the work directory into place and drops the
            # checkpoints, while a worker may still be writing its last one in there (a model
            # without sync-on-read variables saves with no collective to hold the chief back).
            _all_workers_done(self.strategy)


def _all_workers_done(strategy: tf.distribute.Strategy) -> None:
    """A barrier: a one-value all-reduce that returns on each worker once every worker has
    reached it."""
    ones = strategy.run(lambda: tf.constant(1.0))
    strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None)


def load_for_eval(
    model_dir: Path, cfg: dict[str, Any], build: Callable[[], keras.Model]
) -> tuple[keras.Model, TFDevice]:
    """The trained model from `model_dir`, built under the evaluate slice's precision."""
    device = tf_device.resolve(cfg["backend"], cfg["train"]["precision"])
    device.apply_policy()
    with tf.device(device.device):
        model = build()
        model.load_weights(str(model_dir / MODEL_FILE))
    return model, device


class TFTrainer:
    """Runs a TFTrainJob for `cfg.epochs`, resuming from the work dir's last checkpoint."""

    def __init__(
        self,
        job: TFTrainJob,
        device: TFDevice,
        cfg: TFTrain,
        profile: ProfileSettings,
        work_dir: Path,
        shard: InputShard | None = None,
        strategy: tf.distribute.Strategy | None = None,
        power: PowerMeter | NoPower | None = None,
        run_log: RunLog | None = None,
    ) -> None:
        self.job, self.device, self.cfg, self.work_dir = job, device, cfg, work_dir
        self.power = power  # its running joules: each log row's energy_j (none: empty)
        self.deterministic = cfg.deterministic
        self.shard = shard or InputShard(1, 0, job.batch_size)
        self.strategy = strategy
        self.chief = self.shard.index == 0
        self.variables = (
            job.variables if job.variables is not None else job.model.trainable_variables
        )
        self.optimizer = job.optimizer
        if device.loss_scaling:  # fp16 only
            self.optimizer = keras.mixed_precision.LossScaleOptimizer(job.optimizer)
        # Slots now, not lazily in the first step: one trace of the step, clean first timings.
        job.optimizer.build(self.variables)
        self._epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._run_s = tf.Variable(0.0, dtype=tf.float64, trainable=False)  # RunClock's
        checkpoint = tf.train.Checkpoint(
            model=job.model,
            optimizer=self.optimizer,
            epoch=self._epoch,
            step=self._step,
            run_s=self._run_s,
        )
        # Every worker saves (the save is collective); only the chief's copy is kept.
        folder = CHECKPOINT_DIR if self.chief else f".{CHECKPOINT_DIR}-worker{self.shard.index}"
        self._scratch = None if self.chief else work_dir / folder
        self.manager = tf.train.CheckpointManager(checkpoint, str(work_dir / folder), max_to_keep=1)
        self._restore_from = work_dir / CHECKPOINT_DIR
        self.profiler = _Profiler(profile if self.chief else PROFILE_OFF, work_dir)
        self.in_training = InTraining(
            work_dir, cfg, job.evaluation, writes=self.chief, run_log=run_log
        )
        self.attempts = Attempts(work_dir, writes=self.chief)  # begun by `resume`
        # FLOPs of the train step, counted on the first batch (stage.json's `flops`)
        self.flops: dict[str, Any] | None = (
            {"reason": "multi-worker: the step runs inside strategy.run, not counted"}
            if strategy is not None
            else None
        )
        # The step is Python around graph ops, no Python branch on a tensor: AutoGraph's
        # conversion of it and of every Keras layer's call took seconds and changed nothing.
        if strategy is None:
            self._step_fn = tf.function(self._train_step, jit_compile=cfg.compile, autograph=False)
        else:
            replica_step = tf.function(self._train_step, jit_compile=cfg.compile, autograph=False)

            @tf.function(autograph=False)
            def distributed_step(inputs: Any, targets: Any) -> tf.Tensor:
                losses = strategy.run(replica_step, args=(inputs, targets))
                return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

            self._step_fn = distributed_step

    @property
    def epoch(self) -> int:
        return int(self._epoch.numpy())

    @property
    def compiled(self) -> bool:
        return self.cfg.compile

    @property
    def global_batch(self) -> int:
        return self.job.batch_size

    def job_facts(self) -> dict[str, Any]:
        """The workload's facts and those of the evaluations inside training (stage.json)."""
        return self.job.facts | self.in_training.facts()

    @property
    def step(self) -> int:
        return int(self._step.numpy())

    def _save_checkpoint(self) -> None:
        """A full disk is one DataError naming the checkpoint folder; the last checkpoint
        stays whole (TF writes a new one beside it, into a temporary it drops here)."""
        try:
            self.manager.save(checkpoint_number=self.step)
        except tf.errors.ResourceExhaustedError:  # TF's error for ENOSPC and EDQUOT
            folder = Path(self.manager.directory)
            shutil.rmtree(folder / f"ckpt-{self.step}_temp", ignore_errors=True)
            raise DataError(
                f"{folder}: no space left on device for the checkpoint of step {self.step} "
                f"({free_space(folder)}); free some space and rerun"
            ) from None

    def resume(self) -> bool:
        """Restore the last epoch checkpoint if one exists; return whether it did. Log rows
        past it (all of them without one: a run killed in its first epoch) are dropped."""
        latest = tf.train.latest_checkpoint(str(self._restore_from))  # the chief's, for all
        if latest is None:
            if self.chief:
                truncate_log(self.work_dir, 0)
            self.in_training.resume(0, 0.0, self._chiefs)
            self.attempts.begin(None)
            return False
        self.manager.checkpoint.restore(latest).assert_existing_objects_matched()
        self.in_training.resume(self.step, float(self._run_s.numpy()), self._chiefs)
        if self.chief:
            truncate_log(self.work_dir, self.step)
        self.attempts.begin(self.step)
        return True

    def _chiefs(self, flag: bool) -> bool:
        """The chief's `flag` on every worker (a one-value all-reduce, as _all_workers_done)."""
        if self.strategy is None:
            return flag
        value = 1.0 if flag and self.chief else 0.0
        ones = self.strategy.run(lambda: tf.constant(value))
        return bool(self.strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None) > 0)

    def _count_flops(self, inputs: Any, targets: Any) -> dict[str, Any]:
        """The train step's FLOPs from its graph, traced on this batch's shapes (never run):
        the trace the step then runs."""
        try:
            count = tf_flops.count_step_flops(self._step_fn, (inputs, targets), self.job.batch_size)
        except ValueError as err:  # a shape the counter cannot read: the run goes on
            return {"reason": f"not counted: {err}"}
        return count.as_dict()

    def _train_step(self, inputs: Any, targets: Any) -> tf.Tensor:
        scaling = self.device.loss_scaling
        with tf.GradientTape() as tape:
            with tf.name_scope("forward"):
                outputs = self.job.model(inputs, training=True)
            with tf.name_scope("loss"):
                loss = self.job.loss_fn(outputs, targets)
                total = (
                    loss if self.job.regularization is None else loss + self.job.regularization()
                )
                # Replicas' gradients are summed: each contributes its share of the mean.
                total = total / tf.distribute.get_strategy().num_replicas_in_sync
                if scaling:
                    total = self.optimizer.get_scaled_loss(total)
        with tf.name_scope("backward"):
            grads = tape.gradient(total, self.variables)
            if scaling:
                grads = self.optimizer.get_unscaled_gradients(grads)
        with tf.name_scope("optimizer_step"):
            self.optimizer.apply_gradients(zip(grads, self.variables, strict=True))
        return loss

    def _learning_rate(self) -> float:
        lr = self.job.optimizer.learning_rate
        if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
            lr = lr(self.job.optimizer.iterations)
        return float(tf.convert_to_tensor(lr))  # a (mirrored) variable or a tensor

    def fit(self) -> None:
        """Train to the last epoch, or to the first evaluation that reaches the target with
        train.stop_at_target; the run's clock starts here (initialisation is done). The
        attempt's record is written a last time at the end, a failed end too."""
        try:
            self._fit()
        finally:
            self.attempts.close()

    def _fit(self) -> None:
        self.in_training.start(self.epoch, self.device.name, self.job.batch_size)
        with self._open_log() as (log_file, writer):
            while self.epoch < self.cfg.epochs and not self.in_training.stopped:
                started = time.perf_counter()
                self.in_training.epoch_start(self.epoch + 1)
                losses = self._run_epoch(writer, log_file)
                self._epoch.assign_add(1)
                self.in_training.epoch_stop(self.epoch)
                # Every worker scores: reading BN's sync-on-read statistics is a collective.
                self.in_training.after_epoch(
                    self.epoch,
                    self.step,
                    self.step * self.job.batch_size,
                    self._score,
                    self._chiefs,
                )
                self._run_s.assign(self.in_training.clock.seconds())
                self.attempts.beat()  # before the checkpoint: its run clock never outruns it
                self._save_checkpoint()
                rate = (
                    self.job.steps_per_epoch * self.job.batch_size / (time.perf_counter() - started)
                )
                mean = sum(losses) / len(losses) if losses else float("nan")
                log.info(
                    "epoch %d/%d: mean logged loss %.4f, %.1f samples/s",
                    self.epoch,
                    self.cfg.epochs,
                    mean,
                    rate,
                )
        self.profiler.finish(self.step)
        self.in_training.end()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _score(self) -> Mapping[str, Any]:
        assert self.job.evaluation is not None  # InTraining scores only where there is one
        return self.job.evaluation.score(self.job.model)

    @contextlib.contextmanager
    def _open_log(self) -> Iterator[tuple[Any, Any]]:
        """train_log.csv on the chief; a sink that drops rows on the other workers."""
        if self.chief:
            with open_log(self.work_dir) as opened:
                yield opened
        else:
            yield _NullLog(), _NullLog()

    def _dataset(self, epoch: int) -> tf.data.Dataset:
        """The epoch's dataset, its elements in order or not as `train.deterministic` says
        (the option reaches every map and interleave that does not set its own)."""
        options = tf.data.Options()
        options.deterministic = self.deterministic
        return self.job.dataset(epoch, self.shard).with_options(options)

    def _batches(self, epoch: int) -> Iterator[Any]:
        if self.strategy is None:
            return iter(self._dataset(epoch))
        # One replica per worker: each worker's pipeline is its own shard, batched per worker.
        return iter(self.strategy.distribute_datasets_from_function(lambda _: self._dataset(epoch)))

    def _run_epoch(self, writer: Any, log_file: Any) -> list[float]:
        # Augmentation randomness per epoch: a resumed run sees the epochs it has not seen.
        tf.random.set_seed(self.cfg.seed * 100_003 + self.epoch)
        # the epoch's first logged step counts its pipeline start-up
        interval = Interval(joules=self.power.joules if self.power is not None else None)
        batches = self._batches(self.epoch)
        losses: list[float] = []
        for i in range(self.job.steps_per_epoch):
            step = self.step + 1
            with self.profiler.step(step):
                started = time.perf_counter()
                with tf.profiler.experimental.Trace("loader_first" if i == 0 else "loader_next"):
                    inputs, targets = _next_batch(batches, self.epoch, i)
                waited = time.perf_counter() - started
                if self.flops is None:
                    self.flops = self._count_flops(inputs, targets)
                with tf.profiler.experimental.Trace("step"), self._deterministic_kernels():
                    loss = self._step_fn(inputs, targets)
                    logged = step % self.cfg.log_every == 0
                    value = float(loss) if logged else None  # a sync only on logged steps
            self._step.assign_add(1)
            interval.add(self.job.batch_size)
            if value is not None:
                if not math.isfinite(value):
                    raise FloatingPointError(f"loss is {value} at step {step}")
                losses.append(value)
                elapsed = time.perf_counter() - started
            # A cycle's last step stops and exports the profile here: seconds that belong to
            # this profiled step's row (its wall_ms), not to the next, measured one.
            self.profiler.end_step(step)
            if value is not None:
                writer.writerow(
                    log_row(
                        self.epoch + 1,  # counted from 1, as eval_log.csv and mllog.txt
                        step,
                        value,
                        self._learning_rate(),
                        self.job.batch_size,
                        waited,
                        elapsed,
                        interval=interval,
                        profiled=self.profiler.profiled(step),
                    )
                )
                log_file.flush()  # a killed job leaves its log up to the last step it ran
        return losses

    @contextlib.contextmanager
    def _deterministic_kernels(self) -> Iterator[None]:
        """An op with no deterministic kernel under train.deterministic (TensorFlow raises
        UnimplementedError: e.g. XLA's MaxPool gradient, which SSD's stem needs with
        train.compile): one line naming the keys that choose."""
        try:
            yield
        except tf.errors.UnimplementedError as err:
            if not self.deterministic or "determinis" not in err.message.lower():
                raise
            what = err.message.strip().splitlines()[0].strip()
            other = ", or train.compile: false" if self.cfg.compile else ""
            raise ConfigError(
                f"train.deterministic: {what} (TensorFlow has no deterministic kernel for an op "
                f"of this model here); set train.deterministic: false{other}"
            ) from None


class _NullLog:
    """Stands in for the log file and its writer on workers other than the chief."""

    def writerow(self, row: Any) -> None:
        pass

    def flush(self) -> None:
        pass


def _next_batch(batches: Any, epoch: int, index: int) -> Any:
    try:
        # a record failing an input-pipeline check, or a damaged shard: one line naming it
        with data_errors():
            return next(batches)
    except StopIteration:
        raise ConfigError(
            f"the dataset of epoch {epoch} ended after {index} batches; the workload must "
            "yield steps_per_epoch batches (repeat it)"
        ) from None


class _Profiler:
    """The profiler schedule (wait, warmup, active, repeat) on TF's start/stop.

    TF has no warm-up phase that records and discards: the `warmup` steps run unprofiled,
    like `wait`, and tracing starts at the first active step. Every step is marked with a
    `train <n>` event (TF's step marker, which xprof groups by). Each cycle's XSpace goes to
    `profile/cycle<k>/` (TensorBoard's profile plugin reads it) and is converted to
    `traces/trace_step<n>.json.gz`, the Chrome trace the summarizer reads, and to the op
    table beside it (`xspace_to_op_table`).
    """

    def __init__(self, profile: ProfileSettings, work_dir: Path) -> None:
        s = profile.schedule
        self.enabled = profile.enabled
        self.skip, self.active, self.repeat = s.wait + s.warmup, s.active, s.repeat
        self.wait = s.wait
        self.work_dir = work_dir
        self.running: Path | None = None

    def profiled(self, step: int) -> bool:
        """Whether `step` is in a scheduled cycle's warmup or active steps: the steps
        train_log.csv marks `profiled`, as the torch engine does (TF runs the warmup steps
        untraced; marking them too keeps both engines' statistics over the same steps)."""
        if not self.enabled:
            return False
        cycle, position = divmod(step - 1, self.skip + self.active)
        return (self.repeat == 0 or cycle < self.repeat) and position >= self.wait

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        cycle, position = divmod(step - 1, self.skip + self.active) if self.enabled else (0, -1)
        scheduled = self.enabled and (self.repeat == 0 or cycle < self.repeat)
        if scheduled and position == self.skip:
            self.running = self.work_dir / "profile" / f"cycle{cycle}"
            # an interrupted attempt's XSpace of this cycle would be converted with this one's
            shutil.rmtree(self.running, ignore_errors=True)
            tf.profiler.experimental.start(str(self.running))
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
            yield

    def end_step(self, step: int) -> None:
        """After the step is timed, before its row is logged: the cycle's last step stops and
        exports it (seconds of conversion in that profiled step's wall time, not its step
        time, nor the next step's)."""
        if self.running is None:
            return
        position = (step - 1) % (self.skip + self.active)
        if position == self.skip + self.active - 1:
            self._stop(step)

    def _stop(self, step: int) -> None:
        tf.profiler.experimental.stop()
        logdir, self.running = self.running, None
        assert logdir is not None  # end_step stops only a running trace
        traces = self.work_dir / "traces"
        traces.mkdir(parents=True, exist_ok=True)
        for xplane in sorted(logdir.glob("plugins/profile/*/*.xplane.pb")):
            stem = traces / f"trace_step{step:06d}"
            text = xspace_to_trace_json(xplane)
            write_gzip_text(f"{stem}.json.gz", text)
            write_text(f"{stem}{PROFILER_TABLE}", xspace_to_op_table(xplane))

    def finish(self, step: int) -> None:
        """A run that ends mid-cycle, at `step`: stop and convert what was recorded."""
        if self.running is not None:
            self._stop(step)
