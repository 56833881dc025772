"""`accelpipe doctor`'s questions to TensorFlow: the build, the devices it reaches, bf16 and the
collective backend, for one backend (`probe`). The judging is accelpipe.devices.doctor's.

- cuda / rocm: tf.test.is_built_with_cuda / is_built_with_rocm, the GPUs of
  tf.config.list_physical_devices("GPU") with tf.config.experimental.get_device_details (name,
  compute capability: bf16 needs 8.0+; TensorFlow states none on ROCm, where the vendor tool's
  gfx target decides), and NCCL (RCCL) for MultiWorkerMirroredStrategy: the library must load
  (TensorFlow's pip builds take it from the nvidia-nccl package, vendor images ship it).
- gaudi: habana_frameworks.tensorflow's load_habana_module, the HPUs it registers, the card
  type from habana_device, HCCL through habana_frameworks.tensorflow.distribute.HPUStrategy.

TensorFlow is imported plainly (not through keras2): the doctor asks about the build,
not Keras. Only the cpu path runs here; the others are tested with TensorFlow's functions and
a `habana_frameworks` package stood in for.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
from pathlib import Path

import tensorflow as tf

from accelpipe.devices.doctor import FrameworkFacts, per_device
from accelpipe.devices.frameworks import unsupported

_FIX_BUILD = {
    "cuda": "run in the cuda-tensorflow image, or pip install 'tensorflow[and-cuda]' (a "
    "TensorFlow with CUDA, not tensorflow-cpu)",
    "rocm": "run in the rocm-tensorflow image (tensorflow-rocm)",
    "gaudi": "run in the gaudi-tensorflow image (Habana's TensorFlow, last released with "
    "SynapseAI 1.14 for TF 2.15)",
}
# The collective library each GPU build dlopens, and the pip package that may hold it.
_LIBRARIES = {
    "cuda": (("libnccl.so.2", "libnccl.so"), "nvidia.nccl"),
    "rocm": (("librccl.so.1", "librccl.so"), None),
}


def probe(backend: str) -> FrameworkFacts:
    """What TensorFlow says about `backend` (cpu, cuda, rocm or gaudi)."""
    facts = _probe(backend)
    facts.unsupported = unsupported("tensorflow", tf.__version__)
    return facts


def _probe(backend: str) -> FrameworkFacts:
    if backend in ("cuda", "rocm"):
        return _gpu(backend)
    if backend == "gaudi":
        return _gaudi()
    return FrameworkFacts(
        "tensorflow",
        f"TensorFlow {tf.__version__} ({_built_with()})",
        True,
        device_api="tf.config",
    )


def _built_with() -> str:
    if tf.test.is_built_with_cuda():
        return "built with CUDA"
    if tf.test.is_built_with_rocm():
        return "built with ROCm"
    return "a CPU build"


def _gpu(backend: str) -> FrameworkFacts:
    cuda = backend == "cuda"
    built = tf.test.is_built_with_cuda() if cuda else tf.test.is_built_with_rocm()
    stack = "CUDA" if cuda else "ROCm"
    api = 'tf.config.list_physical_devices("GPU")'
    if not built:
        return FrameworkFacts(
            "tensorflow",
            f"TensorFlow {tf.__version__} is {_built_with()}, not one with {stack} "
            f"(tf.test.is_built_with_{stack.lower()}() is False)",
            False,
            _FIX_BUILD[backend],
            device_api=api,
        )
    info = tf.sysconfig.get_build_info()
    version = info.get("cuda_version") if cuda else info.get("rocm_version")
    facts = FrameworkFacts(
        "tensorflow",
        f"TensorFlow {tf.__version__}, built with {stack}" + (f" {version}" if version else ""),
        True,
        device_api=api,
    )
    try:
        gpus = tf.config.list_physical_devices("GPU")
    except Exception as err:  # a driver that fails to initialise
        gpus, facts.unavailable = [], f"{api} raised {type(err).__name__}: {err}"
    details = [_details(gpu) for gpu in gpus]
    facts.device_names = [d.get("device_name") or f"GPU {i}" for i, d in enumerate(details)]
    if not gpus and facts.unavailable is None:
        facts.unavailable = f"{api} is empty"
    if cuda and gpus:
        caps = {i: d.get("compute_capability") for i, d in enumerate(details)}
        known = {i: tuple(c) for i, c in caps.items() if c}
        if known:
            old = [i for i, cap in known.items() if cap < (8, 0)]
            where = per_device({str(i): f"{c[0]}.{c[1]}" for i, c in known.items()})
            facts.bf16 = not old
            facts.bf16_basis = f"compute capability {where} (get_device_details; bf16 needs 8.0+)"
        else:
            facts.bf16_basis = "get_device_details gave no compute capability"
    elif not cuda:
        facts.bf16_basis = "TensorFlow states no bf16 support on ROCm"
    facts.collective_name = "NCCL" if cuda else "RCCL"
    found = loadable(backend)
    facts.collective = found is not None
    facts.collective_basis = (
        f"MultiWorkerMirroredStrategy's CommunicationImplementation.NCCL; {found} loads"
        if found
        else f"no {' / '.join(_LIBRARIES[backend][0])} loads"
    )
    facts.collective_fix = (
        "install NCCL (pip install nvidia-nccl-cu12, part of tensorflow[and-cuda]) or run in "
        "the cuda-tensorflow image"
        if cuda
        else "run in the rocm-tensorflow image (it ships RCCL)"
    ) + "; or train on one device (train.devices: 1, nodes: 1)"
    return facts


def _details(gpu: object) -> dict:
    try:
        return dict(tf.config.experimental.get_device_details(gpu))
    except Exception:
        return {}


def loadable(backend: str) -> str | None:
    """The collective library of the GPU backend that loads (its path or name), else None."""
    names, package = _LIBRARIES[backend]
    candidates: list[str] = list(names)
    if package is not None and importlib.util.find_spec(package.split(".")[0]) is not None:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for folder in (spec.submodule_search_locations or []) if spec else []:
            candidates += [str(Path(folder) / "lib" / name) for name in names]
    for candidate in candidates:
        try:
            ctypes.CDLL(candidate)
        except OSError:
            continue
        return candidate
    return None


def _gaudi() -> FrameworkFacts:
    loading = None
    try:
        habana = importlib.import_module("habana_frameworks.tensorflow")
    except ImportError as err:
        return FrameworkFacts(
            "tensorflow",
            f"TensorFlow {tf.__version__} without habana_frameworks.tensorflow ({err})",
            False,
            _FIX_BUILD["gaudi"],
            device_api='tf.config.list_logical_devices("HPU")',
        )
    facts = FrameworkFacts(
        "tensorflow",
        f"TensorFlow {tf.__version__} with habana_frameworks.tensorflow",
        True,
        device_api='tf.config.list_logical_devices("HPU")',
        bf16=True,
        bf16_basis="every Gaudi generation computes in bf16",
        collective_name="HCCL",
    )
    try:
        habana.load_habana_module()
    except Exception as err:  # installed, but the driver or the module does not load
        loading = f"load_habana_module() raised {type(err).__name__}: {err}"
    hpus = [] if loading else tf.config.list_logical_devices("HPU")
    facts.device_names = [_gaudi_type()] * len(hpus)
    if not hpus:
        facts.unavailable = loading or 'tf.config.list_logical_devices("HPU") is empty'
    try:
        importlib.import_module("habana_frameworks.tensorflow.distribute").HPUStrategy  # noqa: B018
        facts.collective, facts.collective_basis = True, "habana_frameworks.tensorflow HPUStrategy"
    except (ImportError, AttributeError) as err:
        facts.collective = False
        facts.collective_basis = (
            f"no HPUStrategy ({err}): a multi-worker run falls back to gRPC collectives on the host"
        )
    facts.collective_fix = f"{_FIX_BUILD['gaudi']}; it ships HPUStrategy (HCCL)"
    return facts


def _gaudi_type() -> str:
    """The card type ("GAUDI2", ...) as Habana's TF bridge reports it, as tf_device names it."""
    try:
        device = importlib.import_module("habana_frameworks.tensorflow.habana_device")
        return str(device.get_type()).split()[0]
    except (ImportError, AttributeError, IndexError):
        return "Gaudi HPU"
