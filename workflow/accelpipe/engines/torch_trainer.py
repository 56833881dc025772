"""The PyTorch training loop shared by the torch workloads.

A workload supplies the model, the loss and a per-epoch batch iterator; this
module owns the rest: device placement, autocast (with loss scaling for fp16), graph
mode (torch.compile), Gaudi mark_step, the optimizer and LR schedule (accelpipe.models.optim),
the profiler sections, per-step logging, and epoch checkpoints that let a killed job
resume.

With a `DistContext` of several processes the model trains data-parallel (DDP): each rank
feeds its shard of the global batch, gradients are averaged, and only rank 0 writes the log
(losses averaged over ranks), traces and checkpoints. Checkpoints hold the bare model's state
dict, so a job may resume with a different number of processes.

Everything is written into a *work* directory that lives outside the rule's
declared outputs; the train stage moves it onto the output only once training is
complete, so a partial run never looks finished. The run's sequence (device, run log,
power meter, resume, fit, save, facts) is engines.run_sequence's; `TorchRun` gives it the
PyTorch steps.
"""

from __future__ import annotations

import contextlib
import logging
import math
import pickle
import random
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from accelpipe.config.settings import ProfileSettings, TorchTrain, TrainSlice
from accelpipe.core.errors import DataError
from accelpipe.core.io import disk_full_names, gzip_file, write_text
from accelpipe.devices import torch_device, torch_gemm
from accelpipe.devices.power import NoPower, PowerMeter
from accelpipe.devices.torch_device import Device
from accelpipe.engines import ENGINES, MEMORY_SNAPSHOT, run_sequence, torch_flops
from accelpipe.engines.attempts import Attempts
from accelpipe.engines.evaluations import InTraining, InTrainingEval
from accelpipe.engines.run_log import RunLog
from accelpipe.engines.run_sequence import Place
from accelpipe.engines.train_log import (
    LOG_FIELDS,
    SECTIONS,
    Interval,
    LogWriter,
    log_row,
    open_log,
    truncate_log,
)
from accelpipe.launch import torch_launch
from accelpipe.launch.torch_launch import DistContext
from accelpipe.models import optim

__all__ = [
    "LOG_FIELDS",
    "SECTIONS",
    "TorchRun",
    "TrainJob",
    "Trainer",
    "in_worker",
    "launch_training",
    "limit_threads",
    "load_for_eval",
    "run_training",
]
(CHECKPOINT,) = ENGINES["pytorch"].checkpoints
MODEL_FILE = ENGINES["pytorch"].weights
PROFILER_TABLE = ENGINES["pytorch"].profiler_table
TABLE_ROWS = 100  # rows of each cycle's key-averages table

Batch = tuple[torch.Tensor, torch.Tensor]
log = logging.getLogger(__name__)
# The schedule's actions that run the profiler (warming up or recording): the steps
# train_log.csv marks `profiled`.
PROFILING = (
    torch.profiler.ProfilerAction.WARMUP,
    torch.profiler.ProfilerAction.RECORD,
    torch.profiler.ProfilerAction.RECORD_AND_SAVE,
)


@dataclass
class TrainJob:
    """What a workload hands the loop."""

    model: torch.nn.Module
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]
    batches: Callable[[int], Iterable[Batch]]  # epoch -> that epoch's batches (this rank's shard)
    steps_per_epoch: int
    # DDP must be told when some parameters get no gradient in a step (it costs a graph walk).
    find_unused_parameters: bool = False
    checkpoint: dict[str, Any] = field(default_factory=dict)  # saved in model.pt beside weights
    facts: dict[str, Any] = field(default_factory=dict)  # added to the train stage.json
    # scores the bare model on the validation split (train.eval_every > 0 needs it)
    evaluation: InTrainingEval | None = None


# workload hook: (its train settings, device, process group) -> the job to run
Train = TypeVar("Train", bound=TorchTrain)
JobFactory = Callable[[Train, Device, DistContext], TrainJob]

# The engine contract's process hooks (accelpipe.engines): the train and evaluate stages call
# them on the workload's engine. Threads: torch's intra-op pool; launch: torchrun (srun under
# Slurm) starting one process per device, each rerunning the stage as a worker.
limit_threads = torch_device.limit_threads
launch_training = torch_launch.launch_training
in_worker = torch_launch.in_worker


