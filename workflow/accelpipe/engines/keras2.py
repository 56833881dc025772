"""Keras 2, the one Keras API the TensorFlow code writes to, on every TensorFlow it supports.

The last Habana TensorFlow release (SynapseAI 1.14) ships TF 2.15, whose `tf.keras` is Keras 2;
from TF 2.16 `tf.keras` is Keras 3 and Keras 2 lives on as the `tf_keras` package of the same
release. Import `keras` (and `tf`) from here, never `tf.keras` or `keras` directly, so models,
layers, optimizers, mixed-precision policies and checkpoints behave the same on both.
"""

from __future__ import annotations

from types import ModuleType

import tensorflow as tf

from accelpipe.errors import BackendUnavailableError

__all__ = ["keras", "tf", "tf_version"]


def tf_version() -> tuple[int, int]:
    major, minor = tf.__version__.split(".")[:2]
    return int(major), int(minor)


def _keras2() -> ModuleType:
    version = tf_version()
    if version < (2, 16):
        return tf.keras
    try:
        import tf_keras
    except ImportError:
        raise BackendUnavailableError(
            f"TensorFlow {tf.__version__} needs Keras 2 from the tf-keras package of the same "
            f"release: pip install --no-deps 'tf-keras=={version[0]}.{version[1]}.*'"
        ) from None
    return tf_keras


keras = _keras2()
