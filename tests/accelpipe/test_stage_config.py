from __future__ import annotations

import pytest

from accelpipe import stage_config
from accelpipe.config import validate
from accelpipe.errors import ConfigError


@pytest.fixture(scope="module")
def config() -> dict:
    return validate({"ssd": {"train": {"lr": 0.5}, "runs": {"small": {"batch_size": 4}}}})


def test_train_slice_is_the_run_with_its_overrides_and_nothing_else(config: dict) -> None:
    train = stage_config.train(config, "ssd", "small")
    assert set(train) == {"backend", "model", "train", "profile"}
    assert train["train"]["lr"] == 0.5 and train["train"]["batch_size"] == 4
    assert "runs" not in train and "evaluate" not in train


def test_evaluate_slice_carries_only_the_precision_of_training(config: dict) -> None:
    evaluate = stage_config.evaluate(config, "ssd", "small")
    assert evaluate == {
        "backend": "cpu",
        "evaluate": config["ssd"]["evaluate"],
        "train": {"precision": "auto"},
    }


def test_prepare_slice_is_the_owning_workloads_prepare_block(config: dict) -> None:
    assert stage_config.prepare(config, "coco", "tfrecord") == {"prepare": config["ssd"]["prepare"]}
    assert stage_config.prepare(config, "brats", "2d")["folds"] == 5


def test_publish_slice_names_the_dataset_and_the_resolved_run(config: dict) -> None:
    publish = stage_config.publish(config, "ssd", "small")
    assert set(publish["datasets"]) == {"coco"}
    assert publish["ssd"]["train"]["batch_size"] == 4


def test_performance_settings_reach_publish_only(config: dict) -> None:
    """A new warm-up count rewrites performance.json without re-running training."""
    assert stage_config.publish(config, "ssd", "small")["performance"] == {"warmup_steps": 5}
    assert "performance" not in stage_config.train(config, "ssd", "small")


def test_a_run_the_config_lacks_is_refused_naming_the_key(config: dict) -> None:
    with pytest.raises(ConfigError, match=r"ssd\.runs"):
        stage_config.train(config, "ssd", "nope")


def test_benchmark_row_is_the_base_train_block_at_the_rows_precision_and_batch() -> None:
    config = validate(
        {
            "ssd": {
                "train": {"lr": 0.5, "epochs": 50},
                "runs": {"small": {"batch_size": 4}},
                "benchmark": {"warmup_steps": 3, "steps": 7, "batch_sizes": [16]},
            }
        }
    )
    row = stage_config.benchmark_row(config, "ssd", "bf16-b16")
    assert row["train"] == config["ssd"]["train"] | {
        "precision": "bf16",
        "batch_size": 16,
        "epochs": 1,
        "steps_per_epoch": 10,
        "log_every": 1,
    }
    assert row["profile"]["enabled"] is False and row["model"] == config["ssd"]["model"]
    assert stage_config.benchmark(config, "ssd") == {"warmup_steps": 3}


def test_benchmark_settings_are_not_part_of_any_runs_slices(config: dict) -> None:
    changed = validate(
        {
            "ssd": {
                "train": {"lr": 0.5},
                "runs": {"small": {"batch_size": 4}},
                "benchmark": {"steps": 99},
            }
        }
    )
    for slice_of in (stage_config.train, stage_config.evaluate, stage_config.publish):
        assert slice_of(changed, "ssd", "small") == slice_of(config, "ssd", "small")
