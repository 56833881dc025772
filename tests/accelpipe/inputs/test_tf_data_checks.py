"""A failed input-pipeline check, or a damaged TFRecord shard, surfaces as one DataError
line, from a dataset iterated by hand and from the TF engine's training loop; other
TensorFlow errors pass unchanged."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelpipe.config.settings import TFTrain
from accelpipe.core.errors import DataError
from accelpipe.core.keras2 import tf
from accelpipe.datasets import tfrecord
from accelpipe.devices.tf_device import TFDevice
from accelpipe.engines.tf_trainer import TFTrainJob
from accelpipe.inputs.shards import worker_records
from accelpipe.inputs.tf_data_checks import check, checked, data_errors
from accelpipe.launch.tf_launch import InputShard
from tests.helpers import tf_toy
from tests.helpers.settings import tf_run

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
    def make_job(cfg: TFTrain, device: TFDevice) -> TFTrainJob:
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
        tf_run(cfg, tmp_path, make_job)
    assert str(err.value) == "value 2 is above 1 [sic]"


# ----------------------------------------------------------------------------- damaged shards

RECORD = 9 * 4  # bytes: x (8 floats) and y
FRAME = RECORD + 16


def _shards(folder: Path) -> list[Path]:
    """Two shards of 12 toy records each (x [8], y = x0 + x1), as float32 bytes."""
    x = np.random.default_rng(0).normal(size=(24, 8)).astype(np.float32)
    y = x[:, :2].sum(axis=1, keepdims=True)
    rows = [row.tobytes() for row in np.concatenate([x, y], axis=1)]
    split = tfrecord.Split("train", rows, 2)
    folder.mkdir()
    return tfrecord.write_splits(folder, [split], bytes)["train"]


def _train_on(shards: list[Path], work: Path) -> dict[str, Any]:
    """Train the toy job for two epochs on `shards`; the run facts."""

    def make_job(cfg: TFTrain, device: TFDevice) -> TFTrainJob:
        def dataset(epoch: int, shard: InputShard) -> tf.data.Dataset:
            records = worker_records(shards, shard.num_workers, shard.index, epoch)
            values = records.map(lambda r: tf.io.decode_raw(r, tf.float32))
            pairs = values.map(lambda v: (tf.ensure_shape(v[:8], [8]), v[8:]))
            return pairs.repeat().batch(shard.batch_size, drop_remainder=True)

        return dataclasses.replace(tf_toy.make_job(cfg, device), dataset=dataset)

    cfg = {
        "backend": "cpu",
        "train": {"epochs": 2, "lr": 0.05, "seed": 3, "batch_size": tf_toy.BATCH},
        "profile": {"enabled": False},
    }
    return tf_run(cfg, work, make_job)


def test_whole_shards_train(tmp_path: Path) -> None:
    facts = _train_on(_shards(tmp_path / "data"), tmp_path / "work")
    assert facts["steps"] == 2 * tf_toy.STEPS_PER_EPOCH  # both epochs, to the last step


def test_a_truncated_shard_stops_training_with_one_line_naming_it(tmp_path: Path) -> None:
    """TensorFlow's reader says "truncated record at 104" and names no file."""
    shards = _shards(tmp_path / "data")
    shards[1].write_bytes(shards[1].read_bytes()[: 2 * FRAME + 20])  # inside its 3rd record
    with pytest.raises(DataError) as err:
        _train_on(shards, tmp_path / "work")
    assert str(err.value) == (
        f"{shards[1]}: truncated record at byte {2 * FRAME}: it needs {FRAME} bytes, the file "
        "ends 20 bytes into it; the shard is damaged: re-make the prepared data with "
        "`snakemake --forcerun prepare_dataset <target>`"
    )


def test_a_corrupted_shard_stops_training_with_one_line_naming_it(tmp_path: Path) -> None:
    shards = _shards(tmp_path / "data")
    data = bytearray(shards[0].read_bytes())
    data[FRAME + 12 + 5] ^= 0x10  # in the data of its 2nd record
    shards[0].write_bytes(bytes(data))
    with pytest.raises(DataError) as err:
        _train_on(shards, tmp_path / "work")
    assert str(err.value).startswith(
        f"{shards[0]}: corrupted record at byte {FRAME} (its data fails its checksum); "
    )


def test_data_loss_outside_the_shards_read_passes_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shards an earlier test in this process read (and damaged) would otherwise be searched.
    monkeypatch.setattr(tfrecord, "_READING", {})
    path = tmp_path / "other.tfrecord"
    length = struct.pack("<Q", 10)
    path.write_bytes(length + tfrecord._masked_crc32c(length) + b"short")
    with pytest.raises(tf.errors.DataLossError), data_errors():
        list(tf.data.TFRecordDataset(str(path)))
