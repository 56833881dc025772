"""The benchmark table: one row per benchmark job, its numbers from that job's files."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.results import benchmark
from tests.helpers.train_logs import write_train_log


def _train_dir(root: Path, row: str, rates: list[float], waits: list[float]) -> Path:
    """A benchmark row's train output: stage.json and a train_log.csv of one epoch."""
    precision, batch = row.rsplit("-b", 1)
    folder = root / row
    folder.mkdir(parents=True)
    stage = {
        "backend": "cpu",
        "precision": precision,
        "global_batch": int(batch),
        "world_size": 1,
        "device": "cpu",
        "peak_device_memory_bytes": None,
        "peak_host_rss_bytes": 123_000_000,
    }
    (folder / "stage.json").write_text(json.dumps(stage))
    steps = [
        (rate, wait, 1000 * int(batch) / rate, "0") for rate, wait in zip(rates, waits, strict=True)
    ]
    write_train_log(folder / "train_log.csv", steps)
    return folder


def test_rows_leave_out_the_warmup_and_sort_by_precision_then_batch(tmp_path: Path) -> None:
    dirs = [
        _train_dir(tmp_path, "fp32-b8", [1.0, 80.0, 100.0, 120.0], [900, 10, 10, 10]),
        _train_dir(tmp_path, "bf16-b8", [1.0, 160.0, 200.0, 240.0], [900, 5, 5, 5]),
        _train_dir(tmp_path, "bf16-b4", [1.0, 40.0, 50.0, 60.0], [900, 0, 0, 0]),
    ]
    rows = benchmark.write_table(dirs, "ssd", warmup_steps=1, out=tmp_path / "out")
    assert [r["row"] for r in rows] == ["bf16-b4", "bf16-b8", "fp32-b8"]
    fp32 = rows[2]
    spread = [fp32[f"per_step_samples_per_s_{q}"] for q in ("p10", "median", "p90")]
    assert spread == [84.0, 100.0, 116.0]
    # the throughput: 3 x 8 samples over 100 + 80 + 66.67 ms, not the median rate
    assert fp32["samples_per_s"] == pytest.approx(24 / (0.1 + 0.08 + 8 / 120), rel=1e-4)
    assert fp32["not_measured"] is None
    # step times 100, 80, 66.67 ms: the median is the 100 samples/s step
    assert fp32["step_ms_median"] == pytest.approx(80.0)
    assert fp32["data_wait_share"] == pytest.approx(30 / (100 + 80 + 1000 * 8 / 120), abs=1e-4)
    assert fp32["steps_measured"] == 3 and fp32["peak_host_rss_bytes"] == 123_000_000
    assert fp32["flops_per_sample"] is None and fp32["mfu"] is None  # no counted step here
    assert fp32["joules_per_1000_samples"] is None  # no power recorded here
    table = json.loads((tmp_path / "out" / "benchmark.json").read_text())
    assert table == {"workload": "ssd", "warmup_steps": 1, "rows": rows}
    with (tmp_path / "out" / "benchmark.csv").open() as f:
        assert [r["row"] for r in csv.DictReader(f)] == ["bf16-b4", "bf16-b8", "fp32-b8"]
    assert (tmp_path / "out" / "benchmark.png").read_bytes()[:4] == b"\x89PNG"


def test_a_row_without_its_log_is_named_and_no_table_is_left(tmp_path: Path) -> None:
    good = _train_dir(tmp_path, "fp32-b8", [1.0, 80.0], [0, 0])
    bad = _train_dir(tmp_path, "bf16-b8", [1.0, 80.0], [0, 0])
    (bad / "train_log.csv").unlink()
    with pytest.raises(DataError, match=re.escape("bf16-b8/train_log.csv")):
        benchmark.write_table([good, bad], "ssd", warmup_steps=1, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_row_gives_the_joules_per_1000_samples_of_its_measured_steps(tmp_path: Path) -> None:
    folder = _train_dir(tmp_path, "fp32-b8", [1.0], [0])
    stage = json.loads((folder / "stage.json").read_text())
    power = {"joules": 9.0, "seconds": 3.0, "source": "rapl package energy counter"}
    power |= {"method": "energy counter", "devices": ["package-0"], "reason": None}
    (folder / "stage.json").write_text(json.dumps(stage | {"power": power | {"incomplete": None}}))
    # a warm-up step, then 2 measured steps of 8 samples and 1 J and 3 J
    steps = [(1.0, 0, 8000, "0", 8, 8000, 5.0), (80, 0, 100, "0", 8, 100, 1.0)]
    write_train_log(folder / "train_log.csv", [*steps, (80, 0, 100, "0", 8, 100, 3.0)])
    (row,) = benchmark.write_table([folder], "ssd", warmup_steps=1, out=tmp_path / "out")
    assert row["joules_per_1000_samples"] == 250.0  # 4 J over 16 samples
