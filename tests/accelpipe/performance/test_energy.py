"""Energy figures: the measured steps' joules, per 1,000 samples and as mean watts."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelpipe.performance.energy import energy
from accelpipe.performance.steps import step_statistics
from tests.helpers.performance_runs import LOG, TRAIN
from tests.helpers.train_logs import write_train_log

POWER = {
    "joules": 50.0,
    "seconds": 12.0,
    "mean_watts": 50.0 / 12.0,
    "source": "nvml total energy counter",
    "method": "energy counter",
    "samples": 13,
    "interval_s": 1.0,
    "per_device": {"0": 30.0, "1": 20.0},
    "reason": None,
    "devices": ["0", "1"],
    "incomplete": None,
}


def _energy_log(path: Path, energies: list[float | None]) -> Path:
    """LOG's steps, each with 4 samples over its step time and its energy_j."""
    steps = [(*LOG[i], 4, LOG[i][2], e) for i, e in zip(LOG, energies, strict=True)]
    return write_train_log(path, steps)


def test_energy_is_the_sum_over_the_measured_steps(tmp_path: Path) -> None:
    # steps 1 (warm-up), 2 and 3 (profiled) are left out, as from the throughput
    log = _energy_log(tmp_path / "train_log.csv", [9.0, 5.0, 5.0, 1.0, 1.5, 2.0, 0.5, 1.0])
    stats = step_statistics(log, 1)
    figures = energy(TRAIN | {"world_size": 2, "power": POWER}, stats)
    # 6 J over 20 samples and 200 ms
    assert figures == {
        "joules": 6.0,
        "joules_per_1000_samples": 300.0,
        "mean_watts": 30.0,
        "process_joules": 50.0,
        "process_seconds": 12.0,
        "source": "nvml total energy counter",
        "method": "energy counter",
        "devices": ["0", "1"],
        "not_measured": None,
    }


@pytest.mark.parametrize(
    ("power", "energies", "reason"),
    [
        (
            {"reason": "no power source: no RAPL package domain under /sys/class/powercap"},
            [None] * 8,
            "no power source: no RAPL package domain under /sys/class/powercap",
        ),
        (
            POWER | {"joules": None, "reason": "nvml total energy counter failed after 3 "},
            [1.0, 1.0, 1.0, None, None, None, None, None],
            "nvml total energy counter failed after 3 ",
        ),
        (
            POWER | {"devices": ["0"], "incomplete": "the meter read 1 of the run's 2 devices"},
            [1.0] * 8,
            "the meter read 1 of the run's 2 devices",
        ),
        (
            POWER,
            [1.0, 1.0, 1.0, 1.0, 1.0, None, 1.0, 1.0],
            "no energy over the measured steps: a measured step of train_log.csv has no energy_j",
        ),
        (
            POWER,
            [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "no energy over the measured steps: the meter read 0 J in their 0.2 s, shorter "
            "than its readings change; measure more steps",
        ),
    ],
    ids=["no-source", "source-failed", "devices-missed", "row-without-energy", "zero-reading"],
)
def test_without_energy_every_figure_is_null_with_the_reason(
    tmp_path: Path, power: dict, energies: list, reason: str
) -> None:
    stats = step_statistics(_energy_log(tmp_path / "log.csv", energies), 1)
    figures = energy(TRAIN | {"power": power}, stats)
    assert figures["not_measured"] == reason
    keys = ("joules", "joules_per_1000_samples", "mean_watts")
    assert [figures[k] for k in keys] == [None] * 3
    if power.get("reason") or power.get("incomplete"):
        assert figures["process_joules"] is None and figures["process_seconds"] is None
    else:  # the whole process was measured; the measured steps were not
        assert figures["process_joules"] == 50.0


def test_no_measured_step_has_no_step_energy_and_says_why(tmp_path: Path) -> None:
    stats = step_statistics(_energy_log(tmp_path / "log.csv", [1.0] * 8), 8)
    figures = energy(TRAIN | {"power": POWER}, stats)
    assert figures["joules"] is None and figures["process_joules"] == 50.0
    assert figures["not_measured"].startswith("no energy over the measured steps: the warm-up")
