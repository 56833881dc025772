"""performance.json: step statistics over steady-state steps, and the published figure."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from accelpipe import performance
from accelpipe.errors import DataError
from accelpipe.performance import Figure
from tests.helpers.train_logs import write_train_log

# step: (samples/s, data wait ms, step ms, profiled). Step 1 is the warm-up, the profiler ran
# steps 2 and 3, and steps 4..8 are measured.
LOG = {
    1: (10.0, 50.0, 400.0, "0"),
    2: (20.0, 5.0, 200.0, "1"),
    3: (30.0, 5.0, 150.0, "1"),
    4: (100.0, 2.0, 40.0, "0"),
    5: (110.0, 4.0, 36.0, "0"),
    6: (90.0, 1.0, 44.0, "0"),
    7: (120.0, 3.0, 30.0, "0"),
    8: (80.0, 5.0, 50.0, "0"),
}
TRAIN = {
    "backend": "gaudi",
    "device": "GAUDI",
    "precision": "bf16",
    "world_size": 8,
    "global_batch": 1024,
    "steps": 8,
    "seconds": 12.5,
    "peak_device_memory_bytes": 123,
    "device_memory_source": "torch.hpu.max_memory_allocated",
    "peak_host_rss_bytes": 456,
}
FIGURES = [
    Figure("ssd", 400.0, "img/s", "bf16", "Gaudi", 1, 128, "one card"),
    Figure("ssd", 3200.0, "img/s", "bf16", "Gaudi", 8, 128, "eight cards"),
    Figure("ssd", 150.0, "img/s", "fp32", "Gaudi", 1, 128, "fp32"),
]


def _write_log(path: Path) -> Path:
    assert list(LOG) == list(range(1, len(LOG) + 1))
    return write_train_log(path, LOG.values())


def test_statistics_leave_out_warmup_and_profiled_steps(tmp_path: Path) -> None:
    stats = performance.step_statistics(_write_log(tmp_path / "train_log.csv"), 1)
    assert stats["steps"] == {"logged": 8, "warmup": 1, "profiled_excluded": 2, "measured": 5}
    # measured rates 80 90 100 110 120: p10 and p90 interpolate between neighbours
    assert stats["samples_per_s"] == pytest.approx({"median": 100.0, "p10": 84.0, "p90": 116.0})
    # measured steps 30 36 40 44 50 ms
    assert stats["step_ms"] == pytest.approx({"median": 40.0, "p10": 32.4, "p90": 47.6})
    assert stats["data_wait_share"] == pytest.approx(15 / 200)


def test_a_warmup_step_the_profiler_ran_counts_as_warmup(tmp_path: Path) -> None:
    stats = performance.step_statistics(_write_log(tmp_path / "train_log.csv"), 3)
    assert stats["steps"] == {"logged": 8, "warmup": 3, "profiled_excluded": 0, "measured": 5}


def test_every_attempt_of_a_resumed_run_has_its_warmup_left_out(tmp_path: Path) -> None:
    # resumed after step 4: steps 5 and 6 are the new process's tracing and cache filling
    attempts = [0, 0, 0, 0, 1, 1, 1, 1]
    log = write_train_log(tmp_path / "train_log.csv", LOG.values(), attempts)
    stats = performance.step_statistics(log, 1)
    assert stats["steps"] == {"logged": 8, "warmup": 2, "profiled_excluded": 2, "measured": 4}
    # measured: step 4 (100) of the first attempt, 6 7 8 (90 120 80) of the second
    assert stats["samples_per_s"]["median"] == pytest.approx(95.0)


def test_no_measured_step_gives_no_statistics(tmp_path: Path) -> None:
    stats = performance.step_statistics(_write_log(tmp_path / "train_log.csv"), 8)
    assert stats["steps"]["measured"] == 0
    assert stats["samples_per_s"] is None and stats["step_ms"] is None
    assert stats["data_wait_share"] is None


def test_a_log_without_the_profiled_column_is_named(tmp_path: Path) -> None:
    log = tmp_path / "train_log.csv"
    log.write_text("epoch,step,loss,lr,samples_per_s,data_wait_ms,step_ms\n0,1,1,1,1,1,1\n")
    with pytest.raises(DataError, match=r"train_log\.csv: no column profiled"):
        performance.step_statistics(log, 0)


@pytest.mark.parametrize(
    ("backend", "device", "family"),
    [
        ("cuda", "NVIDIA A100-SXM4-80GB", "A100"),
        ("cuda", "Tesla V100-SXM2-16GB", "V100"),
        ("cuda", "NVIDIA H100 80GB HBM3", "H100"),
        ("rocm", "AMD Instinct MI300X", "MI300X"),
        ("gaudi", "GAUDI", "Gaudi"),
        ("gaudi", "GAUDI2", "Gaudi2"),
        ("gaudi", "Gaudi HPU (TensorFlow)", None),  # TF fallback: no card type
        ("cuda", "NVIDIA GeForce RTX 4090", None),
        ("cpu", "cpu (x86_64, 2 threads)", None),
    ],
)
def test_device_family_from_backend_and_name(backend: str, device: str, family: str) -> None:
    assert performance.device_family(backend, device) == family


def test_reference_compares_per_card_with_the_nearest_card_count() -> None:
    rates = {"median": 1600.0, "p10": 1500.0, "p90": 1700.0}
    published, note = performance.reference("ssd", TRAIN, rates, FIGURES)
    assert published == {
        "samples_per_s": 3200.0,
        "precision": "bf16",
        "device": "Gaudi",
        "batch": 128,
        "cards": 8,
        "source": "eight cards",
        "ratio": pytest.approx((1600 / 8) / (3200 / 8), rel=1e-3),
    }
    assert "per card" in note and "8 cards" in note
    two_cards = TRAIN | {"world_size": 2, "global_batch": 256}
    published, _ = performance.reference("ssd", two_cards, rates, FIGURES)
    assert published["cards"] == 1 and published["ratio"] == pytest.approx(
        (1600 / 2) / 400, rel=1e-3
    )


def test_reference_without_a_measured_step_has_no_ratio() -> None:
    published, note = performance.reference("ssd", TRAIN, None, FIGURES)
    assert published["ratio"] is None and "no measured step" in note


@pytest.mark.parametrize(
    ("workload", "changes", "said"),
    [
        ("ssd", {"precision": "fp16"}, "no published figure for ssd at fp16 on Gaudi"),
        ("resnet50", {}, "no published figure for resnet50 at bf16 on Gaudi"),
        ("ssd", {"backend": "cpu", "device": "cpu (x86_64)"}, "cpu"),
        ("ssd", {"device": "Gaudi HPU (TensorFlow)"}, "does not say"),
    ],
)
def test_no_reference_says_why(workload: str, changes: dict, said: str) -> None:
    published, note = performance.reference(workload, TRAIN | changes, None, FIGURES)
    assert published is None and said in note


def test_the_shipped_figures_load_and_each_names_a_family_we_can_match() -> None:
    figures = performance.load_figures()
    assert figures
    for figure in figures:
        backend, name = ("gaudi", "GAUDI") if figure.device == "Gaudi" else ("cuda", figure.device)
        assert performance.device_family(backend, name) == figure.device


def _bad_figures(tmp_path: Path, **changes: object) -> Path:
    entry = asdict(FIGURES[0]) | changes
    path = tmp_path / "reference_figures.yaml"
    path.write_text(yaml.safe_dump({"figures": [entry]}))
    return path


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"precision": "amp"}, "figures.0.precision"),
        ({"cards": 0}, "figures.0.cards"),
        ({"samples_per_s": "fast"}, "figures.0.samples_per_s"),
        ({"workload": "bert"}, "figures.0.workload"),
        ({"typo": 1}, "figures.0"),
    ],
)
def test_a_bad_figure_names_the_file_and_key(tmp_path: Path, changes: dict, key: str) -> None:
    path = _bad_figures(tmp_path, **changes)
    with pytest.raises(DataError, match=rf"reference_figures\.yaml: key '{key}'"):
        performance.load_figures(path)


def test_run_performance_writes_the_contract_from_the_run_files(tmp_path: Path) -> None:
    train = tmp_path / "train"
    train.mkdir()
    _write_log(train / "train_log.csv")
    (train / "stage.json").write_text(json.dumps(TRAIN))
    slice_ = {
        "performance": {"warmup_steps": 1},
        "reference_figures": [asdict(f) for f in FIGURES],
    }
    facts = performance.run_performance({"train": train}, slice_, "ssd", "bf16")
    stats = performance.step_statistics(train / "train_log.csv", 1)
    reference = facts.pop("reference")
    assert reference["cards"] == 8
    # median 100 samples/s; the ratio keeps 4 significant digits
    assert reference["ratio"] == pytest.approx((100 / 8) / (3200 / 8), rel=1e-3)
    assert "per card" in facts.pop("reference_note")
    assert facts == {
        "workload": "ssd",
        "run": "bf16",
        "backend": "gaudi",
        "device": "GAUDI",
        "precision": "bf16",
        "world_size": 8,
        "global_batch": 1024,
        "steps": {"total": 8, **stats["steps"]},
        "samples_per_s": stats["samples_per_s"],
        "step_ms": stats["step_ms"],
        "data_wait_share": stats["data_wait_share"],
        "time_to_train_s": 12.5,
        "peak_device_memory_bytes": 123,
        "device_memory_source": "torch.hpu.max_memory_allocated",
        "peak_host_rss_bytes": 456,
    }
