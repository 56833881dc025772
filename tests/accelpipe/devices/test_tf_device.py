"""The TensorFlow side of the device layer: backends, precision policies, missing runtimes."""

from __future__ import annotations

import sys
import types

import pytest

from accelpipe.core.errors import BackendUnavailableError, ConfigError
from accelpipe.core.keras2 import keras, tf
from accelpipe.devices import device_family, tf_device

pytestmark = pytest.mark.tensorflow


def test_cpu_resolves_with_fp32_as_auto_and_bf16_on_request() -> None:
    device = tf_device.resolve("cpu")
    assert (device.backend, device.device, device.precision) == ("cpu", "/CPU:0", "fp32")
    assert device.policy == "float32" and not device.loss_scaling
    assert tf_device.resolve("cpu", "bf16").policy == "mixed_bfloat16"
    fp16 = tf_device.resolve("cpu", "fp16")
    assert fp16.policy == "mixed_float16" and fp16.loss_scaling
    assert tf_device.resolve("cpu", "auto", auto={"cpu": "bf16"}).precision == "bf16"


def test_policy_gives_bf16_compute_with_fp32_variables() -> None:
    try:
        tf_device.resolve("cpu", "bf16").apply_policy()
        layer = keras.layers.Dense(2)
        out = layer(tf.ones((1, 3)))
        assert out.dtype == tf.bfloat16 and layer.kernel.dtype == tf.float32
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ("cuda", "backend 'cuda' needs a TensorFlow build with CUDA"),
        ("rocm", "backend 'rocm' needs a TensorFlow build with ROCm"),
        ("gaudi", "backend 'gaudi' needs habana_frameworks.tensorflow"),
    ],
)
def test_a_missing_runtime_fails_at_once_with_one_line(backend: str, message: str) -> None:
    # tensorflow-cpu has neither CUDA nor ROCm, and no Habana module is installed here
    with pytest.raises(BackendUnavailableError, match=message) as err:
        tf_device.resolve(backend)
    assert "\n" not in str(err.value)


def test_unknown_backend_and_precision_name_the_key() -> None:
    with pytest.raises(ConfigError, match="config key 'backend'"):
        tf_device.resolve("tpu")
    with pytest.raises(ConfigError, match="config key 'precision'"):
        tf_device.resolve("cpu", "int8")


def test_peak_memory_is_none_on_cpu_and_get_memory_infos_peak_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GPU or HPU reports through get_memory_info (faked here); one that keeps no count
    (ValueError) has none."""
    assert tf_device.resolve("cpu").peak_memory() == (None, None)
    asked: list[str] = []

    def memory_info(device: str) -> dict[str, int]:
        asked.append(device)
        if "HPU" in device:
            raise ValueError(f"Allocator stats not available for device '{device}'")
        return {"current": 10, "peak": 4321}

    monkeypatch.setattr(tf.config.experimental, "get_memory_info", memory_info)
    gpu = tf_device.TFDevice("cuda", "/GPU:0", "fake", "bf16")
    assert gpu.peak_memory() == (4321, "tf.config.experimental.get_memory_info:peak")
    hpu = tf_device.TFDevice("gaudi", "/device:HPU:0", "fake", "bf16")
    assert hpu.peak_memory() == (None, None)
    assert asked == ["/GPU:0", "/device:HPU:0"]


class _FakeHabana:
    """Stand-ins for Habana's TF modules (SynapseAI 1.14 cannot be installed here), with the
    calls their Model-References make: load_habana_module(), habana_device.get_type(),
    distribute.HPUStrategy()."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, strategy: bool = True) -> None:
        self.calls: list[str] = []
        package = types.ModuleType("habana_frameworks")
        habana = types.ModuleType("habana_frameworks.tensorflow")
        habana.load_habana_module = lambda: self.calls.append("load")
        device = types.ModuleType("habana_frameworks.tensorflow.habana_device")
        device.get_type = lambda: "GAUDI2 (HL-225)"
        modules = {
            "habana_frameworks": package,
            "habana_frameworks.tensorflow": habana,
            "habana_frameworks.tensorflow.habana_device": device,
        }
        package.tensorflow = habana
        habana.habana_device = device
        if strategy:
            distribute = types.ModuleType("habana_frameworks.tensorflow.distribute")
            distribute.HPUStrategy = lambda: self.calls.append("HPUStrategy") or "hpu-strategy"
            habana.distribute = distribute
            modules["habana_frameworks.tensorflow.distribute"] = distribute
        for name, module in modules.items():
            monkeypatch.setitem(sys.modules, name, module)


def test_gaudi_is_named_by_its_generation_so_published_figures_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    habana = _FakeHabana(monkeypatch)
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind: ["HPU:0"])
    device = tf_device.resolve("gaudi")
    assert (device.device, device.name, device.precision) == ("/device:HPU:0", "GAUDI2", "bf16")
    assert habana.calls == ["load"]
    assert device_family("gaudi", device.name) == "Gaudi2"


def test_a_gaudi_without_visible_hpus_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _FakeHabana(monkeypatch)
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind: [])
    with pytest.raises(BackendUnavailableError, match="loaded but no HPU is visible"):
        tf_device.resolve("gaudi")


def test_multi_worker_runs_use_hpustrategy_on_gaudi_after_loading_the_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    habana = _FakeHabana(monkeypatch)
    assert tf_device.multi_worker_strategy("gaudi") == "hpu-strategy"
    assert habana.calls == ["load", "HPUStrategy"]


def test_multi_worker_runs_use_multiworkermirroredstrategy_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # not constructed for real: its collectives would stay set up in this test process
    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", lambda: "mwms")
    assert tf_device.multi_worker_strategy("cpu") == "mwms"
    assert tf_device.multi_worker_strategy("cuda") == "mwms"
    habana = _FakeHabana(monkeypatch, strategy=False)  # a Habana stack without HPUStrategy
    assert tf_device.multi_worker_strategy("gaudi") == "mwms"
    assert habana.calls == ["load"]


def test_multi_worker_gaudi_without_habanas_stack_fails_in_one_line() -> None:
    with pytest.raises(
        BackendUnavailableError, match=r"needs habana_frameworks\.tensorflow"
    ) as err:
        tf_device.multi_worker_strategy("gaudi")
    assert "\n" not in str(err.value)


def test_determinism_switches_both_ways() -> None:
    """train.deterministic: op determinism on (a random op without a seed then refuses to
    run) and off again, so a run in the same process never inherits an earlier one's."""
    from tensorflow.python.framework import config as tf_config

    try:
        tf_device.set_determinism(True)
        assert tf_config.is_op_determinism_enabled()
        tf.random.set_seed(None)
        with pytest.raises(RuntimeError, match="require a seed"):
            tf.random.uniform([2])
        tf_device.set_determinism(False)
        assert not tf_config.is_op_determinism_enabled()
        assert tf.random.uniform([2]).shape == (2,)
    finally:
        tf_device.set_determinism(False)


def test_a_tensorflow_outside_the_supported_range_is_refused_before_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tf, "__version__", "2.14.1")
    with pytest.raises(BackendUnavailableError, match=r"tensorflow 2\.14\.1 in .* outside"):
        tf_device.resolve("cpu")
