"""The device layer for TensorFlow: cpu | cuda | rocm | gaudi.

Resolves a backend into the TF device string the engine places work on, the Keras
mixed-precision policy (`mixed_bfloat16` / `mixed_float16` / `float32`) and, on Gaudi, loads
Habana's TensorFlow module (SynapseAI <= 1.14); `multi_worker_strategy` is the data-parallel
strategy of a multi-worker run on that backend. Which physical devices a process sees is
set before TensorFlow starts, by the lease (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES,
HABANA_VISIBLE_MODULES); here each process takes its visible device `index`. A backend
whose runtime is missing fails at once with BackendUnavailableError.
"""

from __future__ import annotations

import contextlib
import logging
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from accelpipe.core.errors import BackendUnavailableError
from accelpipe.core.keras2 import keras, tf
from accelpipe.devices import resolve_precision, usable_threads
from accelpipe.devices.frameworks import check_supported

log = logging.getLogger(__name__)
_POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16", "fp32": "float32"}


@dataclass(frozen=True)
class TFDevice:
    """A resolved backend: what the TensorFlow engine needs to know about the hardware."""

    backend: str
    device: str  # e.g. "/CPU:0", "/GPU:0", "/device:HPU:0"
    name: str
    precision: str

    @property
    def policy(self) -> str:
        return _POLICIES[self.precision]

    def apply_policy(self) -> None:
        """Set Keras's global mixed-precision policy; build models after this."""
        keras.mixed_precision.set_global_policy(self.policy)

    @property
    def loss_scaling(self) -> bool:
        """fp16 gradients underflow without loss scaling; bf16 and fp32 need none."""
        return self.precision == "fp16"

    def peak_memory(self) -> tuple[int | None, str | None]:
        """The most memory TensorFlow held on the device since it started (bytes) and the call
        that reported it: `get_memory_info`'s peak on a GPU or HPU; (None, None) on the cpu
        and where the device keeps no such count (it raises ValueError then).

        Only the cpu path ran here (no GPU or HPU); the others follow TensorFlow's
        documentation and are tested against a fake.
        """
        if self.backend == "cpu":
            return None, None
        try:
            info = tf.config.experimental.get_memory_info(self.device)
        except ValueError:
            return None, None
        return int(info["peak"]), "tf.config.experimental.get_memory_info:peak"


def resolve(
    backend: str, precision: str = "auto", index: int = 0, auto: dict[str, str] | None = None
) -> TFDevice:
    """Check the backend's runtime is present and return its TFDevice."""
    check_supported("tensorflow", tf.__version__)
    precision = resolve_precision(backend, precision, auto)
    return {"cpu": _cpu, "cuda": _cuda, "rocm": _rocm, "gaudi": _gaudi}[backend](precision, index)


def _cpu(precision: str, index: int) -> TFDevice:
    name = f"cpu ({platform.machine()}, TensorFlow {tf.__version__})"
    return TFDevice("cpu", "/CPU:0", name, precision)


def _gpu(backend: str, built: bool, stack: str, precision: str, index: int) -> TFDevice:
    if not built:
        raise BackendUnavailableError(
            f"backend '{backend}' needs a TensorFlow build with {stack}; this one is "
            f"TensorFlow {tf.__version__} without it"
        )
    gpus = tf.config.list_physical_devices("GPU")
    if index >= len(gpus):
        raise BackendUnavailableError(
            f"backend '{backend}': process {index} needs GPU {index} but TensorFlow sees "
            f"{len(gpus)} (check the driver, the visibility variables and accelerators.pool)"
        )
    details = tf.config.experimental.get_device_details(gpus[index])
    name = details.get("device_name", f"{stack} GPU {index}")
    return TFDevice(backend, f"/GPU:{index}", name, precision)


def _cuda(precision: str, index: int) -> TFDevice:
    return _gpu("cuda", tf.test.is_built_with_cuda(), "CUDA", precision, index)


