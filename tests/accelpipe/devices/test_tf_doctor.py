"""devices/tf_doctor: what TensorFlow tells the doctor, on this tensorflow-cpu and with
TensorFlow's functions stood in for as a CUDA or Habana build reports them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accelpipe.devices import doctor, tf_doctor
from accelpipe.devices.doctor import Needs
from tests.helpers.fake_smi import write_habana

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow
A100 = "NVIDIA A100-SXM4-80GB"


def fake_cuda_tf(
    monkeypatch: pytest.MonkeyPatch,
    *,
    gpus: int = 2,
    capability: tuple[int, int] = (8, 0),
    nccl: str | None = "libnccl.so.2",
) -> None:
    monkeypatch.setattr(tf.test, "is_built_with_cuda", lambda: True)
    monkeypatch.setattr(tf.sysconfig, "get_build_info", lambda: {"cuda_version": "12.3"})
    devices = [f"PhysicalDevice(name='/physical_device:GPU:{i}')" for i in range(gpus)]
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: devices)
    details = {"device_name": A100, "compute_capability": capability}
    monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda gpu: details)
    monkeypatch.setattr(tf_doctor, "loadable", lambda backend: nccl)


def test_cpu_build_on_the_cpu_backend() -> None:
    facts = tf_doctor.probe("cpu")
    assert facts.built_for_backend and facts.build.startswith(f"TensorFlow {tf.__version__}")
    assert doctor.check_framework("cpu", facts).status == doctor.OK


@pytest.mark.skipif(tf.test.is_built_with_cuda(), reason="a CUDA build")
@pytest.mark.parametrize(("backend", "image"), [("cuda", "cuda-tensorflow"), ("rocm", "rocm")])
def test_tensorflow_cpu_is_no_gpu_build(backend: str, image: str) -> None:
    facts = tf_doctor.probe(backend)
    assert not facts.built_for_backend and "is_built_with" in facts.build
    check = doctor.check_framework(backend, facts)
    assert check.status == doctor.PROBLEM and image in check.fix


def test_a_cuda_build_with_ampere_gpus_and_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda_tf(monkeypatch)
    facts = tf_doctor.probe("cuda")
    assert facts.built_for_backend and "built with CUDA 12.3" in facts.build
    assert facts.device_names == [A100, A100] and facts.bf16 is True
    assert facts.collective and "libnccl.so.2 loads" in facts.collective_basis
    needs = Needs(devices=2, world_size=2)
    for check in (
        doctor.check_framework("cuda", facts),
        doctor.check_bf16("cuda", needs, None, facts),
        doctor.check_collective("cuda", needs, facts),
    ):
        assert check.status == doctor.OK, check


def test_a_volta_and_no_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda_tf(monkeypatch, capability=(7, 0), nccl=None)
    facts = tf_doctor.probe("cuda")
    assert facts.bf16 is False and "0, 1: 7.0" in facts.bf16_basis
    assert facts.collective is False
    needs = Needs(devices=2, world_size=2)
    assert doctor.check_bf16("cuda", needs, None, facts).status == doctor.PROBLEM
    assert doctor.check_collective("cuda", needs, facts).status == doctor.PROBLEM


def test_a_cuda_build_that_sees_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda_tf(monkeypatch, gpus=0)
    facts = tf_doctor.probe("cuda")
    assert facts.device_names == [] and "is empty" in facts.unavailable
    assert doctor.check_framework("cuda", facts).status == doctor.PROBLEM


def test_nccl_is_found_in_the_nvidia_nccl_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorFlow's pip CUDA builds load NCCL from nvidia-nccl-cu12 (nvidia/nccl/lib)."""
    library = tmp_path / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    library.parent.mkdir(parents=True)
    library.touch()
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] == "nvidia"]:
        monkeypatch.delitem(sys.modules, name)
    loaded: list[str] = []

    def cdll(name: str) -> object:
        loaded.append(name)
        if name != str(library):
            raise OSError(f"{name}: cannot open shared object file")
        return object()

    monkeypatch.setattr(tf_doctor.ctypes, "CDLL", cdll)
    assert tf_doctor.loadable("cuda") == str(library)
    assert loaded[:2] == ["libnccl.so.2", "libnccl.so"]  # the system's first
    assert tf_doctor.loadable("rocm") is None


@pytest.fixture
def habana(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def install(**options: object) -> None:
        monkeypatch.syspath_prepend(str(write_habana(tmp_path, **options)))

    yield install
    for name in [m for m in sys.modules if m.split(".")[0] == "habana_frameworks"]:
        del sys.modules[name]


def test_gaudi_without_habana_frameworks(habana) -> None:
    facts = tf_doctor.probe("gaudi")
    assert not facts.built_for_backend and "gaudi-tensorflow image" in facts.build_fix


@pytest.mark.parametrize("hccl", [True, False])
def test_gaudi_with_habana_frameworks(habana, monkeypatch: pytest.MonkeyPatch, hccl: bool) -> None:
    habana(hccl=hccl)
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: ["HPU:0"])
    facts = tf_doctor.probe("gaudi")
    assert facts.built_for_backend and facts.device_names == ["GAUDI2"]
    assert facts.collective is hccl and facts.collective_name == "HCCL"
    assert sys.modules["habana_frameworks.tensorflow"].LOADED == [1]


def test_gaudi_whose_module_does_not_load(habana, tmp_path: Path) -> None:
    habana()
    init = tmp_path / "habana_frameworks/tensorflow/__init__.py"
    init.write_text("def load_habana_module():\n    raise RuntimeError('no device')\n")
    facts = tf_doctor.probe("gaudi")
    assert facts.built_for_backend and facts.device_names == []
    assert "load_habana_module() raised RuntimeError: no device" in facts.unavailable
