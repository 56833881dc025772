"""The generic training loop: logging, profiler sections, and resume equivalence."""

from __future__ import annotations

import contextlib
import csv
import gzip
import json
import os
import re
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity

from accelpipe.config.settings import ProfileSchedule, ProfileSettings, TorchTrain
from accelpipe.devices import power
from accelpipe.devices.torch_device import Device, resolve
from accelpipe.engines import MEMORY_SNAPSHOT, energy, run_sequence
from accelpipe.engines.torch_trainer import (
    CHECKPOINT,
    PROFILER_TABLE,
    PROFILING,
    SECTIONS,
    TorchRun,
    Trainer,
    TrainJob,
    seed_everything,
)
from accelpipe.engines.train_log import SCALARS
from accelpipe.launch.torch_launch import DistContext, init_from_env
from accelpipe.performance.report import run_performance
from tests.helpers.fake_power import fake_pynvml, rapl_energy, set_rapl_energy, write_rapl_zone
from tests.helpers.performance_checks import measured_rows
from tests.helpers.profile_schedule import PROFILED_STEPS, TINY_SCHEDULE
from tests.helpers.settings import torch_run, torch_train
from tests.helpers.tensorboard import log_scalars, read_scalars

pytestmark = pytest.mark.torch

STEPS = 4
SCHEDULE = ProfileSchedule(wait=1, warmup=1, active=2, repeat=1)


