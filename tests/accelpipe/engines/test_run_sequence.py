"""The run sequence both engines train by, driven through a stand-in engine that records the
steps: their order, what a failure leaves closed, and the facts of the main process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from accelpipe.config.settings import ProfileSettings
from accelpipe.core.errors import ConfigError
from accelpipe.devices.power import NoPower, PowerMeter
from accelpipe.engines import run_sequence
from accelpipe.engines.run_log import RunLog
from accelpipe.engines.run_sequence import EngineRun, Place, Trainer
from accelpipe.workloads.ssd.declaration import SSDTrain
from tests.helpers.settings import _profile_block, hand_made_slice, tf_train


class _Failed(Exception):
    pass


@dataclass(frozen=True)
class _Device:
    name: str = "stand-in"
    backend: str = "cpu"
    precision: str = "fp32"

    def peak_memory(self) -> tuple[int | None, str | None]:
        return None, None


class _Trainer:
    """Records resume and fit in the engine's list; `fails` makes fit raise."""

    def __init__(self, calls: list[str], fails: bool, resumes_at: int | None) -> None:
        self.calls, self.fails, self.resumes_at = calls, fails, resumes_at
        self.step = resumes_at or 0
        self.flops = {"reason": "a stand-in counts nothing"}
        self.compiled = False
        self.global_batch = 8

    def resume(self) -> bool:
        self.calls.append("resume")
        return self.resumes_at is not None

    def fit(self) -> None:
        self.calls.append("fit")
        if self.fails:
            raise _Failed
        self.step += 5

    def job_facts(self) -> dict[str, Any]:
        return {"job": "stand-in"}


class _Engine:
    """Each step appends its name to `calls`; the session's end appends "leave"."""

    def __init__(
        self,
        *,
        is_main: bool = True,
        world: int = 1,
        fails: bool = False,
        resumes_at: int | None = None,
    ) -> None:
        self.calls: list[str] = []
        self.is_main, self.world, self.fails, self.resumes_at = is_main, world, fails, resumes_at

    @contextlib.contextmanager
    def session(self, backend: str, train: SSDTrain) -> Iterator[Place]:
        self.calls.append("session")
        try:
            yield Place(self.is_main, self.world)
        finally:
            self.calls.append("leave")

    def prepare(self, backend: str, train: SSDTrain) -> _Device:
        self.calls.append("prepare")
        return _Device(backend=backend)

    def trainer(
        self,
        train: SSDTrain,
        profile: ProfileSettings,
        work_dir: Path,
        power: PowerMeter | NoPower,
        run_log: RunLog,
    ) -> _Trainer:
        self.calls.append("trainer")
        return _Trainer(self.calls, self.fails, self.resumes_at)

    def gemm(self) -> dict[str, Any]:
        self.calls.append("gemm")
        return {"tflops": 1.0}

    def save(self, work_dir: Path) -> None:
        self.calls.append("save")


@pytest.fixture
def meter(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The power meter replaced by one that records its opening and closing."""
    events: list[str] = []

    @contextlib.contextmanager
    def power_meter(backend: str, *, writes_log: bool) -> Iterator[NoPower]:
        events.append("open")
        try:
            yield NoPower("a stand-in meter")
        finally:
            events.append("closed")

    monkeypatch.setattr(run_sequence, "power_meter", power_meter)
    return events


def _run(engine: _Engine, work_dir: Path, batch_size: int = 8) -> dict[str, Any] | None:
    train = tf_train(batch_size=batch_size)
    cfg = hand_made_slice(
        "ssd", {"backend": "cpu"}, train, _profile_block("ssd", {"enabled": False})
    )
    return run_sequence.run(engine, cfg, train, work_dir)


def test_the_stand_in_engine_and_its_trainer_are_what_the_protocols_describe() -> None:
    engine = _Engine()
    assert isinstance(engine, EngineRun)
    assert isinstance(_Trainer([], False, None), Trainer)
    assert not isinstance(object(), EngineRun)


def test_the_main_process_runs_every_step_in_order_and_reports_the_facts(
    tmp_path: Path, meter: list[str]
) -> None:
    engine = _Engine(resumes_at=10)
    facts = _run(engine, tmp_path)
    steps = ["session", "prepare", "trainer", "resume", "gemm", "fit", "save", "leave"]
    assert engine.calls == steps
    assert meter == ["open", "closed"]
    assert facts is not None
    assert facts["device"] == "stand-in" and facts["backend"] == "cpu"
    assert facts["steps"] == 15 and facts["resumed_from_step"] == 10
    assert facts["world_size"] == 1 and facts["global_batch"] == 8
    assert facts["gemm"] == {"tflops": 1.0} and facts["job"] == "stand-in"
    assert facts["power"]["reason"] == "a stand-in meter" and facts["power"]["incomplete"] is None
    assert facts["host"]["window_s"] >= 0


def test_another_process_saves_with_the_main_one_and_reports_nothing(
    tmp_path: Path, meter: list[str]
) -> None:
    engine = _Engine(is_main=False, world=2)
    assert _run(engine, tmp_path) is None
    assert engine.calls[-2:] == ["save", "leave"]
    assert meter == ["open", "closed"]


def test_a_failed_fit_saves_nothing_and_still_closes_the_meter_and_the_session(
    tmp_path: Path, meter: list[str]
) -> None:
    engine = _Engine(fails=True)
    with pytest.raises(_Failed):
        _run(engine, tmp_path)
    assert engine.calls == ["session", "prepare", "trainer", "resume", "gemm", "fit", "leave"]
    assert meter == ["open", "closed"]


def test_a_global_batch_the_processes_cannot_split_stops_before_anything_is_built(
    tmp_path: Path, meter: list[str]
) -> None:
    engine = _Engine(world=3)
    with pytest.raises(ConfigError, match="does not split evenly"):
        _run(engine, tmp_path, batch_size=8)
    assert engine.calls == ["session", "leave"]
    assert meter == ["open", "closed"]
