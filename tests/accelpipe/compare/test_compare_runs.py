"""Which folders results/compare shows (accelpipe.compare.runs)."""

from __future__ import annotations

from pathlib import Path

from accelpipe.compare.runs import finished_runs, run_files, run_folders, run_of
from tests.helpers.run_folders import write_run


def test_every_run_folder_with_provenance_is_a_finished_run(tmp_path: Path) -> None:
    results = tmp_path / "results"
    ssd = write_run(results, "ssd", "fp32")
    bf16 = write_run(results, "resnet50", "bf16")
    fold0 = write_run(results, "unet2d", "fold0")
    (results / "resnet50/unfinished").mkdir()  # no provenance.json: not published
    for not_a_run in ("unet2d/cv", "segmenter/grid", "ssd/benchmark"):
        (results / not_a_run).mkdir(parents=True)
        (results / not_a_run / "provenance.json").write_text("{}")
    (results / "mnist/fp32").mkdir(parents=True)  # no such workload
    (results / "mnist/fp32/provenance.json").write_text("{}")
    # the registry's order (unet2d, swinunetr, resnet50, ssd, segmenter), then run names
    assert finished_runs(results) == [fold0, bf16, ssd]


def test_a_named_runs_folds_are_runs_and_its_folder_is_not(tmp_path: Path) -> None:
    results = tmp_path / "results"
    fold0 = write_run(results, "unet2d", "fold0")
    slow1 = write_run(results, "unet2d", "slow/fold1")
    (results / "unet2d/slow/cv").mkdir()  # an aggregate, not a run
    unfinished = results / "unet2d/slow/fold0"
    unfinished.mkdir()
    assert finished_runs(results) == [fold0, slow1]
    assert run_folders(results) == [fold0, unfinished, slow1]
    assert [run_of(run) for run in (fold0, slow1)] == [
        ("unet2d", "fold0"),
        ("unet2d", "slow/fold1"),
    ]


def test_a_run_published_before_performance_json_lists_the_files_it_has(tmp_path: Path) -> None:
    old = write_run(tmp_path, "ssd", "old", with_performance=False)
    new = write_run(tmp_path, "ssd", "new")
    assert {p.name for p in run_files(new)} - {p.name for p in run_files(old)} == {
        "performance.json"
    }
    assert all(p.exists() for p in run_files(old))


def test_no_results_folder_has_no_runs(tmp_path: Path) -> None:
    assert finished_runs(tmp_path / "results") == []