def _batches(epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Deterministic per epoch, as the real loaders are."""
    g = torch.Generator().manual_seed(1000 + epoch)
    return [
        (torch.randn(8, 3, generator=g), torch.randint(0, 2, (8,), generator=g))
        for _ in range(STEPS)
    ]


def _trainer(
    work: Path,
    epochs: int,
    profile: bool = False,
    sched: ProfileSchedule = SCHEDULE,
) -> Trainer:
    seed_everything(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    cfg = torch_train(epochs=epochs, lr=0.01, scheduler="cosine")
    job = TrainJob(model, torch.nn.functional.cross_entropy, _batches, STEPS)
    return Trainer(job, resolve("cpu"), cfg, ProfileSettings(profile, sched), work)


class _Killed(Exception):
    pass


def _kill_after_first_epoch(epoch: int) -> None:
    if epoch == 1:
        raise _Killed


def _rows(work: Path) -> list[dict[str, str]]:
    with (work / "train_log.csv").open() as f:
        return list(csv.DictReader(f))


def _log_steps(work: Path) -> list[int]:
    return [int(r["step"]) for r in _rows(work)]


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
    # the first epoch was logged by the first start, the rest by the resumed process
    attempts = [r["attempt"] for r in _rows(tmp_path / "resumed")]
    assert attempts == ["0"] * STEPS + ["1"] * 2 * STEPS
    # TensorBoard: both attempts' event files read as one series, each step once
    rows = _rows(tmp_path / "resumed")
    assert read_scalars(tmp_path / "resumed" / "tensorboard") == log_scalars(rows, SCALARS)


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


def test_a_run_killed_before_its_first_checkpoint_restarts_its_log(tmp_path: Path) -> None:
    first = _trainer(tmp_path, epochs=1)
    first.fit()
    (tmp_path / CHECKPOINT).unlink()  # killed in epoch 0, before the checkpoint was written
    again = _trainer(tmp_path, epochs=1)
    assert not again.resume()
    again.fit()
    assert _log_steps(tmp_path) == list(range(1, STEPS + 1))  # no step logged twice
    assert {r["attempt"] for r in _rows(tmp_path)} == {"0"}  # nothing of the first is left


def test_a_resumed_run_keeps_the_trace_of_each_attempt(tmp_path: Path) -> None:
    """The profiler counts from 0 again in a resumed process: its cycle's trace is named by
    the run's step, so it no longer overwrites the first attempt's (both were step 3)."""
    sched = ProfileSchedule(wait=0, warmup=1, active=2, repeat=1)  # records steps 2 and 3
    first = _trainer(tmp_path, epochs=3, profile=True, sched=sched)
    with pytest.raises(_Killed):
        first.fit(on_epoch_end=_kill_after_first_epoch)
    second = _trainer(tmp_path, epochs=3, profile=True, sched=sched)
    assert second.resume()
    second.fit()
    traces = sorted(p.name for p in (tmp_path / "traces").glob("*.json.gz"))
    assert traces == ["trace_step000003.json.gz", f"trace_step{STEPS + 3:06d}.json.gz"]


def test_profiled_run_writes_a_trace_with_every_section(tmp_path: Path) -> None:
    # Active steps 4 and 5 (1-based): the last of epoch 0 and the first of epoch 1, so the
    # trace holds `loader_next` and the epoch's first batch, `loader_first`.
    sched = ProfileSchedule(wait=2, warmup=1, active=2, repeat=1)
    _trainer(tmp_path, epochs=2, profile=True, sched=sched).fit()
    traces = list((tmp_path / "traces").glob("*.json.gz"))
    assert len(traces) == 1
    text = gzip.decompress(traces[0].read_bytes()).decode()
    for section in SECTIONS:
        assert f'"name": "{section}"' in text
    with (tmp_path / "train_log.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert all(float(r["samples_per_s"]) > 0 and float(r["loss"]) > 0 for r in rows)
    assert float(rows[0]["lr"]) > float(rows[-1]["lr"])  # cosine decays


def test_the_steps_the_profiler_warms_up_or_records_are_marked_profiled(tmp_path: Path) -> None:
    """The TF engine's test marks the same steps under the same schedule."""
    schedule = torch.profiler.schedule(**TINY_SCHEDULE)
    assert [s + 1 for s in range(2 * STEPS) if schedule(s) in PROFILING] == PROFILED_STEPS
    _trainer(tmp_path, epochs=2, profile=True, sched=ProfileSchedule(**TINY_SCHEDULE)).fit()
    rows = _rows(tmp_path)
    assert [int(r["step"]) for r in rows if r["profiled"] == "1"] == PROFILED_STEPS
    assert {r["profiled"] for r in rows} == {"0", "1"}


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def _self_cpu_seconds(table: str) -> dict[str, float]:
    """Op name -> the Self CPU column of a key-averages table (columns: 2+ spaces apart)."""
    lines = [line for line in table.splitlines() if line.strip() and set(line) != {"-", " "}]
    header = re.split(r"\s{2,}", lines[0].strip())
    col = header.index("Self CPU")
    out = {}
    for line in lines[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == len(header):
            value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", cells[col]).groups()
            out[cells[0]] = float(value) * _UNITS[unit]
    return out


def test_each_profiler_cycle_leaves_its_key_averages_table_and_memory_events(
    tmp_path: Path,
) -> None:
    sched = ProfileSchedule(wait=1, warmup=0, active=2, repeat=2)  # cycles end at steps 3, 6
    _trainer(tmp_path, epochs=2, profile=True, sched=sched).fit()
    traces = tmp_path / "traces"
    stems = ["trace_step000003", "trace_step000006"]
    assert sorted(p.name for p in traces.iterdir()) == sorted(
        [f"{s}.json.gz" for s in stems] + [f"{s}{PROFILER_TABLE}" for s in stems]
    )  # and no memory snapshot: the CPU keeps no allocator history
    for stem in stems:
        table = (traces / f"{stem}{PROFILER_TABLE}").read_text()
        assert "CPU Mem" in table  # profile_memory's columns
        self_cpu = _self_cpu_seconds(table)
        assert {"forward", "backward", "aten::addmm"} <= set(self_cpu)
        times = list(self_cpu.values())
        assert times == sorted(times, reverse=True)  # sorted by self CPU time on the CPU
        events = json.loads(gzip.decompress((traces / f"{stem}.json.gz").read_bytes()))
        memory = [e for e in events["traceEvents"] if e.get("name") == "[memory]"]
        assert memory and {e["args"]["Device Type"] for e in memory} == {0}


def test_memory_history_runs_from_the_start_to_the_first_cycles_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order of the allocator-history calls on a CUDA device, with torch.cuda.memory's
    functions faked (no GPU here): start before the first step, dump and stop once, at the
    end of the first of two cycles, after its trace is written."""
    sched = ProfileSchedule(wait=1, warmup=0, active=2, repeat=2)
    trainer = _trainer(tmp_path, epochs=2, profile=True, sched=sched)
    traces = tmp_path / "traces"
    calls: list[tuple] = []

    def record(enabled: str | None = "all", **kwargs: object) -> None:
        calls.append(("record", enabled, trainer.step))

    def dump(filename: str) -> None:
        calls.append(("dump", filename, trainer.step, sorted(p.name for p in traces.iterdir())))

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", dump)
    monkeypatch.setattr(trainer.device, "backend", "cuda")  # for the memory history only:
    monkeypatch.setattr(trainer.device, "profiler_activities", lambda: [ProfilerActivity.CPU])
    trainer.fit()
    first_cycle = ["trace_step000003.json.gz", f"trace_step000003{PROFILER_TABLE}"]
    assert calls == [
        ("record", "all", 0),
        ("dump", str(traces / MEMORY_SNAPSHOT), 3, first_cycle),
        ("record", None, 3),
    ]


# -- data-parallel: real 2-process gloo runs on CPU ---------------------------------------------
#
# A Trainer in each of 2 spawned processes, with the env torchrun would give them; every rank
# trains on its contiguous half of `_batches`' global batch of 8, compared with one process on
# the whole batch.
#
# -- energy: a power meter's joules per logged step (stand-ins for RAPL and NVML) -----------

ZONE = "intel-rapl:0"
WARMUP = 2  # performance.warmup_steps of the energy runs


def _energy_cfg(epochs: int = 2) -> dict[str, Any]:
    train = {"epochs": epochs, "lr": 0.01, "batch_size": 8, "scheduler": "cosine"}
    return {"backend": "cpu", "train": train, "profile": {"enabled": False}}


def _metered_job(bump: Callable[[int], None]) -> Callable[..., TrainJob]:
    """`_trainer`'s problem, whose loader calls `bump(step)` as it hands out each batch: the
    stand-in device spends its energy there and nowhere else."""

    def make_job(cfg: TorchTrain, device: Device, ctx: DistContext) -> TrainJob:
        model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        step = iter(range(1, 1000))

        def batches(epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for batch in _batches(epoch):
                bump(next(step))
                yield batch

        return TrainJob(model, torch.nn.functional.cross_entropy, batches, STEPS)

    return make_job


def _rapl_bump(root: Path) -> Callable[[int], None]:
    """Step n spends n/4 J of package-0's counter."""
    return lambda step: set_rapl_energy(root, ZONE, rapl_energy(root, ZONE) + 250_000 * step)


def _performance(work: Path, facts: dict[str, Any]) -> dict[str, Any]:
    """performance.json of a train output whose stage.json holds `facts`."""
    (work / "stage.json").write_text(json.dumps(facts | {"seconds": 30.0}))
    slice_ = {"performance": {"warmup_steps": WARMUP}, "reference_figures": []}
    return run_performance({"train": work}, slice_, "resnet50", "r")


def test_each_logged_step_gets_the_energy_since_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "powercap"
    write_rapl_zone(root, ZONE, "package-0", 5_000_000)
    monkeypatch.setenv(power.RAPL_ROOT_ENV, str(root))
    work = tmp_path / "work"
    facts = torch_run(_energy_cfg(), work, _metered_job(_rapl_bump(root)))
    rows = _rows(work)
    energies = [float(r["energy_j"]) for r in rows]
    assert energies == [step / 4 for step in range(1, 2 * STEPS + 1)]
    # the meter's whole window: from the engine's start to the end of training
    metered = facts["power"]
    assert sum(energies) == pytest.approx(metered["joules"], abs=1e-5)
    assert metered["source"] == "rapl package energy counter"
    assert metered["devices"] == ["package-0"] and metered["per_device"] == {
        "package-0": metered["joules"]
    }
    assert metered["reason"] is None and metered["incomplete"] is None
    # performance.json's energy: the rows and samples the throughput measured
    energy = _performance(work, facts)["energy"]
    measured = measured_rows(work, WARMUP)
    joules = sum(float(r["energy_j"]) for r in measured)
    samples = sum(int(r["samples"]) for r in measured)
    seconds = sum(float(r["wall_ms"]) for r in measured) / 1e3
    assert energy["joules"] == pytest.approx(joules, abs=1e-6)
    assert energy["joules_per_1000_samples"] == pytest.approx(joules * 1000 / samples, rel=1e-3)
    assert energy["mean_watts"] == pytest.approx(joules / seconds, rel=1e-3)
    assert energy["process_joules"] == pytest.approx(metered["joules"], abs=1e-6)
    assert (energy["source"], energy["method"]) == ("rapl package energy counter", power.COUNTER)
    assert energy["not_measured"] is None


def test_without_a_power_source_every_energy_figure_is_null_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(power.RAPL_ROOT_ENV, str(tmp_path / "no-powercap"))
    work = tmp_path / "work"
    facts = torch_run(_energy_cfg(epochs=1), work, _metered_job(lambda step: None))
    assert {r["energy_j"] for r in _rows(work)} == {""}
    reason = facts["power"]["reason"]
    assert reason.startswith(f"no power source: no RAPL package domain under {tmp_path}")
    assert facts["power"]["joules"] is None and facts["power"]["source"] is None
    energy = _performance(work, facts)["energy"]
    assert energy["not_measured"] == reason
    figures = ("joules", "joules_per_1000_samples", "mean_watts", "process_joules")
    assert [energy[k] for k in figures] == [None] * 4


def _nvml_meter(monkeypatch: pytest.MonkeyPatch, counter: dict[str, float]) -> list:
    """engines.energy.open_meter replaced by an NVML meter over one stand-in GPU whose energy
    counter reads `counter["mj"]`; returns the list the meters opened are put in."""
    nvml = fake_pynvml(energy_mj=[[0]])
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda handle: counter["mj"]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    opened = []

    def open_meter(backend: str) -> power.PowerMeter:
        opened.append(power.open_meter("cuda", ["0"]))
        return opened[-1]

    monkeypatch.setattr(energy, "open_meter", open_meter)
    return opened


def test_an_nvml_meter_gives_the_rows_energy_and_is_closed_when_training_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = {"mj": 1000.0}

    def bump(step: int) -> None:
        counter["mj"] += 1500.0 * step
        if step == STEPS + 2 and fail:
            raise _Killed

    opened = _nvml_meter(monkeypatch, counter)
    fail = False
    facts = torch_run(_energy_cfg(), tmp_path / "ok", _metered_job(bump))
    energies = [float(r["energy_j"]) for r in _rows(tmp_path / "ok")]
    assert energies == [1.5 * step for step in range(1, 2 * STEPS + 1)]
    assert facts["power"]["joules"] == pytest.approx(sum(energies))
    assert facts["power"]["source"] == "nvml total energy counter"
    assert sys.modules["pynvml"].calls["shutdown"] == 1 and not opened[0].sampling

    fail = True
    with pytest.raises(_Killed):
        torch_run(_energy_cfg(), tmp_path / "failed", _metered_job(bump))
    assert sys.modules["pynvml"].calls["shutdown"] == 2 and not opened[1].sampling


# Tolerance. Each rank's loss is the mean over its half, so the mean of the two is the global
# batch's mean loss; DDP averages the two half-batch mean gradients, which IS the full-batch
# mean gradient. The runs differ only in float32 summation order (two half sums plus the
# all-reduce against one sum; 1 against 2 intra-op threads): ~1e-7 relative per step. Measured
# over the 8 AdamW steps here: losses 1.4e-7 relative, weights and gradients 3e-8 absolute.
# RTOL = 1e-4 leaves ~700x margin for other CPUs' kernels, yet is far below real faults: both
# ranks on the same half puts every step out of tolerance (up to 11% off here). AdamW hides a
# wrong gradient scale from losses and weights (its update is scale-free), so the last step's
# gradients are compared too: a sum instead of a mean is 100% off there.

GLOBAL_BATCH = 8
RTOL = 1e-4
ATOL_WEIGHTS = 1e-6  # weights and gradients pass near zero, where rtol means nothing


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _shard(rank: int, world: int) -> Callable[[int], list[tuple[torch.Tensor, torch.Tensor]]]:
    n = GLOBAL_BATCH // world
    part = slice(rank * n, (rank + 1) * n)
    return lambda epoch: [(x[part], y[part]) for x, y in _batches(epoch)]


def _dp_trainer(
    work: Path, epochs: int, dist: DistContext, losses: list[float], profile: bool = False
) -> Trainer:
    """`_trainer`'s problem on `dist`'s shard; `losses` collects this rank's per-step losses."""
    seed_everything(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(logits, target)
        losses.append(loss.item())
        return loss

    cfg = torch_train(epochs=epochs, lr=0.01, scheduler="cosine")
    job = TrainJob(model, loss_fn, _shard(dist.rank, dist.world_size), STEPS)
    sched = ProfileSchedule(wait=1, warmup=1, active=2, repeat=1)
    prof = ProfileSettings(profile, sched)
    return Trainer(job, resolve("cpu"), cfg, prof, work, dist=dist)


def _outcome(trainer: Trainer, losses: list[float], resumed: bool = False) -> dict[str, Any]:
    return {
        "losses": losses,
        "state": trainer.model.state_dict(),
        # The last step's gradients after DDP's all-reduce: what the optimizer stepped with.
        "grads": [p.grad.clone() for p in trainer.model.parameters()],
        "resumed": resumed,
    }


def _rank_main(rank: int, world: int, port: int, plan: dict[str, Any]) -> None:
    """One spawned rank: resume if there is a checkpoint, fit, save what the test compares."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)  # 2 ranks on 2 cores
    ctx = init_from_env(resolve("cpu"))
    try:
        losses: list[float] = []
        work = Path(plan["work"].format(rank=rank))
        trainer = _dp_trainer(work, plan["epochs"], ctx, losses, plan.get("profile", False))
        resumed = trainer.resume()
        with contextlib.suppress(_Killed):
            trainer.fit(on_epoch_end=_kill_after_first_epoch if plan.get("kill") else None)
        torch.save(_outcome(trainer, losses, resumed), Path(plan["out"]) / f"rank{rank}.pt")
    finally:
        ctx.destroy()


def _spawn(world: int, out: Path, work: Path | str, epochs: int, **plan: Any) -> list[dict]:
    """Run `_rank_main` on `world` processes; `work` may name each rank's dir with {rank}."""
    out.mkdir(parents=True, exist_ok=True)
    plan |= {"work": str(work), "epochs": epochs, "out": str(out)}
    torch.multiprocessing.spawn(_rank_main, args=(world, _free_port(), plan), nprocs=world)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]


def _one_process(work: Path, epochs: int = 2) -> dict[str, Any]:
    losses: list[float] = []
    trainer = _dp_trainer(work, epochs, DistContext(), losses)
    trainer.fit()
    return _outcome(trainer, losses)


def _global_losses(ranks: list[dict[str, Any]]) -> list[float]:
    return [sum(step) / len(step) for step in zip(*(r["losses"] for r in ranks), strict=True)]


def _assert_trajectory(losses: list[float], expected: list[float]) -> None:
    assert len(losses) == len(expected)
    torch.testing.assert_close(
        torch.tensor(losses, dtype=torch.float64),
        torch.tensor(expected, dtype=torch.float64),
        rtol=RTOL,
        atol=0,
    )


def _assert_same_tensors(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=RTOL, atol=ATOL_WEIGHTS)


def _assert_same_model(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert list(a["state"]) == list(b["state"])  # the bare model's keys: no DDP "module."
    _assert_same_tensors(list(a["state"].values()), list(b["state"].values()))


def _logged_losses(work: Path) -> list[float]:
    with (work / "train_log.csv").open() as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]


def test_two_processes_follow_the_one_process_loss_trajectory(tmp_path: Path) -> None:
    one = _one_process(tmp_path / "one")
    two = _spawn(2, tmp_path / "results", tmp_path / "two-rank{rank}", epochs=2, profile=True)

    assert two[0]["losses"] != two[1]["losses"]  # the ranks really trained on different halves
    _assert_trajectory(_global_losses(two), one["losses"])
    for rank in two:
        _assert_same_model(rank, one)
        _assert_same_tensors(rank["grads"], one["grads"])

    # Only rank 0 wrote: the log (of the loss averaged over ranks), the checkpoint, the trace.
    rank0 = tmp_path / "two-rank0"
    assert not (tmp_path / "two-rank1").exists()
    assert (rank0 / CHECKPOINT).exists() and len(list((rank0 / "traces").glob("*.json.gz"))) == 1
    assert _log_steps(rank0) == list(range(1, 2 * STEPS + 1))
    for logged, expected in zip(_logged_losses(rank0), one["losses"], strict=True):
        assert logged == pytest.approx(expected, rel=RTOL, abs=1e-6)  # the log keeps 6 decimals


@pytest.mark.main_suite_only
def test_checkpoint_from_two_processes_resumes_in_one(tmp_path: Path) -> None:
    straight = _one_process(tmp_path / "straight")
    work = tmp_path / "work"
    first = _spawn(2, tmp_path / "results", work, epochs=2, kill=True)
    _assert_trajectory(_global_losses(first), straight["losses"][:STEPS])

    losses: list[float] = []
    second = _dp_trainer(work, 2, DistContext(), losses)
    assert second.resume() and second.epoch == 1 and second.step == STEPS
    second.fit()
    _assert_trajectory(losses, straight["losses"][STEPS:])
    _assert_same_model(_outcome(second, losses), straight)
    assert _log_steps(work) == list(range(1, 2 * STEPS + 1))


@pytest.mark.main_suite_only
def test_checkpoint_from_one_process_resumes_in_two(tmp_path: Path) -> None:
    straight = _one_process(tmp_path / "straight")
    work = tmp_path / "work"
    with pytest.raises(_Killed):
        _dp_trainer(work, 2, DistContext(), []).fit(on_epoch_end=_kill_after_first_epoch)

    second = _spawn(2, tmp_path / "results", work, epochs=2)
    assert all(rank["resumed"] for rank in second)
    _assert_trajectory(_global_losses(second), straight["losses"][STEPS:])
    for rank in second:
        _assert_same_model(rank, straight)
    # One row per step: rank 1 neither appended to nor truncated rank 0's log.
    assert _log_steps(work) == list(range(1, 2 * STEPS + 1))


def test_the_torch_steps_and_trainer_are_what_the_run_sequence_calls(tmp_path: Path) -> None:
    """mypy holds TorchRun to run_sequence.EngineRun; here its trainer's answers to the sequence."""
    assert isinstance(TorchRun(lambda train, device, ctx: None), run_sequence.EngineRun)
    trainer = _trainer(tmp_path, epochs=1)
    trainer.job.facts["toy"] = True
    assert isinstance(trainer, run_sequence.Trainer)
    assert (trainer.step, trainer.compiled, trainer.global_batch) == (0, False, 64)
    assert trainer.job_facts() == {"toy": True}  # no evaluations inside training: nothing added
