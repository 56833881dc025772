"""The generic training loop: logging, profiler sections, and resume equivalence."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest
import torch

from accelpipe.config import ProfileConfig, ProfileSchedule, TrainConfig
from accelpipe.devices import resolve
from accelpipe.engines.torch_trainer import CHECKPOINT, SECTIONS, Trainer, TrainJob, seed_everything

STEPS = 4


def _batches(epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Deterministic per epoch, as the real loaders are."""
    g = torch.Generator().manual_seed(1000 + epoch)
    return [
        (torch.randn(8, 3, generator=g), torch.randint(0, 2, (8,), generator=g))
        for _ in range(STEPS)
    ]


def _trainer(work: Path, epochs: int, profile: bool = False) -> Trainer:
    seed_everything(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    cfg = TrainConfig(epochs=epochs, lr=0.01, scheduler="cosine")
    sched = ProfileSchedule(wait=1, warmup=1, active=2, repeat=1)
    job = TrainJob(model, torch.nn.functional.cross_entropy, _batches, STEPS)
    return Trainer(job, resolve("cpu"), cfg, ProfileConfig(enabled=profile, schedule=sched), work)


class _Killed(Exception):
    pass


def _kill_after_first_epoch(epoch: int) -> None:
    if epoch == 1:
        raise _Killed


def _log_steps(work: Path) -> list[int]:
    with (work / "train_log.csv").open() as f:
        return [int(r["step"]) for r in csv.DictReader(f)]


def test_resumed_training_equals_uninterrupted_training(tmp_path: Path) -> None:
    straight = _trainer(tmp_path / "straight", epochs=3)
    straight.fit()

    first = _trainer(tmp_path / "resumed", epochs=3)
    with pytest.raises(_Killed):
        first.fit(on_epoch_end=_kill_after_first_epoch)
    assert (tmp_path / "resumed" / CHECKPOINT).exists()
    second = _trainer(tmp_path / "resumed", epochs=3)
    assert second.resume() and second.epoch == 1 and second.step == STEPS
    second.fit()

    for a, b in zip(
        straight.model.state_dict().values(), second.model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b)
    assert _log_steps(tmp_path / "resumed") == list(range(1, 3 * STEPS + 1))


def test_resume_drops_log_rows_written_after_the_checkpoint(tmp_path: Path) -> None:
    first = _trainer(tmp_path, epochs=2)
    with pytest.raises(_Killed):
        first.fit(on_epoch_end=_kill_after_first_epoch)
    with (tmp_path / "train_log.csv").open("a") as f:  # a killed epoch got this far
        f.write("1,5,0.5,0.01,10,1,1\n1,6,0.5,0.01,10,1,1\n")
    again = _trainer(tmp_path, epochs=2)
    again.resume()
    again.fit()
    assert _log_steps(tmp_path) == list(range(1, 2 * STEPS + 1))


def test_profiled_run_writes_a_trace_with_every_section(tmp_path: Path) -> None:
    _trainer(tmp_path, epochs=1, profile=True).fit()
    traces = list((tmp_path / "traces").glob("*.json.gz"))
    assert len(traces) == 1
    text = gzip.decompress(traces[0].read_bytes()).decode()
    for section in SECTIONS:
        assert f'"name": "{section}"' in text
    with (tmp_path / "train_log.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert all(float(r["samples_per_s"]) > 0 and float(r["loss"]) > 0 for r in rows)
    assert float(rows[0]["lr"]) > float(rows[-1]["lr"])  # cosine decays
