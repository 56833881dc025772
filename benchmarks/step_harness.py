"""Shared by the step benchmarks: our Trainer's real step path on fixed batches, and timing
two variants in alternating rounds so machine noise hits both alike."""

from __future__ import annotations

import csv
import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from accelpipe.config.settings import PROFILE_OFF, ProfileSettings, TorchTrain
from accelpipe.devices import torch_device
from accelpipe.engines.torch_trainer import LOG_FIELDS, Trainer, TrainJob

Batch = tuple[torch.Tensor, torch.Tensor]


class TrainerSteps:
    """The real step path: `Trainer._run_epoch`, its loader replaced by fixed batches."""

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        train_cfg: TorchTrain,
        device: torch_device.Device,
        batches: list[Batch],
        work_dir: Path,
        profile: ProfileSettings,
    ) -> None:
        def fixed(epoch: int) -> itertools.islice:
            return itertools.islice(itertools.cycle(batches), job.steps_per_epoch)

        job = TrainJob(model, loss_fn, fixed, train_cfg.steps_per_epoch)
        self.trainer = Trainer(job, device, train_cfg, PROFILE_OFF, work_dir)
        self.profile = profile
        self.sink = open(os.devnull, "w", newline="")  # noqa: SIM115 - closed in close()
        # The rank-0 log row is part of every step, as in Trainer.fit.
        self.writer = csv.DictWriter(self.sink, fieldnames=LOG_FIELDS)

    def run(self, steps: int, profiled: bool = False) -> None:
        trainer = self.trainer
        trainer.job.steps_per_epoch = steps
        if not profiled:
            trainer._run_epoch(self.writer, None)
            return
        trainer.profile = self.profile
        try:
            with trainer._profiler() as prof:
                trainer._run_epoch(self.writer, prof)
        finally:
            trainer.profile = PROFILE_OFF

    def close(self) -> None:
        self.sink.close()


def timed(fn: Callable[[], None], device: torch_device.Device) -> tuple[float, float]:
    """(wall, process CPU) seconds of `fn()`; device work finished on both clocks. CPU time is
    less hit by other jobs' load."""
    sync = torch.cuda.synchronize if device.torch_device.type == "cuda" else (lambda: None)
    sync()
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    sync()
    return time.perf_counter() - wall, time.process_time() - cpu


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def alternate(
    variants: dict[str, Callable[[int], None]],
    rounds: int,
    steps: int,
    warmup_steps: int,
    device: torch_device.Device,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per-step (wall, CPU) seconds of each variant per round, order flipped every round
    (A B B A A B ...): each round's timings are seconds apart and share that moment's load."""
    for run in variants.values():
        timed(lambda run=run: run(warmup_steps), device)
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            w, c = timed(lambda name=name: variants[name](steps), device)
            wall[name].append(w / steps)
            cpu[name].append(c / steps)
    return wall, cpu


def loader_rate(batches: Iterator[Batch], n: int) -> tuple[float, float]:
    """(seconds to the first batch, samples/s over the next `n`): worker start-up and cache
    fill are not throughput."""
    started = time.perf_counter()
    next(batches)
    first = time.perf_counter() - started
    samples = 0
    started = time.perf_counter()
    for image, _ in itertools.islice(batches, n):
        samples += image.shape[0]
    return first, samples / (time.perf_counter() - started)
