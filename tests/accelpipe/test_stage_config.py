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


def test_a_run_the_config_lacks_is_refused_naming_the_key(config: dict) -> None:
    with pytest.raises(ConfigError, match=r"ssd\.runs"):
        stage_config.train(config, "ssd", "nope")
