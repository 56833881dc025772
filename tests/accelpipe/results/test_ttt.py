"""Seed runs' times to target combined as MLPerf combines runs: the olympic mean."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from accelpipe.results import ttt


@pytest.mark.parametrize(
    ("times", "score"),
    [
        ([10.0, 30.0, 20.0], 20.0),  # the middle one
        ([50.0, 10.0, 20.0, 30.0, 40.0], 30.0),  # 10 and 50 dropped
        ([10.0, None, 20.0, 30.0], 25.0),  # the one that never reached it is the slowest
        ([4441.0, 1843.0, 2000.0, 2600.0, 3000.0], 2533.333),  # UNet3D v1.0's spread
    ],
)
def test_the_olympic_mean_drops_the_fastest_and_the_slowest(
    times: list[float | None], score: float
) -> None:
    assert ttt.olympic_mean(times) == (score, None)


def test_no_olympic_mean_from_too_few_seeds_or_two_that_never_reached() -> None:
    assert ttt.olympic_mean([10.0, 20.0]) == (
        None,
        "2 seed runs: the olympic mean needs at least 3",
    )
    score, reason = ttt.olympic_mean([10.0, None, None, 30.0])
    assert score is None and reason is not None and reason.startswith("2 of 4 seed runs never")


def _seed_run(root: Path, run: str, seed: int, time_to_target: float | None) -> Path:
    folder = root / "results/resnet50" / run
    folder.mkdir(parents=True)
    detail = {"epoch": 2} if time_to_target is not None else {"not_reached": "not reached in 2"}
    (folder / "performance.json").write_text(
        json.dumps(
            {"time_to_target_s": time_to_target, "time_to_target": detail, "time_to_train_s": 99}
        )
    )
    config = {"resnet50": {"train": {"seed": seed}}}
    (folder / "provenance.json").write_text(json.dumps({"config": config}))
    return folder


def test_the_table_has_each_seed_and_the_score(tmp_path: Path) -> None:
    runs = [
        _seed_run(tmp_path, "fp32-seed1", 1, 12.5),
        _seed_run(tmp_path, "fp32-seed2", 2, None),
        _seed_run(tmp_path, "fp32-seed3", 3, 10.0),
        _seed_run(tmp_path, "fp32-seed4", 4, 20.0),
    ]
    out = tmp_path / "results/resnet50/ttt"
    summary = ttt.write(runs, "resnet50", out)
    assert (summary["olympic_mean_s"], summary["reached"]) == (16.25, 3)
    assert (summary["fastest_s"], summary["slowest_s"], summary["slowest_over_fastest"]) == (
        10.0,
        20.0,
        2.0,
    )
    assert [s["seed"] for s in summary["seeds"]] == [1, 2, 3, 4]
    assert summary["seeds"][1]["detail"] == {"not_reached": "not reached in 2"}
    assert json.loads((out / ttt.TTT_FILE).read_text()) == summary
    with (out / ttt.TABLE_FILE).open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["run"], r["time_to_target_s"]) for r in rows] == [
        ("fp32-seed1", "12.5"),
        ("fp32-seed2", ""),
        ("fp32-seed3", "10.0"),
        ("fp32-seed4", "20.0"),
        ("olympic_mean", "16.25"),
    ]


def test_a_cross_validated_workloads_seed_runs_are_named_with_their_fold(tmp_path: Path) -> None:
    folder = tmp_path / "results/unet2d/default-seed1/fold0"
    folder.mkdir(parents=True)
    (folder / "performance.json").write_text(
        json.dumps({"time_to_target_s": None, "time_to_target": {}, "time_to_train_s": 5})
    )
    (folder / "provenance.json").write_text(
        json.dumps({"config": {"unet2d": {"train": {"seed": 1}}}})
    )
    summary = ttt.combine([folder], "unet2d")
    assert summary["seeds"][0]["run"] == "default-seed1/fold0"
    assert summary["olympic_mean_s"] is None and summary["fastest_s"] is None