def _rocm(precision: str, index: int) -> TFDevice:
    return _gpu("rocm", tf.test.is_built_with_rocm(), "ROCm", precision, index)


def _load_habana() -> None:
    """Load habana_frameworks.tensorflow's module (it registers the HPU device);
    BackendUnavailableError in one line where Habana's TensorFlow stack is absent."""
    try:
        from habana_frameworks.tensorflow import load_habana_module
    except ImportError as err:
        raise BackendUnavailableError(
            "backend 'gaudi' needs habana_frameworks.tensorflow (Habana's TensorFlow stack, "
            f"last released with SynapseAI 1.14 for TF 2.15): {err}"
        ) from None
    load_habana_module()


def _gaudi_name() -> str:
    """The card's type as Habana's TF bridge reports it ("GAUDI", "GAUDI2", ...; torch's
    HPU name says the same), which performance.json matches published figures by."""
    try:
        from habana_frameworks.tensorflow import habana_device

        return str(habana_device.get_type()).split()[0]
    except (ImportError, AttributeError, IndexError):
        return "Gaudi HPU (TensorFlow)"  # no generation: no published figure matches


def _gaudi(precision: str, index: int) -> TFDevice:
    # Each process sees the one module its lease made visible, so `index` is not needed.
    _load_habana()
    if not tf.config.list_logical_devices("HPU"):
        raise BackendUnavailableError(
            "backend 'gaudi': habana_frameworks.tensorflow loaded but no HPU is visible"
        )
    return TFDevice("gaudi", "/device:HPU:0", _gaudi_name(), precision)


def multi_worker_strategy(backend: str) -> Any:
    """The strategy of a multi-worker run (TF_CONFIG names the cluster; create it before
    TensorFlow runs an op): Habana's HPUStrategy on gaudi where its stack has it (HCCL
    collectives between the cards), else MultiWorkerMirroredStrategy (gRPC collectives on
    CPU, NCCL on GPUs)."""
    if backend == "gaudi":
        _load_habana()  # HPUStrategy needs the HPU registered
        try:
            from habana_frameworks.tensorflow.distribute import HPUStrategy
        except ImportError:
            log.warning(
                "gaudi: no habana_frameworks.tensorflow.distribute.HPUStrategy here; "
                "using MultiWorkerMirroredStrategy"
            )
        else:
            return HPUStrategy()
    return tf.distribute.MultiWorkerMirroredStrategy()


def determinism_enabled() -> bool:
    """Whether TensorFlow's op determinism is on in this process."""
    from tensorflow.python.framework import config as tf_config

    return bool(tf_config.is_op_determinism_enabled())


@contextlib.contextmanager
def determinism(enabled: bool) -> Iterator[None]:
    """`set_determinism(enabled)` for the block, then back to what it was (a run leaves the
    process as it found it: tests train several in one process)."""
    before = determinism_enabled()
    set_determinism(enabled)
    try:
        yield
    finally:
        set_determinism(before)


def set_determinism(enabled: bool) -> None:
    """TensorFlow's op determinism on or off for this process (`train.deterministic`).

    On: every op runs a deterministic kernel or raises UnimplementedError (the GPU kernels
    that add with atomics, cuDNN's nondeterministic algorithms, ...), a TensorFlow random op
    without a seed raises RuntimeError, and tf.data keeps its elements in order and runs a
    map with stateful ops serially. The switch is process-wide: set it both ways, so a run
    never inherits an earlier one's (TensorFlow's public API can only switch it on; the
    off switch is its own `disable_op_determinism`, where this TensorFlow has it).
    """
    if enabled:
        tf.config.experimental.enable_op_determinism()
        return
    from tensorflow.python.framework import config as tf_config

    disable = getattr(tf_config, "disable_op_determinism", None)
    if disable is not None:
        disable()


def limit_threads(threads: int) -> None:
    """TensorFlow's intra-op pool: the rule's `threads`, at most the CPUs we may run on.

    Must run before TensorFlow executes its first op (the pools are fixed after that).
    """
    n = usable_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(min(2, n))
