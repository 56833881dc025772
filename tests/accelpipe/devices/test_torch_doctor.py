"""devices/torch_doctor: what PyTorch tells the doctor, on this CPU build and with torch's
functions stood in for as a CUDA, ROCm or Habana build reports them (a fake
`habana_frameworks` package on sys.path, tests/helpers/fake_smi.write_habana)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from accelpipe.devices import doctor, torch_doctor
from accelpipe.devices.doctor import Needs
from tests.helpers.fake_smi import H100, fake_gpu_torch, write_habana

pytestmark = pytest.mark.torch
GIB = 2**30


@pytest.fixture
def habana(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a fake habana_frameworks (`habana(hccl=...)`), put it on sys.path; afterwards
    forget its modules and the torch.hpu it registered."""

    def install(**options: object) -> None:
        monkeypatch.syspath_prepend(str(write_habana(tmp_path, **options)))

    monkeypatch.setattr(torch, "hpu", None, raising=False)  # restored (removed) afterwards
    yield install
    for name in [m for m in sys.modules if m.split(".")[0] == "habana_frameworks"]:
        del sys.modules[name]


def test_cpu_build_on_the_cpu_backend() -> None:
    facts = torch_doctor.probe("cpu")
    assert facts.built_for_backend and facts.build.startswith(f"torch {torch.__version__}")
    check = doctor.check_framework("cpu", facts)
    assert check.status == doctor.OK


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CUDA build")
def test_this_cpu_build_is_not_a_cuda_build() -> None:
    facts = torch_doctor.probe("cuda")
    assert not facts.built_for_backend and facts.device_names is None
    assert "torch.version.cuda is None" in facts.build
    check = doctor.check_framework("cuda", facts)
    assert check.status == doctor.PROBLEM and "cuda-pytorch image" in check.fix


def test_a_cuda_build_that_sees_its_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu_torch(monkeypatch, count=2)
    facts = torch_doctor.probe("cuda")
    assert facts.built_for_backend and "built with CUDA 12.4" in facts.build
    assert facts.device_names == [H100, H100] and facts.bf16 is True
    assert "compute capability 0, 1: 9.0" in facts.bf16_basis
    assert facts.collective and facts.collective_name == "NCCL"
    assert "version 2.21.5" in facts.collective_basis
    assert facts.memory == {"0": (70 * 1024, 80 * 1024), "1": (70 * 1024, 80 * 1024)}
    needs = Needs(devices=2, world_size=2)
    for check in (
        doctor.check_framework("cuda", facts),
        doctor.check_bf16("cuda", needs, None, facts),
        doctor.check_collective("cuda", needs, facts),
    ):
        assert check.status == doctor.OK, check


def test_a_cuda_build_without_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu_torch(monkeypatch, available=False, count=0)
    facts = torch_doctor.probe("cuda")
    assert facts.device_names == [] and "is_available() is False" in facts.unavailable
    assert doctor.check_framework("cuda", facts).status == doctor.PROBLEM


def test_a_failing_driver_is_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu_torch(monkeypatch)

    def broken() -> bool:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    facts = torch_doctor.probe("cuda")
    assert "RuntimeError: CUDA driver initialization failed" in facts.unavailable


def test_a_volta_has_no_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch >= 2.3 counts emulated bf16 as supported by default: the doctor asks without."""
    fake_gpu_torch(monkeypatch, capability=(7, 0))
    facts = torch_doctor.probe("cuda")
    assert facts.bf16 is False and "0, 1: 7.0" in facts.bf16_basis
    check = doctor.check_bf16("cuda", Needs(), None, facts)
    assert check.status == doctor.PROBLEM and "fp16" in check.fix


def test_no_nccl_is_a_collective_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu_torch(monkeypatch, nccl=False)
    facts = torch_doctor.probe("cuda")
    assert facts.collective is False
    check = doctor.check_collective("cuda", Needs(devices=2, world_size=2), facts)
    assert check.status == doctor.PROBLEM and "NCCL" in check.fix


def test_a_rocm_build_is_hip_through_torch_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu_torch(monkeypatch, hip="6.4.43482")
    facts = torch_doctor.probe("rocm")
    assert facts.built_for_backend and "ROCm/HIP 6.4.43482" in facts.build
    assert facts.collective_name.startswith("RCCL")
    assert not torch_doctor.probe("cuda").built_for_backend  # a ROCm build is no CUDA build


def test_gaudi_without_habana_frameworks(habana) -> None:
    facts = torch_doctor.probe("gaudi")
    assert not facts.built_for_backend and "habana_frameworks" in facts.build
    assert "gaudi-pytorch image" in facts.build_fix


def test_gaudi_with_habana_frameworks(habana) -> None:
    habana()
    facts = torch_doctor.probe("gaudi")
    assert facts.built_for_backend and "habana_frameworks.torch 1.21.0" in facts.build
    assert facts.device_names == ["GAUDI2"] * 8 and facts.bf16 is True
    assert facts.collective is True and facts.collective_name == "HCCL"
    check = doctor.check_collective("gaudi", Needs(devices=8, world_size=8), facts)
    assert check.status == doctor.OK


def test_gaudi_without_hccl(habana) -> None:
    habana(hccl=False)
    facts = torch_doctor.probe("gaudi")
    assert facts.collective is False
    assert doctor.check_collective("gaudi", Needs(world_size=2), facts).status == doctor.PROBLEM


def test_gaudi_that_sees_no_module(habana, monkeypatch: pytest.MonkeyPatch) -> None:
    habana(devices=0)
    facts = torch_doctor.probe("gaudi")
    assert facts.device_names == [] and doctor.check_framework("gaudi", facts).status == "problem"
    assert isinstance(torch.hpu, types.SimpleNamespace)


def test_gaudi_whose_bridge_does_not_start(habana, tmp_path: Path) -> None:
    """Installed, but importing it fails (no driver): the reason, not a crash."""
    habana()
    core = tmp_path / "habana_frameworks/torch/core/__init__.py"
    core.write_text("raise RuntimeError('synStatus 26: device not found')\n")
    facts = torch_doctor.probe("gaudi")
    assert facts.built_for_backend and facts.device_names == []
    assert "RuntimeError: synStatus 26: device not found" in facts.unavailable
