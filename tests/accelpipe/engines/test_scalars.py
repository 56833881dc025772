"""TensorBoard scalars: what TensorBoard reads back, a resumed run's restart, eval metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from accelpipe.engines import scalars
from tests.helpers.tensorboard import read_scalars


def _f32(value: float) -> float:
    return float(np.float32(value))


def test_scalars_read_back_at_their_steps(tmp_path: Path) -> None:
    points = {1: (0.9, 10.5), 2: (0.7, 12.25), 3: (0.4, 11.0)}
    with scalars.open_writer(tmp_path) as writer:
        for step, (loss, rate) in points.items():
            writer.add(step, {"train/loss": loss, "train/samples_per_s": rate})
    read = read_scalars(tmp_path)
    assert read["train/loss"] == [(s, _f32(loss)) for s, (loss, _) in points.items()]
    assert read["train/samples_per_s"] == [(s, _f32(rate)) for s, (_, rate) in points.items()]


def test_a_restart_replaces_what_a_killed_attempt_logged_after_its_checkpoint(
    tmp_path: Path,
) -> None:
    with scalars.open_writer(tmp_path) as killed:  # checkpoint at step 2, killed after step 4
        for step in range(1, 5):
            killed.add(step, {"train/loss": 1.0})
    with scalars.open_writer(tmp_path) as resumed:
        for step in range(3, 7):
            resumed.add(step, {"train/loss": 2.0})
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    assert read_scalars(tmp_path)["train/loss"] == [
        (1, 1.0),
        (2, 1.0),
        *((step, 2.0) for step in range(3, 7)),
    ]


def test_metrics_write_their_numbers_only(tmp_path: Path) -> None:
    metrics = {"mean_dice": 0.5, "n_cases": 3, "per_class": {"1": 0.2}, "ok": True, "name": "x"}
    scalars.write_metrics(tmp_path, 12, metrics, "eval")
    assert read_scalars(tmp_path) == {"eval/mean_dice": [(12, 0.5)], "eval/n_cases": [(12, 3.0)]}
