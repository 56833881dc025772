"""Keras 2 on every TensorFlow the engine supports (accelpipe.core.keras2): `tf.keras` up to
TF 2.15, the tf-keras package of the same release from TF 2.16. Runs under TF 2.15, 2.17 and
2.21 (make test-tf215, test-tf217): each case sets the release it is about itself."""

from __future__ import annotations

import os
import subprocess
import sys
from types import ModuleType

import pytest

from accelpipe.core import keras2
from accelpipe.core.errors import BackendUnavailableError
from accelpipe.core.keras2 import keras, tf

pytestmark = pytest.mark.tensorflow


def _fake_tf_keras(monkeypatch: pytest.MonkeyPatch, version: str | None) -> ModuleType | None:
    """Make `import tf_keras` give a module of `version`, or fail where it is None."""
    module = None
    if version is not None:
        module = ModuleType("tf_keras")
        module.__version__ = version  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tf_keras", module)
    return module


def test_the_engine_writes_to_keras_2_on_this_tensorflow() -> None:
    # Keras 2 behaviour (TF 2.15's tf.keras has no __version__): Keras 3 refuses `/` in a
    # layer name, and its layers are not tf.Modules
    layer = keras.layers.Dense(2, name="Transformer/encoderblock_0")
    model = keras.Sequential([keras.Input((3,)), layer])
    assert model(tf.ones((1, 3))).shape == (1, 2)
    assert isinstance(layer, tf.Module)


def test_tensorflow_before_2_16_uses_its_own_tf_keras(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tf, "__version__", "2.15.1")
    _fake_tf_keras(monkeypatch, None)
    assert keras2._keras2() is tf.keras


@pytest.mark.parametrize("tf_release", ["2.17.0", "2.21.0"])
def test_tensorflow_2_16_on_uses_the_tf_keras_of_its_release(
    monkeypatch: pytest.MonkeyPatch, tf_release: str
) -> None:
    monkeypatch.setattr(tf, "__version__", tf_release)
    fake = _fake_tf_keras(monkeypatch, tf_release.rsplit(".", 1)[0] + ".3")
    assert keras2._keras2() is fake


def test_tf_keras_of_another_release_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tf, "__version__", "2.17.0")
    _fake_tf_keras(monkeypatch, "2.21.0")
    with pytest.raises(BackendUnavailableError) as caught:
        keras2._keras2()
    message = str(caught.value)
    assert "\n" not in message
    assert "tf-keras 2.21.0" in message and "TensorFlow 2.17.0" in message
    assert "pip install --no-deps 'tf-keras==2.17.*'" in message


def test_missing_tf_keras_names_the_release_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tf, "__version__", "2.17.0")
    _fake_tf_keras(monkeypatch, None)
    with pytest.raises(BackendUnavailableError, match=r"'tf-keras==2\.17\.\*'"):
        keras2._keras2()


def test_a_tensorflow_process_through_keras2_never_loads_keras_3() -> None:
    """From TF 2.16 `import tensorflow` imports Keras 3 unless TF_USE_LEGACY_KERAS is set
    first; keras2 sets it, so a stage process pays for one Keras (before: Keras 3 with pandas
    and matplotlib, ~1.5 CPU-s more per process), and its tf.keras is the Keras 2 in use."""
    check = (
        "import importlib.util, os, sys\n"
        "from accelpipe.core.keras2 import keras, tf, tf_version\n"
        "if tf_version() >= (2, 16):\n"
        "    assert os.environ['TF_USE_LEGACY_KERAS'] == '1'\n"
        "    assert 'keras.src' not in sys.modules, 'Keras 3 was imported'\n"
        "    assert tf.keras.layers.Dense is keras.layers.Dense\n"
        "elif importlib.util.find_spec('tf_keras') is None:  # TF 2.15 alone: left unset\n"
        "    assert 'TF_USE_LEGACY_KERAS' not in os.environ\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    subprocess.run([sys.executable, "-c", check], env=env, check=True)
