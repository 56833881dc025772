"""`accelpipe runs`: the run folders under results/ with their headline numbers, the
incomplete ones marked with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelpipe.cli import main
from accelpipe.config import registry
from tests.helpers.run_folders import write_run


def _runs(results: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["runs", "--results", str(results), *args])
    out, err = capsys.readouterr()
    return code, out, err


def _listed(results: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict]:
    code, out, err = _runs(results, "--json", capsys=capsys)
    assert code == 0, err
    return {f"{row['workload']}/{row['run']}": row for row in json.loads(out)["runs"]}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two complete runs and four incomplete ones, as publish leaves them (or not)."""
    results = tmp_path / "results"
    write_run(results, "unet2d", "fold0", 0.8123, (1234.5, 1100.0, 1300.0), 83.2)
    write_run(results, "resnet50", "fp32", 0.61, (250.0, 240.0, 260.0), 4000.0, backend="cuda")
    write_run(results, "resnet50", "old", 0.55, with_performance=False)  # before performance.json
    write_run(results, "ssd", "fp32", 0.2, samples_per_s=None)  # no step after the warm-up
    write_run(results, "swinunetr", "default", metric_value=None)  # metrics.json lacks it
    (results / "segmenter/bf16").mkdir(parents=True)  # not published
    for not_a_run in ("unet2d/cv", "resnet50/benchmark"):
        (results / not_a_run).mkdir(parents=True)
    return results


