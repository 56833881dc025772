"""The sequence a training process runs, written once for both engines, and the contract
(`EngineRun`) of the framework-specific steps each engine gives it.

`run` takes one process of a run from its start to its facts:

1. `EngineRun.session`: the process joins the run (its device and process group under
   PyTorch; op determinism and its place in the cluster under TensorFlow), left on any exit;
2. mllog.txt's initialisation starts (`RunLog`) and the power meter starts, on the process
   that writes the logs;
3. the global batch must split evenly over the processes;
4. `EngineRun.prepare`: seeds the random streams, resolves the device (and the distribution
   strategy) the job is built on;
5. the profile block's view, then `EngineRun.trainer`: the workload's job and its trainer;
6. the trainer resumes from the work directory's checkpoint, if there is one;
7. `EngineRun.gemm`: the measured matmul ceiling the run's FLOP rate is set against;
8. the trainer fits, the host's load measured around it (`HostWindow`);
9. `EngineRun.save`: the trained weights, written by the main process (with whatever the
   other processes must take part in);
10. on the main process only: the energy (`power_facts`) and the run facts for stage.json.

A failure anywhere leaves the power meter closed and the session left; the trainer closes its
own attempt record (`Trainer.fit`), and nothing is saved. This module imports no framework:
the engines (torch_trainer, tf_trainer) import it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from accelpipe.config.settings import ProfileSettings, TrainSettings, TrainSlice
from accelpipe.devices.host import HostWindow
from accelpipe.devices.power import NoPower, PowerMeter
from accelpipe.engines.energy import power_facts, power_meter
from accelpipe.engines.facts import run_facts
from accelpipe.engines.run_log import RunLog
from accelpipe.launch.workers import check_global_batch

TrainT = TypeVar("TrainT", bound=TrainSettings, contravariant=True)


@dataclass(frozen=True)
class Place:
    """This process's place in the run: whether it writes the logs, checkpoints and weights
    (rank 0, the chief), and how many processes train."""

    is_main: bool
    world_size: int


class RunDevice(Protocol):
    """What the run facts read of a resolved device (torch_device.Device, tf_device.TFDevice)."""

    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def precision(self) -> str: ...
    def peak_memory(self) -> tuple[int | None, str | None]: ...


@runtime_checkable
class Trainer(Protocol):
    """What the sequence asks of an engine's trainer."""

    @property
    def step(self) -> int:
        """Steps taken so far (the checkpoint's, after a resume)."""

    @property
    def flops(self) -> dict[str, Any] | None:
        """The FLOPs of one counted train step, or the reason there are none."""

    @property
    def compiled(self) -> bool:
        """Whether the step runs as a compiled graph (train.compile)."""

    @property
    def global_batch(self) -> int:
        """Samples per step over all processes."""

    def resume(self) -> bool:
        """Loads the work directory's last checkpoint; whether there was one."""

    def fit(self) -> None:
        """Trains to the last epoch (or the target); closes its attempt record, failing too."""

    def job_facts(self) -> dict[str, Any]:
        """The workload's facts and those of the evaluations inside training."""


@runtime_checkable
class EngineRun(Protocol[TrainT]):
    """One run's framework-specific steps, called by `run` in this order, once each; an
    implementation keeps what a step made (device, process group, job) for the later ones."""

    def session(self, backend: str, train: TrainT) -> AbstractContextManager[Place]:
        """Joins the run for the whole sequence; leaves it (a process group destroyed, a
        setting restored) on any exit."""

    def prepare(self, backend: str, train: TrainT) -> RunDevice:
        """Seeds the random streams the same on every process and returns the device the
        job is built on."""

    def trainer(
        self,
        train: TrainT,
        profile: ProfileSettings,
        work_dir: Path,
        power: PowerMeter | NoPower,
        run_log: RunLog,
    ) -> Trainer:
        """Builds the workload's job and the trainer that runs it into `work_dir`."""

    def gemm(self) -> dict[str, Any]:
        """The matmul ceiling measured on this device and precision, and the TF32 switches."""

    def save(self, work_dir: Path) -> None:
        """Writes the trained weights into `work_dir` on the main process; returns on each
        process once the others may no longer need it."""


def run(
    engine: EngineRun[TrainT], cfg: TrainSlice, train: TrainT, work_dir: Path
) -> dict[str, Any] | None:
    """Train into `work_dir` (resuming from its checkpoint) by `engine`'s steps: the run facts
    on the main process, None on the others. `cfg` is the train stage's slice as this process
    read it once (backend, profile, ...), `train` its train block as the workload's own
    settings class (`cfg.train_as`)."""
    backend = cfg.backend
    with engine.session(backend, train) as place:
        run_log = RunLog(work_dir, writes=place.is_main)  # initialisation starts
        with power_meter(backend, writes_log=place.is_main) as meter:
            check_global_batch(train.batch_size, place.world_size)
            device = engine.prepare(backend, train)
            trainer = engine.trainer(train, cfg.profile, work_dir, meter, run_log)
            resumed_from = trainer.step if trainer.resume() else None
            gemm = engine.gemm()
            host = HostWindow()  # other processes' CPU time over the training loop
            host.start()
            trainer.fit()
            host_facts = host.stop()
            engine.save(work_dir)
            if not place.is_main:
                return None
            energy = power_facts(
                meter, backend=device.backend, world_size=place.world_size, nodes=train.nodes
            )
            return run_facts(
                device,
                compiled=trainer.compiled,
                steps=trainer.step,
                resumed_from=resumed_from,
                world_size=place.world_size,
                global_batch=trainer.global_batch,
                job_facts=trainer.job_facts(),
                flops=trainer.flops,
                gemm=gemm,
                power=energy,
                host=host_facts,
            )
