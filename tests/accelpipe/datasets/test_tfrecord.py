"""TFRecord shards written without TensorFlow are the bytes TensorFlow's writer makes."""

from __future__ import annotations

from pathlib import Path

import pytest
import tensorflow as tf

from accelpipe.datasets import tfrecord
from accelpipe.errors import DataError

pytestmark = pytest.mark.tensorflow

RECORDS = [b"", b"x", bytes(range(256)) * 300, b"\x00" * 70_000]


def _identity(record: bytes) -> bytes:
    return record


def test_shards_are_byte_identical_to_tensorflows_writer(tmp_path: Path) -> None:
    ours = tfrecord.write_shards(tmp_path, "t", RECORDS, 2, _identity, workers=2)
    for index, path in enumerate(ours):
        reference = tmp_path / f"tf{index}.tfrecord"
        with tf.io.TFRecordWriter(str(reference)) as writer:
            for record in RECORDS[index::2]:
                writer.write(record)
        assert path.read_bytes() == reference.read_bytes()


def test_tensorflow_reads_every_record_back(tmp_path: Path) -> None:
    paths = tfrecord.write_shards(tmp_path, "t", RECORDS, 3, _identity)
    assert [p.name for p in paths] == [tfrecord.shard_name("t", i, 3) for i in range(3)]
    read = [r.numpy() for p in paths for r in tf.data.TFRecordDataset(str(p))]
    assert sorted(read) == sorted(RECORDS)


def test_a_flipped_byte_fails_tensorflows_checksum(tmp_path: Path) -> None:
    (path,) = tfrecord.write_shards(tmp_path, "t", [b"payload" * 10], 1, _identity)
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # inside the record
    path.write_bytes(bytes(data))
    dataset = tf.data.TFRecordDataset(str(path), compression_type="")
    with pytest.raises(tf.errors.DataLossError):
        list(dataset.as_numpy_iterator())


def test_no_shard_count_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="number of shards"):
        tfrecord.write_shards(tmp_path, "t", RECORDS, 0, _identity)


# Lengths and values on both sides of each varint width (1, 2, 3 bytes and the loop beyond).
VARINT_EDGES = [0, 1, 127, 128, 16_383, 16_384, 2**21 - 1, 2**21, 2**28, 2**63 - 1]


@pytest.mark.parametrize("length", VARINT_EDGES[:8])
def test_example_with_a_value_of_each_varint_width_parses_in_tensorflow(length: int) -> None:
    blob = bytes(range(256)) * (length // 256) + bytes(length % 256)
    ints = [*VARINT_EDGES, -1, -(2**63)]
    encoded = tfrecord.example(
        {
            "blob": tfrecord.bytes_feature(blob),
            "ints": tfrecord.int64_feature(ints),
            "floats": tfrecord.float_feature([0.5, -2.0]),
            "text": tfrecord.bytes_feature(["a", "bc"]),
        }
    )
    parsed = tf.train.Example.FromString(encoded).features.feature
    assert parsed["blob"].bytes_list.value == [blob]
    assert list(parsed["ints"].int64_list.value) == ints
    assert list(parsed["floats"].float_list.value) == [0.5, -2.0]
    assert parsed["text"].bytes_list.value == [b"a", b"bc"]
