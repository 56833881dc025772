"""Reading TensorBoard event files back, as the TensorBoard server's Python loader does."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

# TensorBoard's loader reads files through its `tf` compat module, which imports TensorFlow
# where it is installed (seconds per test process); `tensorboard.compat.notf` is TensorBoard's
# switch to its TensorFlow-free stub, which reads event files the same way.
sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Tag -> (step, value) of every scalar in `logdir`'s event files, in step order, after
    TensorBoard's own handling of restarts (points of a killed attempt dropped)."""
    events = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    events.Reload()
    return {
        tag: [
            (e.step, tensor_util.make_ndarray(e.tensor_proto).item()) for e in events.Tensors(tag)
        ]
        for tag in events.Tags()["tensors"]
    }


def log_scalars(rows: list[dict[str, str]], columns: tuple[str, ...]) -> dict[str, list]:
    """What the engines write for train_log.csv rows: train/<column> at each row's step, as
    float32 (TensorBoard's scalar type)."""
    return {
        f"train/{c}": [(int(r["step"]), float(np.float32(r[c]))) for r in rows] for c in columns
    }
