"""A run's row (accelpipe.compare.rows): numbers from its files, cost, marks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from accelpipe.compare.rows import (
    MARKS,
    build_rows,
    comparable_group,
    cost,
    mark_best,
    read_row,
    system_text,
)
from accelpipe.config import registry
from accelpipe.core.errors import DataError
from accelpipe.traces.plot import PART_NAMES
from tests.helpers.run_folders import NO_RAPL, energy, reference, write_run


@pytest.mark.parametrize("workload", sorted(registry.WORKLOADS))
def test_the_row_holds_the_run_files_numbers(tmp_path: Path, workload: str) -> None:
    run = write_run(tmp_path, workload, "r1", metric_value=0.75, reference=reference())
    row = read_row(run, {})
    metrics = json.loads((run / "metrics.json").read_text())
    perf = json.loads((run / "performance.json").read_text())
    assert row["metric"] == registry.workload(workload).metric
    assert row["metric_value"] == metrics[row["metric"]]
    assert row["samples_per_s"] == perf["throughput"]["samples_per_s"]
    assert row["stage_samples_per_s"] == perf["stage_throughput"]["samples_per_s"]
    for q in ("p10", "p90"):
        assert row[f"per_step_samples_per_s_{q}"] == perf["per_step"]["samples_per_s"][q]
    assert row["profiled_step_agrees"] is perf["profiled_step"]["agrees"]
    for key in ("time_to_train_s", "world_size", "global_batch", "backend", "precision"):
        assert row[key] == perf[key]
    assert row["reference_ratio"] == perf["reference"]["ratio"]
    assert row["reference_comparable"] is perf["reference"]["comparable"] is False
    assert row["reference_note"] == perf["reference_note"]
    assert "indicative" in row["reference_note"]


@pytest.mark.parametrize(
    ("figure", "comparable"),
    [
        (reference(comparable=True), True),
        (reference(comparable=False), False),
        (None, None),  # no published figure for the run
        ({"samples_per_s": 400.0, "ratio": 0.25, "source": "README"}, None),  # before conditions
    ],
)
def test_the_row_says_whether_the_reference_ratio_is_comparable(
    tmp_path: Path, figure: dict | None, comparable: bool | None
) -> None:
    row = read_row(write_run(tmp_path, "resnet50", "r1", reference=figure), {})
    assert row["reference_comparable"] is comparable


def test_the_row_says_which_system_the_run_saw(tmp_path: Path) -> None:
    """provenance.json's `system` (the preflight of the run's image) in one cell."""
    system = {
        "driver": "nvidia-smi 550.54.15",
        "device_count": 3,
        "devices": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100"],
        "framework_build": "torch 2.6.0+cu124, built with CUDA 12.4",
        "host": "gpu07",
    }
    row = read_row(write_run(tmp_path, "resnet50", "bf16", backend="cuda", system=system), {})
    assert row["system"] == (
        "2 x NVIDIA H100 80GB HBM3, 1 x NVIDIA A100; nvidia-smi 550.54.15; "
        "torch 2.6.0+cu124, built with CUDA 12.4"
    )
    assert read_row(write_run(tmp_path, "resnet50", "cpu"), {})["system"] is None
    assert system_text({"devices": [], "driver": None, "framework_build": None}) == "no device"


def test_the_step_parts_add_up_to_the_step(tmp_path: Path) -> None:
    row = read_row(write_run(tmp_path, "ssd", "fp32"), {})
    assert sum(row[f"{p}_ms"] for p in PART_NAMES) == pytest.approx(row["profiled_step_ms"])


def test_cost_per_run_and_per_thousand_samples_count_nodes_and_train_seconds() -> None:
    per_run, per_1000, note = cost(rate=4.0, nodes=2, seconds=1800.0, samples_per_s=500.0)
    assert per_run == pytest.approx(1800 / 3600 * 4.0 * 2)
    assert per_1000 == pytest.approx(1000 / 500 / 3600 * 4.0 * 2, rel=1e-3)  # 4 digits
    assert "x 2 nodes" in note and "train stage" in note


def test_a_backend_without_a_price_has_no_cost_and_says_so(tmp_path: Path) -> None:
    run = write_run(tmp_path, "resnet50", "fp32", backend="cuda", nodes=3, seconds=7200.0)
    priced = read_row(run, {"cuda": 2.5, "cpu": 1.0})
    assert priced["cost_per_run"] == pytest.approx(7200 / 3600 * 2.5 * 3)
    assert priced["cost_per_1000_samples"] == pytest.approx(1000 / 100 / 3600 * 2.5 * 3, rel=1e-3)
    unpriced = read_row(run, {"cpu": 1.0})
    assert unpriced["cost_per_run"] is None and unpriced["cost_per_1000_samples"] is None
    assert "no cost.per_hour" in unpriced["cost_note"]


def test_the_energy_per_run_and_per_thousand_samples_beside_cost(tmp_path: Path) -> None:
    measured = write_run(tmp_path, "ssd", "a", energy_block=energy(250.0, 9000.0))
    row = read_row(measured, {})
    assert (row["joules_per_run"], row["joules_per_1000_samples"]) == (9000.0, 250.0)
    assert row["energy_note"].startswith("nvml total energy counter (energy counter) on 0, 1")
    unmeasured = read_row(write_run(tmp_path, "ssd", "b"), {})
    assert unmeasured["joules_per_run"] is None and unmeasured["joules_per_1000_samples"] is None
    assert unmeasured["energy_note"] == NO_RAPL
    old = read_row(write_run(tmp_path, "ssd", "old", with_performance=False), {})
    assert old["joules_per_1000_samples"] is None and "no energy" in old["energy_note"]


def test_a_run_published_before_performance_json_is_shown_without_throughput(
    tmp_path: Path,
) -> None:
    run = write_run(tmp_path, "ssd", "old", seconds=90.0, with_performance=False)
    row = read_row(run, {"cpu": 3.6})
    assert row["samples_per_s"] is None and row["reference_ratio"] is None
    assert row["reference_comparable"] is None
    assert row["time_to_train_s"] == 90.0  # provenance.json's train stage
    assert row["cost_per_run"] == pytest.approx(90 / 3600 * 3.6)
    assert row["cost_per_1000_samples"] is None
    assert any("no performance.json" in note for note in row["notes"])
    assert row["backend"] == "cpu" and row["world_size"] is None


def test_a_metric_that_is_nan_or_missing_is_no_number_and_said(tmp_path: Path) -> None:
    nan = read_row(write_run(tmp_path, "segmenter", "nan", metric_value=math.nan), {})
    missing = read_row(write_run(tmp_path, "segmenter", "none", metric_value=None), {})
    assert nan["metric_value"] is None and missing["metric_value"] is None
    assert "mIoU is nan" in nan["notes"][0] and "has no mIoU" in missing["notes"][0]


def test_a_metric_written_as_null_is_no_number_and_its_note_is_quoted(tmp_path: Path) -> None:
    run = write_run(tmp_path, "ssd", "empty")
    metrics = json.loads((run / "metrics.json").read_text())
    note = "COCO box AP; AP null: the validation set has no ground-truth box"
    (run / "metrics.json").write_text(json.dumps(metrics | {"AP": None, "note": note}))
    row = read_row(run, {})
    assert row["metric_value"] is None and row["most_accurate"] is None
    assert row["notes"][0] == f"metrics.json: AP is null (undefined for this run): {note}"
    others = [write_run(tmp_path, "ssd", n, metric_value=v) for n, v in (("a", 0.2), ("b", 0.3))]
    rows = build_rows([run, *others], {})
    assert [r["most_accurate"] for r in rows] == [False, False, True]


def _row(
    workload: str,
    run: str,
    speed: float | None,
    quality: float | None,
    cost: float | None = None,
    flops: float | None = 4.1e9,
) -> dict:
    return {
        "workload": workload,
        "run": run,
        "samples_per_s": speed,
        "metric_value": quality,
        "cost_per_1000_samples": cost,
        "comparable_group": comparable_group(flops),
    }


def test_the_marks_go_to_the_best_of_two_or_more_runs_of_one_workload() -> None:
    rows = [
        _row("resnet50", "bf16", 900.0, 0.70, 0.02),
        _row("resnet50", "fp32", 400.0, 0.76, 0.05),
        _row("resnet50", "old", None, 0.76),
        _row("ssd", "fp32", 5000.0, None, 0.001),  # the only ssd run: nothing to compare
        _row("segmenter", "a", 10.0, 0.5),
        _row("segmenter", "b", None, 0.4),
    ]
    mark_best(rows)
    marked = {mark: [(r["workload"], r["run"]) for r in rows if r[mark]] for mark, _, _ in MARKS}
    # per workload: a run without the number is never marked; a tie shares the mark; a number
    # only one run of a workload has marks nothing; ssd's far higher speed marks no resnet50
    assert marked["fastest"] == [("resnet50", "bf16")]
    assert marked["most_accurate"] == [
        ("resnet50", "fp32"),
        ("resnet50", "old"),
        ("segmenter", "a"),
    ]
    assert marked["cheapest"] == [("resnet50", "bf16")]


def test_rows_are_grouped_by_workload(tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path, "ssd", "fp32"),
        write_run(tmp_path, "resnet50", "fp32"),
        write_run(tmp_path, "ssd", "bf16"),
    ]
    rows = build_rows(runs, {})
    assert [(r["workload"], r["run"]) for r in rows] == [
        ("ssd", "fp32"),
        ("ssd", "bf16"),
        ("resnet50", "fp32"),
    ]


def test_a_folder_gone_since_planning_or_none_at_all_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no provenance\.json, so not a finished run"):
        read_row(tmp_path / "ssd" / "fp32", {})
    with pytest.raises(DataError, match="no finished run"):
        build_rows([], {})


def test_fastest_and_cheapest_only_among_runs_of_one_model_and_input() -> None:
    """Issue 30 item 13: a tiny model's samples/s beat the shipped ones and took "fastest";
    now speed and price compare only at the same FLOPs per sample (to 3 digits)."""
    rows = [
        _row("resnet50", "tiny", 5000.0, 0.25, 0.0001, flops=2.2e6),
        _row("resnet50", "bf16", 900.0, 0.70, 0.02, flops=4.1e9),
        _row("resnet50", "fp32", 400.0, 0.76, 0.05, flops=4.1004e9),  # the same to 3 digits
        _row("resnet50", "graph", 950.0, 0.70, 0.01, flops=8.2e9),  # alone at its size
        _row("resnet50", "old", 9000.0, 0.10, 0.00001, flops=None),  # no count: compared with none
    ]
    mark_best(rows)
    marked = {mark: [r["run"] for r in rows if r[mark]] for mark, _, _ in MARKS}
    assert marked == {"fastest": ["bf16"], "cheapest": ["bf16"], "most_accurate": ["fp32"]}
    assert [r["comparable_runs"] for r in rows] == [1, 2, 2, 1, 0]
    assert rows[1]["comparable_group"] == rows[2]["comparable_group"] == "4.1 GFLOP per sample"


def test_a_tie_within_a_group_shares_the_mark() -> None:
    rows = [_row("ssd", "a", 10.0, 0.2, 0.5), _row("ssd", "b", 10.0, 0.2, 0.5)]
    mark_best(rows)
    assert all(r["fastest"] and r["cheapest"] and r["most_accurate"] for r in rows)


HASH_A, HASH_B = "a" * 64, "b" * 64


@pytest.mark.parametrize(
    ("recorded", "current", "stale", "says"),
    [
        (HASH_A, {"ssd/fp32": HASH_A}, False, "the current config's"),
        (HASH_A, {"ssd/fp32": HASH_B}, True, "stale: made with config aaaaaaaaaaaa"),
        (HASH_A, {"ssd/fp32": None}, True, "the current config has no such run"),
        (HASH_A, None, None, "not checked against a config"),
        (None, {"ssd/fp32": HASH_B}, None, "published before accelpipe recorded it"),
    ],
)
def test_a_run_is_stale_where_the_current_config_gives_it_another_hash(
    tmp_path: Path, recorded: str | None, current: dict | None, stale: bool | None, says: str
) -> None:
    [row] = build_rows([write_run(tmp_path, "ssd", "fp32", config_hash=recorded)], {}, current)
    assert row["config_hash"] == recorded
    assert row["config_stale"] is stale and says in row["config_note"]


def test_runs_of_different_flops_in_their_folders_are_not_compared(tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path, "unet2d", "fold0", samples_per_s=(5000.0, 1, 1), flops_per_sample=1e6),
        write_run(
            tmp_path, "unet2d", "big/fold0", samples_per_s=(90.0, 1, 1), flops_per_sample=5e9
        ),
        write_run(
            tmp_path, "unet2d", "big/fold1", samples_per_s=(80.0, 1, 1), flops_per_sample=5e9
        ),
    ]
    rows = build_rows(runs, {"cpu": 1.0})
    assert [(r["run"], r["fastest"], r["cheapest"]) for r in rows] == [
        ("fold0", False, False),
        ("big/fold0", True, True),
        ("big/fold1", False, False),
    ]
