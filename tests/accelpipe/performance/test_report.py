"""performance.json of a run, put together from its files."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from accelpipe.performance import DEFINITIONS
from accelpipe.performance.report import run_performance
from accelpipe.performance.steps import step_statistics
from tests.helpers.performance_runs import FIGURES, TRAIN, write_log


def test_run_performance_writes_the_contract_from_the_run_files(tmp_path: Path) -> None:
    train = tmp_path / "train"
    train.mkdir()
    write_log(train / "train_log.csv")
    (train / "stage.json").write_text(json.dumps(TRAIN))
    slice_ = {
        "datasets": {"coco": {"source": "synthetic"}},
        "performance": {"warmup_steps": 1},
        "reference_figures": [asdict(f) for f in FIGURES],
    }
    facts = run_performance({"train": train}, slice_, "ssd", "bf16")
    stats = step_statistics(train / "train_log.csv", 1)
    reference = facts.pop("reference")
    assert reference["cards"] == 8
    # the slice's synthetic COCO: indicative, whatever else matches
    assert reference["comparable"] is False
    assert reference["differences"] == [
        "this run on synthetic data (its own sizes, not the dataset's)"
    ]
    compute = facts.pop("compute")  # stage.json without flops and gemm: each says why not
    energy = facts.pop("energy")  # nor power: a stage from before energy was measured
    host = facts.pop("host")  # nor the host's load: not judged
    assert host["oversubscribed"] is None and host["warning"] is None
    assert energy["joules"] is None and energy["process_joules"] is None
    assert energy["not_measured"] == "not recorded: the train stage predates energy measurement"
    assert compute["flops_per_sample"] is None and compute["mfu"] is None
    assert compute["not_measured"]["flops"] == "no counted train step"
    # 100 samples/s over the measured steps; the ratio keeps 4 significant digits
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
        "throughput": stats["throughput"],
        # 8 steps of 1024 samples over the stage's 12.5 s
        "stage_throughput": {"samples_per_s": 655.36, "samples": 8192, "seconds": 12.5},
        "per_step": stats["per_step"],
        "data_wait_share": stats["data_wait_share"],
        "profiled_step": {
            "trace_median_ms": None,
            "measured_median_ms": 40.0,
            "ratio": None,
            "agrees": None,
            "note": "not compared: no profiled step in the trace",
        },
        "time_to_train_s": 12.5,
        # a stage.json from before attempts were recorded: its one attempt
        "attempts": [
            {
                "attempt": 1,
                "started": None,
                "seconds": 12.5,
                "resumed_from_step": None,
                "status": "finished",
            }
        ],
        "time_to_target_s": None,
        "time_to_target": {"not_reached": "no evaluation inside training (train.eval_every)"},
        "peak_device_memory_bytes": 123,
        "device_memory_source": "torch.hpu.max_memory_allocated",
        "peak_host_rss_bytes": 456,
        "definitions": DEFINITIONS,
    }
