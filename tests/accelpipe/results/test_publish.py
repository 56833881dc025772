"""Result folders: publish copies stage outputs with provenance; cv aggregates folds."""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.engines import MEMORY_SNAPSHOT, PROFILER_TABLES
from accelpipe.engines.train_log import LOG_FIELDS, Interval, log_row
from accelpipe.performance import PERFORMANCE_FILE
from accelpipe.results import curves
from accelpipe.results.publish import RUN_FILES, aggregate_folds, publish_run
from tests.helpers.run_folders import trace_summary

# What the publish slice carries besides the workload's block (stage_config.publish).
SLICE = {"performance": {"warmup_steps": 1}, "reference_figures": []}
TRAIN_FACTS = {
    "workload": "unet2d",
    "run": "fold0",
    "backend": "cpu",
    "device": "cpu (x86_64)",
    "precision": "fp32",
    "steps": 2,
    "world_size": 1,
    "global_batch": 4,
}


def _stage_dirs(root: Path) -> dict[str, Path]:
    dirs = {name: root / name for name in ("raw", "prepare", "train", "evaluate", "trace")}
    for name, folder in dirs.items():
        folder.mkdir()
        facts = TRAIN_FACTS if name == "train" else {}
        (folder / "stage.json").write_text(json.dumps({"stage": name, "seconds": 1.5, **facts}))
    for stage, name, _ in RUN_FILES:
        (dirs[stage] / name).write_text(f"{stage}/{name}")
    (dirs["evaluate"] / "metrics.json").write_text(json.dumps({"mean_dice": 0.42}))
    with (dirs["train"] / "train_log.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=LOG_FIELDS)
        writer.writeheader()
        for step in (1, 2):
            row = log_row(0, step, 1.0, 0.1, 4, 0.01, 0.1, interval=Interval(), profiled=False)
            writer.writerow(row)
    (dirs["train"] / "model.pt").write_text("weights")
    (dirs["trace"] / "summary.json").write_text(json.dumps(trace_summary()))
    return dirs


def test_publish_copies_outputs_and_writes_provenance(tmp_path: Path) -> None:
    dirs = _stage_dirs(tmp_path)
    out = tmp_path / "results/unet2d/fold0"
    publish_run(dirs, SLICE | {"unet2d": {"train": {"lr": 0.1}}}, out, "model.pt")
    for _, _, target in RUN_FILES:
        assert (out / target).exists()
    assert (out / "model.pt").read_text() == "weights"
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["device"] == "cpu (x86_64)" and prov["config"]["unet2d"]["train"]["lr"] == 0.1
    assert prov["stages"]["train"]["seconds"] == 1.5
    assert set(prov["git"]) == {"commit", "dirty"}
    performance = json.loads((out / PERFORMANCE_FILE).read_text())
    assert (performance["workload"], performance["run"]) == ("unet2d", "fold0")
    assert performance["steps"] == {
        "total": 2,
        "logged": 2,
        "warmup": 1,
        "profiled_excluded": 0,
        "measured": 1,
    }
    assert performance["reference"] is None and "cpu" in performance["reference_note"]


def test_provenance_records_the_config_hash_the_slice_carries(tmp_path: Path) -> None:
    """Issue 30 item 13: `accelpipe runs` and the compare page check it against the config."""
    out = tmp_path / "run"
    publish_run(_stage_dirs(tmp_path), SLICE | {"config_hash": "c" * 64}, out, "model.pt")
    assert json.loads((out / "provenance.json").read_text())["config_hash"] == "c" * 64


def test_performance_json_carries_the_host_block_and_its_warning(tmp_path: Path) -> None:
    """Issue 30 item 14: the train stage.json's host facts, judged."""
    dirs = _stage_dirs(tmp_path)
    stage = json.loads((dirs["train"] / "stage.json").read_text())
    host = {
        "cpu_model": "x",
        "cores": 2,
        "usable_cpus": 2,
        "load_average_start": [0.1, 0.1, 0.1],
        "load_average_end": [1.5, 0.5, 0.2],
        "window_s": 10.0,
        "job_cpu_s": 10.0,
        "other_cpu_s": 9.0,
        "not_measured": None,
    }
    (dirs["train"] / "stage.json").write_text(json.dumps(stage | {"host": host}))
    publish_run(dirs, SLICE, tmp_path / "run", "model.pt")
    performance = json.loads((tmp_path / "run" / PERFORMANCE_FILE).read_text())
    assert performance["host"]["cpu_model"] == "x"
    assert performance["host"]["other_cpu_share"] == 0.45
    assert performance["host"]["oversubscribed"] is True
    assert performance["host"]["warning"].startswith(
        "host oversubscribed: other processes used 45%"
    )


def test_provenance_keeps_what_the_preflight_of_the_image_saw(tmp_path: Path) -> None:
    """On an accelerator backend the run's provenance says which system its image saw
    (accelpipe doctor's facts); on the cpu there is no preflight and `system` is null."""
    report = {
        "backend": "cuda",
        "host": "gpu07",
        "time": "2026-01-02T03:04:05+00:00",
        "image": "localhost/accelpipe/cuda-pytorch:0123456789ab",
        "checks": [],
        "system": {
            "driver": "nvidia-smi 550.54.15",
            "device_count": 2,
            "devices": ["NVIDIA H100 80GB HBM3"] * 2,
            "framework_build": "torch 2.6.0+cu124, built with CUDA 12.4",
        },
    }
    preflight = tmp_path / "work/preflight/cuda-pytorch-0123456789ab.json"
    preflight.parent.mkdir(parents=True)
    preflight.write_text(json.dumps(report))
    publish_run(_stage_dirs(tmp_path), SLICE, tmp_path / "run", "model.pt", preflight)
    system = json.loads((tmp_path / "run/provenance.json").read_text())["system"]
    assert system == {
        **report["system"],
        "host": "gpu07",
        "time": "2026-01-02T03:04:05+00:00",
        "image": "localhost/accelpipe/cuda-pytorch:0123456789ab",
        "preflight": str(preflight),
    }
    (tmp_path / "cpu").mkdir()
    publish_run(_stage_dirs(tmp_path / "cpu"), SLICE, tmp_path / "cpu-run", "model.pt")
    assert json.loads((tmp_path / "cpu-run/provenance.json").read_text())["system"] is None


def test_publish_draws_the_training_curves_from_the_log_and_the_metric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[curves.Curves] = []

    def plot(data: curves.Curves, path: Path) -> object:
        drawn.append(data)
        return real_plot(data, path)

    real_plot = curves.plot_curves
    monkeypatch.setattr(curves, "plot_curves", plot)
    out = tmp_path / "results/unet2d/fold0"
    publish_run(_stage_dirs(tmp_path), SLICE, out, "model.pt")
    png = (out / curves.CURVES_FILE).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == curves.SIZE_PX
    ((data,),) = [drawn]  # the log's two steps, the metric at the last one
    assert (data.title, data.steps, data.loss, data.lr) == (
        "unet2d/fold0",
        [1, 2],
        [1.0] * 2,
        [0.1] * 2,
    )
    assert (data.metric, data.evaluations) == ("mean_dice", [(2, 0.42)])


def test_publish_with_a_missing_output_names_it_and_keeps_the_old_folder(tmp_path: Path) -> None:
    dirs = _stage_dirs(tmp_path)
    out = tmp_path / "result"
    publish_run(dirs, SLICE, out, "model.pt")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (dirs["trace"] / "step_breakdown.png").unlink()
    with pytest.raises(DataError, match=r"step_breakdown\.png"):
        publish_run(dirs, SLICE, out, "model.pt")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_cross_validation_means(tmp_path: Path) -> None:
    runs = []
    for k, scores in enumerate([(0.5, 0.6, 0.7), (0.7, 0.8, 0.9)]):
        run = tmp_path / f"fold{k}"
        run.mkdir()
        dice = dict(zip("123", scores, strict=True))
        (run / "metrics.json").write_text(json.dumps({"dice": dice, "mean_dice": sum(scores) / 3}))
        runs.append(run)
    summary = aggregate_folds(runs, tmp_path / "cv")
    assert summary["mean"]["dice"] == pytest.approx({"1": 0.6, "2": 0.7, "3": 0.8})
    assert summary["mean"]["mean_dice"] == pytest.approx(0.7)
    assert summary["std_mean_dice"] == pytest.approx(0.1)
    with (tmp_path / "cv/cv_dice.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["fold"] for r in rows] == ["fold0", "fold1", "mean"]


def test_publish_copies_the_profiler_tables_and_memory_snapshot_where_present(
    tmp_path: Path,
) -> None:
    dirs = _stage_dirs(tmp_path)
    publish_run(dirs, SLICE, tmp_path / "without", "model.pt")
    assert not {PROFILER_TABLES, MEMORY_SNAPSHOT} & {
        p.name for p in (tmp_path / "without").iterdir()
    }
    tables = dirs["trace"] / PROFILER_TABLES
    tables.mkdir()
    (tables / "trace_step000004.key_averages.txt").write_text("table")
    (dirs["trace"] / MEMORY_SNAPSHOT).write_bytes(b"snapshot")
    out = tmp_path / "with"
    publish_run(dirs, SLICE, out, "model.pt")
    assert (out / PROFILER_TABLES / "trace_step000004.key_averages.txt").read_text() == "table"
    assert (out / MEMORY_SNAPSHOT).read_bytes() == b"snapshot"