def run_training(
    cfg: TrainSlice,
    train_cfg: Train,
    work_dir: Path,
    make_job: JobFactory[Train],
    auto_precision: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """Train a workload's job into `work_dir`, resuming from its checkpoint if present
    (run_sequence.run, by `TorchRun`'s steps).

    `cfg` is the train stage's slice as this process read it (backend, train, profile, ...),
    `train_cfg` its train block as the workload's own settings class. Writes model.pt (the
    bare model's weights plus `job.checkpoint`) on rank 0 and returns the run facts there; the
    other ranks of a multi-process run return None. Rank 0 meters the energy of the devices
    from the start to the end of training (engines.energy.power_meter): per logged step in
    train_log.csv, in all in the facts' `power`.
    """
    return run_sequence.run(TorchRun(make_job, auto_precision), cfg, train_cfg, work_dir)


class TorchRun(Generic[Train]):
    """The PyTorch steps of the run sequence (run_sequence.EngineRun) for one job: the device
    resolved for this rank before the process group joins, the job built on both."""

    def __init__(
        self, make_job: JobFactory[Train], auto_precision: dict[str, str] | None = None
    ) -> None:
        self.make_job, self.auto_precision = make_job, auto_precision

    @contextlib.contextmanager
    def session(self, backend: str, train: Train) -> Iterator[Place]:
        self.device = torch_device.resolve(
            backend,
            train.precision,
            train.channels_last,
            torch_launch.local_rank(),
            self.auto_precision,
        )
        self.ctx = torch_launch.init_from_env(self.device)
        try:
            yield Place(self.ctx.is_main, self.ctx.world_size)
        finally:
            self.ctx.destroy()

    def prepare(self, backend: str, train: Train) -> Device:
        seed_everything(train.seed)  # the same on every rank: same init, same batches
        return self.device

    def trainer(
        self,
        train: Train,
        profile: ProfileSettings,
        work_dir: Path,
        power: PowerMeter | NoPower,
        run_log: RunLog,
    ) -> Trainer:
        self.job = self.make_job(train, self.device, self.ctx)
        self.trained = Trainer(
            self.job,
            self.device,
            train,
            profile,
            work_dir,
            dist=self.ctx,
            power=power,
            run_log=run_log,
        )
        return self.trained

    def gemm(self) -> dict[str, Any]:
        gemm = torch_gemm.measure_gemm_tflops(self.device).as_dict()
        gemm["tf32_switches"] = torch_gemm.tf32_switches(self.device.backend)
        return gemm

    def save(self, work_dir: Path) -> None:
        """model.pt on rank 0: the bare model's weights and the job's checkpoint facts."""
        if self.ctx.is_main:
            weights = {"state_dict": self.trained.model.state_dict(), **self.job.checkpoint}
            save_file(weights, work_dir / MODEL_FILE)


def save_file(obj: Any, path: Path) -> None:
    """torch.save `obj` to `path` through a temporary beside it, so an earlier `path` stays
    whole; a full disk is one DataError naming `path` (torch's own file writer would only say
    "unexpected pos")."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with disk_full_names(path), tmp.open("wb") as fh:
            torch.save(obj, fh)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def load_file(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    """What `save_file` wrote: a model.pt or checkpoint.pt, loaded with weights_only=True.

    Both hold only tensors, dicts, lists, tuples, numbers, strings and None (a test walks a
    real one), which torch's weights-only unpickler allows without any allow-list. A file
    needing anything more (a class, a function: what a planted file runs code with) is
    refused as one DataError naming it, before any of it is built."""
    try:
        loaded = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise DataError(
            f"{path}: refused to load: it needs {_refused_part(err)}, which no file accelpipe "
            "writes holds (only tensors, numbers, strings, lists and dicts); it was made or "
            "changed by something else: delete it (and retrain) unless you know where it came from"
        ) from None
    except (EOFError, RuntimeError) as err:
        if isinstance(err, RuntimeError) and "PytorchStreamReader" not in str(err):
            raise
        reason = str(err).split(". ")[0] or "it ends too early"
        raise DataError(f"{path} is not a whole torch file ({reason}); delete it") from None
    if not isinstance(loaded, dict):
        raise DataError(f"{path} holds a {type(loaded).__name__}, not the dict accelpipe saves")
    return loaded


def _refused_part(err: pickle.UnpicklingError) -> str:
    """What torch's weights-only unpickler refused (`posix.system`), from its long message,
    which words it differently from release to release."""
    found = re.search(r"GLOBAL ([\w.]+)", str(err))
    return f"`{found.group(1)}`" if found else "more than plain data"


def load_for_eval(
    model_dir: Path,
    cfg: dict[str, Any],
    build: Callable[[dict[str, Any]], torch.nn.Module],
    auto_precision: dict[str, str] | None = None,
) -> tuple[torch.nn.Module, Device, dict[str, Any]]:
    """The trained model from `model_dir/model.pt`, on the evaluate slice's device, in eval mode.

    `build(checkpoint)` makes the architecture from what the workload saved beside the weights.
    """
    checkpoint = load_file(model_dir / MODEL_FILE, "cpu")
    train = cfg["train"]  # the precision it trained in; channels_last where the workload has it
    device = torch_device.resolve(
        cfg["backend"],
        train["precision"],
        train.get("channels_last") is True,
        auto=auto_precision,
    )
    model = device.prepare_model(build(checkpoint))
    model.load_state_dict(checkpoint["state_dict"])
    model.eval()
    return model, device, checkpoint


@contextlib.contextmanager
def _random_state_kept() -> Iterator[None]:
    """Python's, NumPy's and torch's random streams as they were: an evaluation inside
    training (a loader drawing its seed, a random transform) leaves the training as it
    would have been without it."""
    python, numpy_state = random.getstate(), np.random.get_state()
    cpu = torch.random.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Trainer:
    """Runs `TrainJob` for `cfg.epochs`, resuming from `work_dir/checkpoint.pt` if present.

    `model` is the bare model (what checkpoints and callers see); `replica` is what runs the
    steps: the DDP wrapper around `model` when `dist` has several processes, else `model`.
    `power`: the meter whose running joules each log row's `energy_j` takes (none: empty).
    """

    def __init__(
        self,
        job: TrainJob,
        device: Device,
        cfg: TorchTrain,
        profile: ProfileSettings,
        work_dir: Path,
        dist: DistContext | None = None,
        power: PowerMeter | NoPower | None = None,
        run_log: RunLog | None = None,
    ) -> None:
        self.job, self.device, self.cfg, self.profile = job, device, cfg, profile
        self.power = power
        self.dist = dist if dist is not None else DistContext()
        self.work_dir = work_dir
        self.trace_dir = work_dir / "traces"
        self._memory: torch_device.MemoryHistory | None = None  # while the profiler runs
        self.model = device.prepare_model(job.model)
        self.replica = self._replicate(self.model)
        if cfg.compile:  # graph mode; checkpoints keep saving the bare model's weights
            self.replica = device.compile(self.replica)
        self.optimizer = optim.build_optimizer(self.model, cfg, device)
        self.scheduler = optim.make_scheduler(
            self.optimizer, cfg, cfg.epochs * job.steps_per_epoch, job.steps_per_epoch
        )
        self.scaler = device.grad_scaler()  # fp16 only: bf16 and fp32 need no loss scaling
        self.epoch = 0
        self.step = 0
        self.in_training = InTraining(
            work_dir, cfg, job.evaluation, writes=self.dist.is_main, run_log=run_log
        )
        self.attempts = Attempts(work_dir, writes=self.dist.is_main)  # begun by `resume`
        # FLOPs of this process's first step, counted while it runs (stage.json's `flops`)
        self.flops: dict[str, Any] | None = (
            {"reason": "torch.compile: FlopCounterMode sees the compiled graph's ops only"}
            if cfg.compile
            else None
        )

    @property
    def compiled(self) -> bool:
        return self.cfg.compile

    @property
    def global_batch(self) -> int:
        return self.cfg.batch_size

    def job_facts(self) -> dict[str, Any]:
        """The workload's facts and those of the evaluations inside training (stage.json)."""
        return self.job.facts | self.in_training.facts()

    def _replicate(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.dist.world_size == 1:
            return model
        gpu = self.device.torch_device.type == "cuda"
        return DistributedDataParallel(
            model,
            device_ids=[self.device.torch_device] if gpu else None,
            find_unused_parameters=self.job.find_unused_parameters,
        )

    # -- checkpoints ---------------------------------------------------------
    def _save_checkpoint(self) -> None:
        """Rank 0 writes; every rank then waits, so none runs ahead of an unwritten checkpoint."""
        if self.dist.is_main:
            self._write_checkpoint()
        self.dist.barrier()

    def _write_checkpoint(self) -> None:
        state = {
            "epoch": self.epoch,
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "torch_rng": torch.random.get_rng_state(),
            "run_s": self.in_training.clock.seconds(),
        }
        self.attempts.beat()  # before the checkpoint: its run clock never outruns the record
        save_file(state, self.work_dir / CHECKPOINT)

    def resume(self) -> bool:
        """Load the last epoch checkpoint if one exists; return whether it did. Log rows past
        it (all of them without one: a run killed in its first epoch) are dropped."""
        path = self.work_dir / CHECKPOINT
        if not path.exists():
            if self.dist.is_main:
                truncate_log(self.work_dir, 0)
            self.in_training.resume(0, 0.0, self._rank0s)
            self.attempts.begin(None)
            return False
        state = load_file(path, self.device.torch_device)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        torch.random.set_rng_state(state["torch_rng"])
        self.epoch, self.step = state["epoch"], state["step"]
        self.in_training.resume(self.step, state.get("run_s", 0.0), self._rank0s)
        if self.dist.is_main:
            truncate_log(self.work_dir, self.step)
        self.attempts.begin(self.step)
        return True

    def _rank0s(self, flag: bool) -> bool:
        """Rank 0's `flag` on every rank."""
        return self.dist.rank0_flag(flag, self.device.torch_device)

    # -- the loop ------------------------------------------------------------
    def fit(self, on_epoch_end: Callable[[int], None] | None = None) -> None:
        """Train to the last epoch, or to the first evaluation that reaches the target with
        train.stop_at_target; the run's clock starts here (initialisation is done). The
        attempt's record is written a last time at the end, a failed end too."""
        try:
            self._fit(on_epoch_end)
        finally:
            self.attempts.close()

    def _fit(self, on_epoch_end: Callable[[int], None] | None) -> None:
        self.in_training.start(self.epoch, self.device.name, self.cfg.batch_size)
        with self._open_log() as (log_file, writer), self._profiler() as prof:
            while self.epoch < self.cfg.epochs and not self.in_training.stopped:
                started = time.perf_counter()
                self.in_training.epoch_start(self.epoch + 1)
                mean_loss, samples = self._run_epoch(writer, prof)
                self.epoch += 1
                self.in_training.epoch_stop(self.epoch)
                if log_file is not None:
                    log_file.flush()
                    rate = samples / (time.perf_counter() - started)
                    log.info(
                        "epoch %d/%d: mean logged loss %.4f, %.1f samples/s",
                        self.epoch,
                        self.cfg.epochs,
                        mean_loss,
                        rate,
                    )
                self.in_training.after_epoch(
                    self.epoch,
                    self.step,
                    self.step * self.cfg.batch_size,
                    self._score if self.dist.is_main else None,  # the others wait for it
                    self._rank0s,
                )
                self._save_checkpoint()
                if on_epoch_end is not None:
                    on_epoch_end(self.epoch)
        self.in_training.end()

    def _score(self) -> Mapping[str, Any]:
        """The workload's metrics of the bare model as it is, in inference mode, the random
        streams left as they were."""
        assert self.job.evaluation is not None  # InTraining scores only where there is one
        self.model.eval()
        with torch.no_grad(), _random_state_kept():
            metrics = self.job.evaluation.score(self.model)
        self.model.train()
        return metrics

    @contextlib.contextmanager
    def _open_log(self) -> Iterator[tuple[Any, LogWriter | None]]:
        """train_log.csv and its row writer on rank 0; (None, None) on the other ranks."""
        if not self.dist.is_main:
            yield None, None
            return
        with open_log(self.work_dir) as opened:
            yield opened

    def _run_epoch(
        self, writer: LogWriter | None, prof: torch.profiler.profile | None
    ) -> tuple[float, int]:
        """One epoch; returns the mean of the logged losses and the number of samples.

        Samples count the global batch (all ranks); logged losses are the mean over ranks.
        """
        self.replica.train()
        world = self.dist.world_size
        # the epoch's first logged step counts its loader start-up
        interval = Interval(joules=self.power.joules if self.power is not None else None)
        batches = iter(self.job.batches(self.epoch))
        losses: list[float] = []
        samples = 0
        for i in range(self.job.steps_per_epoch):
            started = time.perf_counter()
            with torch.profiler.record_function("loader_first" if i == 0 else "loader_next"):
                image, label = next(batches)
                image = self.device.to_device(image, image=True)
                label = self.device.to_device(label)
            waited = time.perf_counter() - started
            with torch.profiler.record_function("step"):
                loss = self._counted_step(image, label)
            self.step += 1
            samples += image.shape[0] * world
            interval.add(image.shape[0] * world)
            logged = self.step % self.cfg.log_every == 0
            if logged:
                # Every rank takes part (a collective) and so every rank sees the same value:
                # a non-finite loss stops all of them together. Syncs: only on logged steps.
                loss_value = self.dist.all_reduce_mean(loss).item()
                if not math.isfinite(loss_value):
                    raise FloatingPointError(f"loss is {loss_value} at step {self.step}")
                losses.append(loss_value)
                elapsed = time.perf_counter() - started
            # The action of this step, before prof.step() moves it to the next; a cycle's last
            # step exports its trace in prof.step(): seconds that belong to this profiled
            # step's row (its wall_ms), not to the next, measured one.
            profiled = prof is not None and prof.current_action in PROFILING
            if prof is not None:
                prof.step()
            if logged and writer is not None:
                writer.writerow(
                    log_row(
                        self.epoch + 1,  # counted from 1, as eval_log.csv and mllog.txt
                        self.step,
                        loss_value,
                        float(self.scheduler.get_last_lr()[0]),
                        image.shape[0] * world,
                        waited,
                        elapsed,
                        interval=interval,
                        profiled=profiled,
                    )
                )
        return (sum(losses) / len(losses) if losses else float("nan")), samples

    def _counted_step(self, image: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """The train step; this process's first is counted by the framework (a warm-up step:
        the counter's overhead stays out of the measured steps)."""
        if self.flops is not None:
            return self._train_step(image, label)
        with torch_flops.counting(image.shape[0]) as counted:
            loss = self._train_step(image, label)
        self.flops = counted().as_dict()
        return loss

    def _train_step(self, image: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self.device.autocast():
            with torch.profiler.record_function("forward"):
                preds = self.replica(image)
            with torch.profiler.record_function("loss"):
                loss = self.job.loss_fn(preds, label)
        with torch.profiler.record_function("backward"):
            self.scaler.scale(loss).backward()
            self.device.mark_step()
        with torch.profiler.record_function("optimizer_step"):
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.device.mark_step()
            self.scheduler.step()
        return loss.detach()

    @contextlib.contextmanager
    def _profiler(self) -> Iterator[torch.profiler.profile | None]:
        """The scheduled profiler, recording memory events too, and the allocator's memory
        history from here to the end of the first cycle (where the device keeps one)."""
        if not self.profile.enabled or not self.dist.is_main:  # one rank's trace is the sample
            yield None
            return
        s = self.profile.schedule
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        prof = torch.profiler.profile(
            activities=self.device.profiler_activities(),
            schedule=torch.profiler.schedule(
                wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat
            ),
            on_trace_ready=self._export_trace,
            record_shapes=False,
            profile_memory=True,  # [memory] events: the summary's peak memory per section
        )
        with self.device.memory_history() as self._memory, prof:
            yield prof

    def _export_trace(self, prof: torch.profiler.profile) -> None:
        """One cycle's gzipped chrome trace and, beside it, the profiler's key-averages table,
        named by the run's step (the profiler counts from 0 again in a resumed run, whose
        traces must not overwrite the first attempt's); after the first cycle, the memory
        snapshot."""
        stem = self.trace_dir / f"trace_step{self.step:06d}"
        # exported plain to a private temporary, then gzipped in large blocks: torch's own
        # .gz export writes each of a trace's lines to gzip at level 9 (seconds per cycle)
        with tempfile.TemporaryDirectory(dir=self.trace_dir, prefix=".export-") as scratch:
            plain = Path(scratch) / "trace.json"
            prof.export_chrome_trace(str(plain))
            gzip_file(plain, f"{stem}.json.gz")
        table = prof.key_averages().table(
            sort_by=self.device.profiler_sort_key(), row_limit=TABLE_ROWS
        )
        write_text(f"{stem}{PROFILER_TABLE}", table + "\n")
        if self._memory is not None:
            self._memory.dump(self.trace_dir / MEMORY_SNAPSHOT)  # stops it: later ones do nothing
