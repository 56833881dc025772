"""Keras 2, the one Keras API the TensorFlow code writes to, on every TensorFlow it supports.

The last Habana TensorFlow release (SynapseAI 1.14) ships TF 2.15, whose `tf.keras` is Keras 2;
from TF 2.16 `tf.keras` is Keras 3 and Keras 2 lives on as the `tf_keras` package of the same
release. Import `keras` (and `tf`) from here, never `tf.keras` or `keras` directly, so models,
layers, optimizers, mixed-precision policies and checkpoints behave the same on both.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import TYPE_CHECKING

# From TF 2.16 `import tensorflow` also imports Keras 3 (and through it pandas and matplotlib),
# ~1.5 CPU-s of every TensorFlow process, for a tf.keras this code never uses. Set before
# TensorFlow's first import, this makes tf.keras tf_keras, the Keras 2 used here, and Keras 3
# stays unloaded. Only where tf_keras is installed: TF 2.15 reads it too, and without tf_keras
# its tf.keras would then fail to load. A user's explicit setting is kept.
if importlib.util.find_spec("tf_keras") is not None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf

from accelpipe.core.errors import BackendUnavailableError

__all__ = ["keras", "tf", "tf_version"]


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def tf_version() -> tuple[int, int]:
    return _release(tf.__version__)


def _keras2() -> ModuleType:
    version = tf_version()
    if version < (2, 16):
        return tf.keras
    install = f"pip install --no-deps 'tf-keras=={version[0]}.{version[1]}.*'"
    try:
        import tf_keras
    except ImportError:
        raise BackendUnavailableError(
            f"TensorFlow {tf.__version__} needs Keras 2 from the tf-keras package of the same "
            f"release: {install}"
        ) from None
    # tf-keras requires the TensorFlow of its own release, but goes in with --no-deps (it
    # names the full `tensorflow` build): pip never checks it, so a mismatch is refused here.
    if _release(tf_keras.__version__) != version:
        raise BackendUnavailableError(
            f"tf-keras {tf_keras.__version__} is not the Keras 2 of TensorFlow {tf.__version__} "
            f"(each tf-keras release requires its own TensorFlow release): {install}"
        )
    return tf_keras


if TYPE_CHECKING:
    # Which module is Keras 2 is decided at run time, so mypy reads the tf_keras package as
    # `keras`: it has no type information, so `keras` is Any there and `keras.Model`,
    # `keras.layers.Layer` and the rest stand as annotations (no stubs to check them against).
    import tf_keras as keras
else:
    keras = _keras2()
