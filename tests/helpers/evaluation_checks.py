"""The evaluations inside training of a published run, checked against its other files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from accelpipe import mllog


def check_evaluations(run: Path, epochs: list[int], reached: bool | None) -> list[dict[str, str]]:
    """eval_log.csv evaluated after `epochs`; the last evaluation scores the final model as the
    evaluate stage does (one scoring function); performance.json's time to target is the first
    reaching row's run time, or null; mllog.txt passes MLPerf's format rules and ends with the
    status that says. `reached`: whether an evaluation reached the target (None: either).
    Returns eval_log.csv's rows."""
    with (run / "eval_log.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == epochs
    metrics = json.loads((run / "metrics.json").read_text())
    metric = rows[-1]["metric"]
    assert float(rows[-1]["value"]) == metrics[metric], (rows[-1], metrics[metric])
    performance = json.loads((run / "performance.json").read_text())
    first = next((r for r in rows if r["reached"] == "1"), None)
    assert reached is None or (first is not None) is reached
    reached = first is not None
    expected = float(first["run_s"]) if first is not None else None
    assert performance["time_to_target_s"] == expected, performance["time_to_target"]
    assert mllog.check(run / mllog.FILENAME) == []
    last = mllog.parse((run / mllog.FILENAME).read_text().splitlines()[-1])
    assert (last.key, last.metadata["status"]) == ("run_stop", "success" if reached else "aborted")
    check_epoch_numbers(run)
    return rows


def check_epoch_numbers(run: Path) -> None:
    """train_log.csv, eval_log.csv and mllog.txt count epochs alike, from 1 (MLPerf's
    epoch_num): a step's epoch is the one it trained in, an evaluation's the one it followed,
    so an evaluation has the epoch of the train_log row of its step."""
    with (run / "train_log.csv").open(newline="") as f:
        epoch_of_step = {int(r["step"]): int(r["epoch"]) for r in csv.DictReader(f)}
    with (run / "eval_log.csv").open(newline="") as f:
        evaluations = list(csv.DictReader(f))
    assert min(epoch_of_step.values()) == 1
    assert [epoch_of_step[int(r["step"])] for r in evaluations] == [
        int(r["epoch"]) for r in evaluations
    ]
    entries = [mllog.parse(line) for line in (run / mllog.FILENAME).read_text().splitlines()]
    started = [int(e.metadata["epoch_num"]) for e in entries if e.key == mllog.EPOCH_START]
    assert started == sorted(set(epoch_of_step.values()))
    evaluated = [int(e.metadata["epoch_num"]) for e in entries if e.key == mllog.EVAL_ACCURACY]
    assert evaluated == [int(r["epoch"]) for r in evaluations if r["value"]]
