"""What tf.data makes of an input pipeline under op determinism (train.deterministic).

tf.data's `make_deterministic` rewrite (tensorflow/core/grappler/optimizers/data/
make_deterministic.cc) runs a parallel map or interleave serially when its function holds a
stateful op other than a dataset source, and turns off prefetching when any function holds
one outside its short list (legacy random ops, Assert, Print). `stateful_ops` lists what a
pipeline's functions hold, so a test can require the parallel ones to hold none.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from accelpipe.core.keras2 import tf

# Function calls and control flow: tf.data looks inside them, and so does stateful_ops.
_CALLS = {"StatefulPartitionedCall", "If", "While"}


def stateful_ops(dataset: tf.data.Dataset) -> dict[str, set[str]]:
    """{node of each dataset op of the pipeline that runs a function (its name starts with
    the op's type): the stateful ops in that function, nested functions included, dataset
    sources left out}."""
    from tensorflow.python.framework import op_def_registry

    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    library = {f.signature.name: f for f in graph.library.function}

    def inside(name: str, seen: set[str]) -> set[str]:
        if name in seen or name not in library:
            return set()
        seen.add(name)
        found: set[str] = set()
        for node in library[name].node_def:
            found |= inside(node.op, seen)  # a call of a library function
            op_def = op_def_registry.get(node.op)
            source = node.op.endswith(("Dataset", "DatasetV2"))
            if op_def is not None and op_def.is_stateful and node.op not in _CALLS and not source:
                found.add(node.op)
            for attr in node.attr.values():
                if attr.HasField("func"):
                    found |= inside(attr.func.name, seen)
                for func in attr.list.func:
                    found |= inside(func.name, seen)
        return found

    return {
        node.name: inside(node.attr["f"].func.name, set())
        for node in graph.node
        if "f" in node.attr and node.attr["f"].HasField("func")
    }


def parallel(node: str) -> bool:
    """Whether a stateful_ops key is a dataset op that runs its function in parallel."""
    return node.startswith(("ParallelMapDataset", "ParallelInterleaveDataset", "MapAndBatch"))


def count_records(paths: Iterable[Path]) -> int:
    """Records in TFRecord files (reads them through)."""
    return sum(1 for path in paths for _ in tf.data.TFRecordDataset(str(path)))
