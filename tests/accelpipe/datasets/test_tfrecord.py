"""TFRecord shards written without TensorFlow are the bytes TensorFlow's writer makes, and
damaged ones are found."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import tensorflow as tf

from accelpipe.core.errors import DataError
from accelpipe.datasets import tfrecord
from tests.helpers.tf_pipelines import count_records

pytestmark = pytest.mark.tensorflow

RECORDS = [b"", b"x", bytes(range(256)) * 300, b"\x00" * 70_000]


def _identity(record: bytes) -> bytes:
    return record


def _write(out: Path, prefix: str, records: list[bytes], shards: int, workers: int = 1):
    """One split of `records` as they are, through write_splits: its shard paths."""
    split = tfrecord.Split(prefix, records, shards)
    return tfrecord.write_splits(out, [split], _identity, workers)[prefix]


def test_shards_are_byte_identical_to_tensorflows_writer(tmp_path: Path) -> None:
    ours = _write(tmp_path, "t", RECORDS, 2, workers=2)
    for index, path in enumerate(ours):
        reference = tmp_path / f"tf{index}.tfrecord"
        with tf.io.TFRecordWriter(str(reference)) as writer:
            for record in RECORDS[index::2]:
                writer.write(record)
        assert path.read_bytes() == reference.read_bytes()


def test_tensorflow_reads_every_record_back(tmp_path: Path) -> None:
    paths = _write(tmp_path, "t", RECORDS, 3)
    assert [p.name for p in paths] == [tfrecord.shard_name("t", i, 3) for i in range(3)]
    read = [r.numpy() for p in paths for r in tf.data.TFRecordDataset(str(p))]
    assert sorted(read) == sorted(RECORDS)


def test_a_flipped_byte_fails_tensorflows_checksum(tmp_path: Path) -> None:
    (path,) = _write(tmp_path, "t", [b"payload" * 10], 1)
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # inside the record
    path.write_bytes(bytes(data))
    dataset = tf.data.TFRecordDataset(str(path), compression_type="")
    with pytest.raises(tf.errors.DataLossError):
        list(dataset.as_numpy_iterator())


def test_every_shard_is_written_empty_ones_too(tmp_path: Path) -> None:
    paths = _write(tmp_path, "x", [b"a", b"b"], 3)
    assert [p.name for p in paths] == [f"x-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert [count_records([p]) for p in paths] == [1, 1, 0]


def test_no_shard_count_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="number of shards"):
        _write(tmp_path, "t", RECORDS, 0)


_WRITE_SHARD = tfrecord._write_shard


def _one_short(task) -> tuple[str, int, str, list[int]]:
    prefix, written, name, stamp = _WRITE_SHARD(task)
    return prefix, max(written - 1, 0), name, stamp


def test_a_split_short_of_records_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tfrecord, "_write_shard", _one_short)
    splits = [tfrecord.Split("train", [], 1), tfrecord.Split("val", [b"a", b"b", b"c"], 2)]
    with pytest.raises(DataError, match="wrote 1 val records, expected 3"):
        tfrecord.write_splits(tmp_path, splits, _identity, workers=1)


def test_splits_share_one_pool_and_keep_their_shards(tmp_path: Path) -> None:
    splits = [tfrecord.Split("train", RECORDS, 3), tfrecord.Split("val", RECORDS[:2], 1)]
    paths = tfrecord.write_splits(tmp_path, iter(splits), _identity, workers=2)
    assert {p: [x.name for x in v] for p, v in paths.items()} == {
        "train": [tfrecord.shard_name("train", i, 3) for i in range(3)],
        "val": [tfrecord.shard_name("val", 0, 1)],
    }
    for split in splits:
        read = [r.numpy() for p in paths[split.prefix] for r in tf.data.TFRecordDataset(str(p))]
        assert sorted(read) == sorted(split.items)


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


# ----------------------------------------------------------------------------- damaged shards

SIZES = [100, 3000, 50]  # records; frames are 16 bytes longer


def _shard(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    (path,) = _write(folder, "d", [bytes([i]) * n for i, n in enumerate(SIZES)], 1)
    return path


def _tf_error(path: Path) -> str:
    """TensorFlow's own DataLossError message on reading `path` through."""
    with pytest.raises(tf.errors.DataLossError) as err:
        list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    return err.value.message


def test_a_whole_shard_has_no_damage(tmp_path: Path) -> None:
    path = _shard(tmp_path)
    assert tfrecord.damage(path) is None
    assert tfrecord.damage(path, checksums=True) is None
    tfrecord.check_shards([path])


def test_a_shard_cut_inside_a_record_is_truncated_there(tmp_path: Path) -> None:
    path = _shard(tmp_path)
    second = 100 + 16  # where the second record's frame starts
    path.write_bytes(path.read_bytes()[: second + 12 + 1000])
    assert "truncated record at 116" in _tf_error(path)  # TensorFlow: an offset, no file
    assert tfrecord.damage(path) == (
        "truncated record at byte 116: it needs 3016 bytes, the file ends 1012 bytes into it"
    )
    with pytest.raises(DataError) as err:
        tfrecord.check_shards([path])
    assert str(err.value).startswith(f"{path}: truncated record at byte 116: ")
    assert "snakemake --forcerun prepare_dataset" in str(err.value)


