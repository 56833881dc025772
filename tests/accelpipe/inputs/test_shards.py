"""A worker's share of the prepared TFRecord shards, and the stateless key of each element."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelpipe.core.keras2 import tf
from accelpipe.datasets import tfrecord
from accelpipe.inputs import shards

pytestmark = pytest.mark.tensorflow


def _write(out: Path, prefix: str, records: list[bytes], count: int) -> list[Path]:
    """`records` as they are in `count` shards: their paths."""
    split = tfrecord.Split(prefix, records, count)
    return tfrecord.write_splits(out, [split], bytes, workers=1)[prefix]


def test_records_shard_whole_files_when_there_are_enough(tmp_path: Path) -> None:
    items = [f"r{i}".encode() for i in range(7)]
    files = _write(tmp_path, "x", items, 2)
    seen = [
        [r.numpy() for r in shards.worker_records(files, 2, index, seed=3)] for index in range(2)
    ]
    assert seen == [items[0::2], items[1::2]]  # file 0 (records 0, 2, ...), file 1


@pytest.mark.parametrize(("num_files", "num_workers"), [(1, 2), (3, 4)])
def test_records_shard_records_when_files_are_fewer_than_workers(
    tmp_path: Path, num_files: int, num_workers: int
) -> None:
    items = [f"r{i}".encode() for i in range(11)]
    files = _write(tmp_path, "x", items, num_files)
    seen = [
        [r.numpy() for r in shards.worker_records(files, num_workers, index, seed=5)]
        for index in range(num_workers)
    ]
    assert sorted(r for s in seen for r in s) == sorted(items)  # disjoint, and all covered
    assert max(map(len, seen)) - min(map(len, seen)) <= 1
    if num_files == 1:
        assert seen == [items[k::num_workers] for k in range(num_workers)]


def test_keys_are_a_function_of_seed_worker_and_element() -> None:
    def keys(seed: int, worker: int) -> list[tuple[int, int]]:
        data = shards.keyed(tf.data.Dataset.range(50), seed, worker)
        return [tuple(k.numpy().tolist()) for k, _ in data]

    first = keys(3, 0)
    tf.random.set_seed(99)  # no bearing: the keys are stateless
    assert keys(3, 0) == first
    assert len(set(first)) == 50
    assert not set(first) & set(keys(4, 0))
    assert not set(first) & set(keys(3, 1))
