"""A failed input-pipeline check surfaces as one DataError line, from a dataset iterated by
hand and from the TF engine's training loop; other TensorFlow errors pass unchanged."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from accelpipe.config import TrainConfig
from accelpipe.devices.tf_device import TFDevice
from accelpipe.engines.keras2 import tf
from accelpipe.engines.tf_data_checks import check, checked, data_errors
from accelpipe.engines.tf_distributed import InputShard
from accelpipe.engines.tf_trainer import TFTrainJob, run_training
from accelpipe.errors import DataError
from tests.helpers import tf_toy

pytestmark = pytest.mark.tensorflow


def _at_most(limit: int, x: tf.Tensor) -> tf.Tensor:
    ok = check(x <= limit, "value ", tf.strings.as_string(x), f" is above {limit} [sic]")
    with tf.control_dependencies([ok]):
        return tf.identity(x)


def test_a_failed_check_is_one_data_error_with_its_message() -> None:
    dataset = tf.data.Dataset.range(10).map(lambda x: _at_most(6, x)).prefetch(2)
    seen = []
    with pytest.raises(DataError) as err:
        for x in checked(dataset):
            seen.append(int(x))
    assert str(err.value) == "value 7 is above 6 [sic]"
    assert seen == list(range(7))  # every element before it came through


def test_passing_checks_change_nothing() -> None:
    dataset = tf.data.Dataset.range(5).map(lambda x: _at_most(6, x))
    assert [int(x) for x in checked(dataset)] == list(range(5))


def test_other_tensorflow_errors_pass_through_unchanged() -> None:
    with pytest.raises(tf.errors.InvalidArgumentError, match="plain failure"), data_errors():
        tf.debugging.Assert(False, ["plain failure"])


def test_a_failed_check_in_the_training_data_stops_training_with_one_line(
    tmp_path: Path,
) -> None:
    def make_job(cfg: TrainConfig, device: TFDevice) -> TFTrainJob:
        job = tf_toy.make_job(cfg, device)

        def dataset(epoch: int, shard: InputShard) -> tf.data.Dataset:
            batches = tf_toy.toy_dataset(epoch, shard).enumerate()
            return batches.map(lambda i, xy: (_at_most(1, i), xy)).map(lambda i, xy: xy)

        return dataclasses.replace(job, dataset=dataset)

    cfg = {
        "backend": "cpu",
        "train": {"epochs": 1, "lr": 0.05, "seed": 3, "batch_size": tf_toy.BATCH},
        "profile": {"enabled": False},
    }
    with pytest.raises(DataError) as err:
        run_training(cfg, tmp_path, make_job)
    assert str(err.value) == "value 2 is above 1 [sic]"
