"""A worker's share of prepared TFRecord shards, read by tf.data, with a stateless random key
per element.

`worker_records` is one data-parallel worker's share of the shards (written offline by
`accelpipe.datasets.tfrecord`, which also walks them for damage: each file read here is
noted with `tfrecord.reading`, so a DataLossError can be traced to its shard), and `keyed`
gives each element of a stream its own random key, so augmentations drawn with stateless ops
are the same for the same seed whatever the threads do.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from accelpipe.core.keras2 import tf
from accelpipe.datasets.tfrecord import reading

# The pipelines' functions are written in graph ops (tf.cond, tf.while_loop), so tf.data traces
# them as they are: AutoGraph's source conversion took seconds per pipeline, and a pipeline is
# built each epoch.
graph_only = tf.autograph.experimental.do_not_convert


def worker_records(files: Sequence[Path], num_workers: int, index: int, seed: int) -> Any:
    """Worker `index`'s serialized records (a tf.data.Dataset): whole files when there are at
    least as many files as workers (as the reference input pipelines shard), else every
    num_workers-th record of all files; files shuffled by `seed` and read interleaved."""
    by_file = len(files) >= num_workers
    ordered = sorted(files)
    reading(ordered[index::num_workers] if by_file else ordered)
    paths = tf.data.Dataset.from_tensor_slices([str(f) for f in ordered])
    if by_file:
        paths = paths.shard(num_workers, index)
    paths = paths.shuffle(len(files), seed=seed)
    records = paths.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(32, max(1, len(files) // num_workers)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return records if by_file else records.shard(num_workers, index)


def keyed(dataset: Any, seed: int, worker: int = 0) -> Any:
    """`dataset`'s elements as (key, element): key, the stateless random seed (int [2]) of
    element i of worker `worker`'s stream under `seed`. Augmentations drawn with stateless
    ops from it are a function of (seed, worker, i) alone, so parallel maps stay parallel and
    deterministic, and a dataset rebuilt with the same seed repeats them."""
    base = tf.constant([seed, worker], tf.int64)
    return dataset.enumerate().map(
        graph_only(lambda i, element: (tf.random.experimental.stateless_fold_in(base, i), element))
    )