def test_a_shard_cut_inside_a_header_is_truncated(tmp_path: Path) -> None:
    """TensorFlow reads such a file to its last whole record without an error: only the walk
    over the frames sees the loss."""
    path = _shard(tmp_path)
    end = 100 + 16 + 3000 + 16
    path.write_bytes(path.read_bytes()[: end + 5])
    assert len(list(tf.data.TFRecordDataset(str(path)))) == 2
    assert tfrecord.damage(path) == (
        "truncated: the file ends 5 bytes into the 12-byte header of the record at byte 3132"
    )


def test_a_flipped_byte_is_found_by_its_checksum(tmp_path: Path) -> None:
    path = _shard(tmp_path)
    data = bytearray(path.read_bytes())
    data[116 + 12 + 7] ^= 1  # in the second record's data
    path.write_bytes(bytes(data))
    message = _tf_error(path)
    assert "corrupted record at 128" in message  # the record's data offset
    assert tfrecord.damage(path) is None  # the frames are whole
    damaged = "corrupted record at byte 116 (its data fails its checksum)"
    assert tfrecord.damage(path, checksums=True) == damaged
    assert tfrecord.damage(path, at=128) == damaged
    assert tfrecord.damage(path, at=0) is None


def test_a_corrupted_length_is_found(tmp_path: Path) -> None:
    path = _shard(tmp_path)
    data = bytearray(path.read_bytes())
    data[116 + 1] ^= 1  # the second record's length
    path.write_bytes(bytes(data))
    assert tfrecord.damage(path) == "corrupted record at byte 116 (its length fails its checksum)"


def test_the_damaged_shard_is_found_among_those_read_from_tensorflows_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tfrecord, "_READING", {})  # none read in this process yet
    whole, cut, flipped = (_shard(tmp_path / name) for name in ("whole", "cut", "flipped"))
    cut.write_bytes(cut.read_bytes()[:-20])
    data = bytearray(flipped.read_bytes())
    data[12 + 3] ^= 1  # the first record's data
    flipped.write_bytes(bytes(data))
    cut_error, flipped_error = _tf_error(cut), _tf_error(flipped)
    assert tfrecord.find_damaged(cut_error) is None  # not a shard this process reads
    tfrecord.reading([whole, cut, flipped])
    found = tfrecord.find_damaged(cut_error)
    assert found is not None and found.startswith(f"{cut}: truncated record at byte 3132: ")
    # the cut shard is damaged too, but not where TensorFlow's message says
    found = tfrecord.find_damaged(flipped_error)
    assert found is not None and found.startswith(f"{flipped}: corrupted record at byte 0 ")
    assert tfrecord.find_damaged("truncated record at 52") is None  # no shard damaged there
    # no offset: the frames, then every checksum
    assert tfrecord.find_damaged("some data loss").startswith(f"{cut}: truncated")
    cut.unlink()
    assert tfrecord.find_damaged("some data loss").startswith(f"{flipped}: corrupted")


# ---------------------------------------------------- checked once per prepared dataset


def _count_walks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    walked: list[Path] = []
    walk = tfrecord._walk

    def counting(path: Path, checksums: bool, at: int | None):  # type: ignore[no-untyped-def]
        walked.append(path)
        return walk(path, checksums, at)

    monkeypatch.setattr(tfrecord, "_walk", counting)
    monkeypatch.setattr(tfrecord, "_WALKED", {})  # none walked in this process yet
    return walked


def _later(path: Path, data: bytes) -> None:
    """Rewrite `path` with `data`, its mtime a second on (a later write: the clock moved)."""
    mtime = path.stat().st_mtime_ns
    path.write_bytes(data)
    os.utime(path, ns=(mtime, mtime + 1_000_000_000))


def test_shards_as_prepared_are_not_walked_again_and_changed_ones_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33 item 4: the walk (seconds a GB cold) ran on each pipeline build."""
    first, second = _write(tmp_path, "c", [bytes([i]) * 500 for i in range(6)], 2)
    walked = _count_walks(monkeypatch)
    tfrecord.check_shards([first, second])
    assert walked == []  # write_splits walked them and noted them in CHECKED
    checked = json.loads((tmp_path / tfrecord.CHECKED).read_text())
    assert sorted(checked) == [first.name, second.name]

    data = bytearray(first.read_bytes())
    data[516 + 1] ^= 1  # the second record's length: the same size, damaged
    _later(first, bytes(data))
    with pytest.raises(DataError, match=f"^{first}: corrupted record at byte 516 "):
        tfrecord.check_shards([first, second])
    # A damaged shard of the same size swapped in for the second one.
    swapped = tmp_path / "swapped.tfrecord"
    swapped.write_bytes(bytes(data))
    os.utime(swapped, ns=(second.stat().st_mtime_ns, second.stat().st_mtime_ns + 10**9))
    os.replace(swapped, second)
    with pytest.raises(DataError, match=f"^{second}: corrupted record at byte 516 "):
        tfrecord.check_shards([second])


def test_shards_without_a_manifest_are_walked_once_a_process_until_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _write(tmp_path, "c", [bytes([i]) * 500 for i in range(6)], 2)
    (tmp_path / tfrecord.CHECKED).write_text("not json")  # unreadable: no manifest
    walked = _count_walks(monkeypatch)
    tfrecord.check_shards(paths)
    tfrecord.check_shards(paths)
    assert walked == paths
    _later(paths[1], paths[1].read_bytes()[:-10])
    with pytest.raises(DataError, match=f"^{paths[1]}: truncated record at byte "):
        tfrecord.check_shards(paths)
    assert walked == [*paths, paths[1]]
