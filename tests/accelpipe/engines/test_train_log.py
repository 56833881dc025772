"""train_log.csv: the attempt column across resumes and logs of an older layout."""

from __future__ import annotations

import csv
from pathlib import Path

from accelpipe.engines.train_log import (
    LOG_FIELDS,
    LOG_FILE,
    Interval,
    log_row,
    open_log,
    truncate_log,
)


def _append(work: Path, steps: range) -> None:
    with open_log(work) as (_file, writer):
        for step in steps:
            row = log_row(0, step, 1.0, 0.1, 4, 0.001, 0.01, interval=Interval(), profiled=False)
            writer.writerow(row)


def _rows(work: Path) -> list[dict[str, str]]:
    with (work / LOG_FILE).open(newline="") as f:
        return list(csv.DictReader(f))


def test_each_opening_of_the_log_is_the_next_attempt(tmp_path: Path) -> None:
    _append(tmp_path, range(1, 4))
    truncate_log(tmp_path, 2)  # resumed from the checkpoint at step 2
    _append(tmp_path, range(3, 5))
    rows = _rows(tmp_path)
    assert [(r["step"], r["attempt"]) for r in rows] == [
        ("1", "0"),
        ("2", "0"),
        ("3", "1"),
        ("4", "1"),
    ]


def test_a_log_truncated_to_nothing_starts_again_at_attempt_zero(tmp_path: Path) -> None:
    _append(tmp_path, range(1, 3))
    truncate_log(tmp_path, 0)  # killed before its first checkpoint
    _append(tmp_path, range(1, 3))
    assert [r["attempt"] for r in _rows(tmp_path)] == ["0", "0"]


def test_a_log_without_the_attempt_column_is_read_as_attempt_zero(tmp_path: Path) -> None:
    old_fields = [f for f in LOG_FIELDS if f != "attempt"]
    with (tmp_path / LOG_FILE).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=old_fields)
        writer.writeheader()
        writer.writerow(log_row(0, 1, 1.0, 0.1, 4, 0, 0.01, interval=Interval(), profiled=False))
    _append(tmp_path, range(2, 3))  # appended rows line up with a rewritten header
    rows = _rows(tmp_path)
    assert tuple(rows[0]) == LOG_FIELDS
    assert [(r["step"], r["attempt"]) for r in rows] == [("1", "0"), ("2", "1")]


def test_a_row_counts_the_samples_and_wall_time_since_the_previous_logged_step() -> None:
    """log_every 2: the row of step 2 carries both steps' samples and the wall time since the
    epoch's start (the loader's start-up and the unlogged step in it); the next row starts
    where the last one was taken, so writing a row is in the next one's wall time."""
    ticks = iter([10.0, 10.5, 10.8])
    interval = Interval(clock=lambda: next(ticks))  # the epoch starts at 10.0
    interval.add(4)
    interval.add(4)
    row = log_row(0, 2, 1.0, 0.1, 4, 0.1, 0.2, interval=interval, profiled=False)
    assert (row["samples"], row["wall_ms"]) == ("8", "500.000")
    assert (row["samples_per_s"], row["step_ms"]) == ("20.00", "200.000")  # the step's own
    interval.add(4)
    row = log_row(0, 3, 1.0, 0.1, 4, 0.1, 0.2, interval=interval, profiled=False)
    assert (row["samples"], row["wall_ms"]) == ("4", "300.000")


def test_a_row_counts_the_energy_since_the_previous_logged_step() -> None:
    """energy_j: the meter's running joules at the row, less those at the previous row (or
    the epoch's start); empty where the meter measures nothing."""
    readings = iter([100.0, 102.5, 104.0, None])
    interval = Interval(clock=lambda: 0.0, joules=lambda: next(readings))
    row = log_row(0, 1, 1.0, 0.1, 4, 0.1, 0.2, interval=interval, profiled=False)
    assert row["energy_j"] == "2.500000"
    row = log_row(0, 2, 1.0, 0.1, 4, 0.1, 0.2, interval=interval, profiled=False)
    assert row["energy_j"] == "1.500000"
    row = log_row(0, 3, 1.0, 0.1, 4, 0.1, 0.2, interval=interval, profiled=False)
    assert row["energy_j"] == ""  # the source failed
    row = log_row(0, 1, 1.0, 0.1, 4, 0.1, 0.2, interval=Interval(), profiled=False)
    assert row["energy_j"] == ""  # no meter


def test_a_log_without_the_energy_column_gets_it_empty(tmp_path: Path) -> None:
    old_fields = [f for f in LOG_FIELDS if f != "energy_j"]
    with (tmp_path / LOG_FILE).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=old_fields, extrasaction="ignore")
        writer.writeheader()
        row = log_row(0, 1, 1.0, 0.1, 4, 0, 0.01, interval=Interval(), profiled=False)
        writer.writerow(row | {"attempt": "0"})
    _append(tmp_path, range(2, 3))
    rows = _rows(tmp_path)
    assert tuple(rows[0]) == LOG_FIELDS
    assert [(r["step"], r["energy_j"], r["attempt"]) for r in rows] == [
        ("1", "", "0"),
        ("2", "", "1"),
    ]
