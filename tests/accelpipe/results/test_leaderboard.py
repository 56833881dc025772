"""results/<workload>/grid: ranking published runs by their metric."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.results.leaderboard import rank_runs

KEYS = ["model.decoder", "train.lr"]


def _run(
    root: Path, name: str, miou: float | None, decoder: str, lr: float, median: float | None
) -> Path:
    """A published run folder with the files the grid reads (as publish writes them)."""
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"mIoU": miou, "pixel_accuracy": 0.5}))
    block = {"model": {"decoder": decoder, "encoder": "tiny"}, "train": {"lr": lr}}
    provenance = {"config": {"segmenter": block}, "stages": {"train": {"seconds": 12.5}}}
    (run / "provenance.json").write_text(json.dumps(provenance))
    performance = {"throughput": {"samples_per_s": median}, "time_to_train_s": 12.5}
    (run / "performance.json").write_text(json.dumps(performance))
    return run


def test_runs_are_ranked_by_the_metric_with_their_settings(tmp_path: Path) -> None:
    runs = [
        _run(tmp_path, "decoder-linear_lr-0p1", 0.25, "linear", 0.1, 50.0),
        _run(tmp_path, "decoder-mask_lr-0p1", 0.5, "mask", 0.1, 30.0),
    ]
    out = tmp_path / "grid"
    rows = rank_runs(runs, "segmenter", "mIoU", KEYS, out)
    assert [r["run"] for r in rows] == ["decoder-mask_lr-0p1", "decoder-linear_lr-0p1"]
    # throughput is performance.json's: the measured steps' samples over their wall time
    assert rows[0]["samples_per_s"] == 30.0 and rows[1]["samples_per_s"] == 50.0
    with (out / "grid.csv").open() as f:
        table = list(csv.DictReader(f))
    assert table[0] == {
        "rank": "1",
        "tied": "0",
        "run": "decoder-mask_lr-0p1",
        "mIoU": "0.5",
        "model.decoder": "mask",
        "train.lr": "0.1",
        "samples_per_s": "30.0",
        "train_seconds": "12.5",
    }
    assert json.loads((out / "grid.json").read_text())["runs"][1]["rank"] == 2
    assert (out / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_without_the_metric_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    run = _run(tmp_path, "decoder-mask_lr-0p1", 0.5, "mask", 0.1, 1.0)
    (run / "metrics.json").write_text(json.dumps({"AP": 0.3}))
    with pytest.raises(DataError, match=r"decoder-mask_lr-0p1/metrics.json: no 'mIoU'"):
        rank_runs([run], "segmenter", "mIoU", KEYS, tmp_path / "grid")
    assert not (tmp_path / "grid").exists()


def test_a_run_without_measured_steps_has_no_throughput(tmp_path: Path) -> None:
    run = _run(tmp_path, "decoder-mask_lr-0p1", 0.5, "mask", 0.1, None)
    (row,) = rank_runs([run], "segmenter", "mIoU", KEYS, tmp_path / "grid")
    assert row["samples_per_s"] is None and row["train_seconds"] == 12.5


def test_a_run_without_performance_json_is_named(tmp_path: Path) -> None:
    run = _run(tmp_path, "decoder-mask_lr-0p1", 0.5, "mask", 0.1, 1.0)
    (run / "performance.json").unlink()
    with pytest.raises(DataError, match=r"decoder-mask_lr-0p1/performance.json: file not found"):
        rank_runs([run], "segmenter", "mIoU", KEYS, tmp_path / "grid")
    assert not (tmp_path / "grid").exists()


def test_a_null_or_nan_metric_ranks_last_and_is_plotted(tmp_path: Path) -> None:
    """Segmenter writes mIoU null when no class is present in label or prediction."""
    runs = [
        _run(tmp_path, "decoder-linear_lr-0p1", float("nan"), "linear", 0.1, 50.0),
        _run(tmp_path, "decoder-mask_lr-0p1", 0.5, "mask", 0.1, 30.0),
        _run(tmp_path, "decoder-mask_lr-0p01", None, "mask", 0.01, 30.0),
    ]
    rows = rank_runs(runs, "segmenter", "mIoU", KEYS, tmp_path / "grid")
    assert rows[0]["run"] == "decoder-mask_lr-0p1"
    assert {r["run"] for r in rows[1:]} == {"decoder-linear_lr-0p1", "decoder-mask_lr-0p01"}
    assert (tmp_path / "grid/grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_equal_metrics_share_a_rank_and_are_marked_tied(tmp_path: Path) -> None:
    runs = [
        _run(tmp_path, "decoder-linear_lr-0p1", 0.5, "linear", 0.1, 50.0),
        _run(tmp_path, "decoder-mask_lr-0p01", 0.25, "mask", 0.01, 30.0),
        _run(tmp_path, "decoder-mask_lr-0p1", 0.5, "mask", 0.1, 30.0),
        _run(tmp_path, "decoder-linear_lr-0p01", None, "linear", 0.01, 30.0),
        _run(tmp_path, "decoder-linear_lr-0p02", float("nan"), "linear", 0.02, 30.0),
    ]
    out = tmp_path / "grid"
    rows = rank_runs(runs, "segmenter", "mIoU", KEYS, out)
    ranked = [(r["rank"], r["tied"], r["run"]) for r in rows]
    assert ranked == [
        (1, True, "decoder-linear_lr-0p1"),  # ties in run-name order
        (1, True, "decoder-mask_lr-0p1"),
        (3, False, "decoder-mask_lr-0p01"),  # two runs are ahead of it
        (4, True, "decoder-linear_lr-0p01"),  # no metric: the last rank, shared
        (4, True, "decoder-linear_lr-0p02"),
    ]
    with (out / "grid.csv").open() as f:
        table = [(r["rank"], r["tied"]) for r in csv.DictReader(f)]
    assert table == [("1", "1"), ("1", "1"), ("3", "0"), ("4", "1"), ("4", "1")]
    runs_json = json.loads((out / "grid.json").read_text())["runs"]
    assert [(r["rank"], r["tied"]) for r in runs_json] == [
        (1, True),
        (1, True),
        (3, False),
        (4, True),
        (4, True),
    ]