def test_a_complete_run_shows_its_files_numbers(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _listed(results, capsys)
    fold0, fp32 = rows["unet2d/fold0"], rows["resnet50/fp32"]
    assert fold0["metric"] == registry.workload("unet2d").metric == "mean_dice"
    assert fp32["metric"] == registry.workload("resnet50").metric == "top1"
    for row, run in ((fold0, "unet2d/fold0"), (fp32, "resnet50/fp32")):
        metrics = json.loads((results / run / "metrics.json").read_text())
        perf = json.loads((results / run / "performance.json").read_text())
        assert row["metric_value"] == metrics[row["metric"]]
        assert row["samples_per_s"] == perf["throughput"]["samples_per_s"]  # measured steps
        assert row["time_to_train_s"] == perf["time_to_train_s"]
        assert row["device"] == perf["device"]
        assert row["complete"] is True and row["notes"] == []
    assert (fold0["metric_value"], fold0["samples_per_s"], fold0["device"]) == (
        0.8123,
        1234.5,
        "cpu device",
    )


def test_incomplete_runs_are_marked_with_why(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _listed(results, capsys)
    # every run folder, in registry order then by run name; cv and benchmark are not runs
    assert list(rows) == [
        "unet2d/fold0",
        "swinunetr/default",
        "resnet50/fp32",
        "resnet50/old",
        "ssd/fp32",
        "segmenter/bf16",
    ]
    why = {
        "resnet50/old": "no performance.json",
        "ssd/fp32": "no measured throughput",
        "swinunetr/default": "metrics.json has no mean_dice",
        "segmenter/bf16": "no provenance.json: not a published run",
    }
    for run, reason in why.items():
        assert rows[run]["complete"] is False
        assert any(reason in note for note in rows[run]["notes"]), rows[run]["notes"]
    assert rows["resnet50/old"]["metric_value"] == 0.55  # what it has is still shown
    assert rows["resnet50/old"]["samples_per_s"] is None
    assert rows["segmenter/bf16"]["metric"] == "mIoU"


def test_the_table_has_one_line_a_run_and_the_reasons(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _runs(results, capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        *("workload", "run", "quality", "samples/s", "time", "to", "train", "device", "config"),
        "status",
    ]
    fold0 = next(line for line in lines if line.startswith("unet2d "))
    assert fold0.split() == [
        *("unet2d", "fold0", "mean_dice", "0.8123", "1234.5", "83.2", "s", "cpu", "device"),
        *("-", "complete"),  # no config hash: published before it was recorded
    ]
    fp32 = next(line for line in lines if line.startswith("resnet50 ") and " fp32 " in line)
    assert "top1 0.61" in fp32 and "250.0" in fp32 and "66.7 min" in fp32
    assert fp32.endswith("complete")
    old = next(line for line in lines if line.startswith("resnet50 ") and " old " in line)
    assert old.endswith("INCOMPLETE") and " - " in old
    assert any(line.startswith("incomplete segmenter/bf16: no provenance.json") for line in lines)
    assert not any(line.startswith("incomplete unet2d/fold0") for line in lines)


def test_a_run_with_a_broken_file_is_incomplete_and_the_others_still_listed(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (results / "resnet50/fp32/metrics.json").write_text("{not json")
    rows = _listed(results, capsys)
    assert rows["resnet50/fp32"]["complete"] is False
    assert "metrics.json: not valid JSON" in rows["resnet50/fp32"]["notes"][0]
    assert rows["unet2d/fold0"]["complete"] is True


@pytest.mark.parametrize("make", [False, True])
def test_no_runs_is_one_line_and_success(
    tmp_path: Path, make: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    if make:
        (results / "unet2d").mkdir(parents=True)  # a workload folder, no run in it
    code, out, err = _runs(results, capsys=capsys)
    assert code == 0 and err == ""
    assert len(out.strip().splitlines()) == 1
    assert out.startswith(f"no runs in {results}/") and "accelpipe targets" in out
    code, out, _ = _runs(results, "--json", capsys=capsys)
    assert code == 0 and json.loads(out)["runs"] == []


def test_the_default_results_folder_is_results_in_the_current_directory(
    results: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(results.parent)
    assert main(["runs", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["runs"]
    assert rows[0]["path"] == "results/unet2d/fold0"


def test_a_run_made_with_another_config_is_flagged_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30 item 13: tiny and shipped runs share results/; each shows its config's hash
    and is flagged where the current config (config.yaml here, --config over it) differs."""
    import yaml

    from accelpipe.config.schema import validate
    from accelpipe.plan import stage_config

    settings = {"resnet50": {"train": {"lr": 0.1}, "runs": {"fp32": {}, "bf16": {}}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(settings))
    monkeypatch.chdir(tmp_path)
    now = stage_config.run_config_hash(validate(settings), "resnet50", "fp32")
    tiny = {"resnet50": settings["resnet50"] | {"model": {"width": 8}}}
    before = stage_config.run_config_hash(validate(tiny), "resnet50", "bf16")
    results = tmp_path / "results"
    write_run(results, "resnet50", "fp32", config_hash=now)
    write_run(results, "resnet50", "bf16", config_hash=before)
    write_run(results, "resnet50", "gone", config_hash=now)  # a run the config no longer has
    rows = _listed(results, capsys)
    assert rows["resnet50/fp32"]["config_stale"] is False
    assert rows["resnet50/bf16"]["config_stale"] is True
    assert rows["resnet50/gone"]["config_stale"] is True
    code, out, _ = _runs(results, capsys=capsys)
    lines = out.splitlines()
    assert code == 0
    assert next(line for line in lines if " fp32 " in line).split()[-2:] == [now[:12], "complete"]
    assert f"{before[:12]} STALE" in next(line for line in lines if " bf16 " in line)
    assert any(line.startswith(f"stale resnet50/bf16: stale: made with config {before[:12]}")
               for line in lines)  # fmt: skip
    assert not any(line.startswith("stale resnet50/fp32") for line in lines)
    # the same runs under a config given on the command line: the current one is stale too
    code, out, _ = _runs(results, "--config", 'resnet50={"train":{"lr":0.2}}', capsys=capsys)
    assert any(line.startswith("stale resnet50/fp32") for line in out.splitlines())


def test_without_a_config_staleness_is_not_checked_and_the_runs_still_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_run(tmp_path / "results", "ssd", "fp32", config_hash="a" * 64)
    code, out, _ = _runs(tmp_path / "results", capsys=capsys)
    assert code == 0 and out.splitlines()[1].split()[-2:] == ["a" * 12, "complete"]
    assert (
        out.splitlines()[-1]
        == "staleness not checked: no config.yaml here (--configfile names one)"
    )
