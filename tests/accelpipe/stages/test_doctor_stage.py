"""`accelpipe doctor` (accelpipe.stages.doctor) through the CLI: one line per check, the JSON
report, exit status 2 naming each problem; on cuda with stand-ins for nvidia-smi (on PATH)
and for a CUDA build of torch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from accelpipe.cli import main
from accelpipe.config.runtime import RUNTIME_ENV
from accelpipe.devices import doctor
from tests.helpers.fake_smi import (
    app_row,
    fake_gpu_torch,
    gpu_row,
    install_nvidia_smi,
    path_without_vendor_tools,
)

pytestmark = pytest.mark.torch


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH with only the stand-in tools of the test; outside any container (this machine
    may be one) and without the workflow's runtime or visibility variables."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", path_without_vendor_tools(folder))
    monkeypatch.setattr(doctor, "container", lambda environ=None, root=None: ("", ""))
    for name in (RUNTIME_ENV, "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return folder


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


def test_on_the_cpu_everything_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(RUNTIME_ENV, raising=False)
    assert main(["doctor", "--json", str(tmp_path / "doctor.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("accelpipe doctor: cpu / pytorch on ")
    assert [line.split()[1] for line in out[1:-1]] == list(doctor.CHECKS)
    assert out[-1].startswith("no problem")
    report = _report(tmp_path / "doctor.json")
    assert (report["backend"], report["framework"], report["problems"]) == ("cpu", "pytorch", [])
    assert report["checks"][1]["status"] == "ok" and report["system"]["driver"] is None


def test_cuda_with_a_driver_and_a_cuda_torch_passes(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_nvidia_smi(bin_dir, [gpu_row(0), gpu_row(1)])
    fake_gpu_torch(monkeypatch, count=2)
    out = tmp_path / "doctor.json"
    argv = ["doctor", "--backend", "cuda", "--devices", "2", "--world-size", "4"]
    assert main([*argv, "--json", str(out)]) == 0
    report = _report(out)
    assert report["problems"] == [] and report["asked"]["world_size"] == 4
    assert {c["name"]: c["status"] for c in report["checks"]}["collective"] == "ok"
    assert report["system"]["device_count"] == 2
    assert report["system"]["framework_build"] == f"torch {torch.__version__}, built with CUDA 12.4"


def test_a_missing_driver_and_a_cpu_torch_fail_naming_both(
    bin_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    # A CPU build whatever this venv holds (PyPI's torch 2.6 is its CUDA build).
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    out = tmp_path / "doctor.json"
    assert main(["doctor", "--backend", "cuda", "--json", str(out)]) == 2
    captured = capsys.readouterr()
    assert "problem  driver      nvidia-smi not found on PATH | fix: install" in captured.out
    error = captured.err.strip().splitlines()[-1]
    assert "accelpipe doctor: 2 problems: driver, framework" in error
    assert "driver: nvidia-smi not found on PATH" in error
    assert "framework: torch" in error and "CPU build" in error
    assert _report(out)["problems"] == ["driver", "framework"]  # written, problems and all


def test_a_busy_device_and_too_few_devices_fail(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    install_nvidia_smi(bin_dir, [gpu_row(0), gpu_row(1)], [app_row(1, 999_999_999)])
    fake_gpu_torch(monkeypatch, count=2)
    assert main(["doctor", "--backend", "cuda", "--devices", "4"]) == 2
    error = capsys.readouterr().err
    assert "2 problems: devices, busy" in error
    assert "1 of 2 devices are in use" in error


def test_the_workflows_runtime_gives_backend_and_pool_and_nothing_is_hidden(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run by the preflight rule (--framework, $ACCELPIPE_RUNTIME): the backend and
    accelerators.pool come from the runtime; no lease, no visibility variable (a device in use
    by someone else must be seen, not hidden)."""
    install_nvidia_smi(bin_dir, [gpu_row(0), gpu_row(1), gpu_row(2)], [app_row(0, 999_999_999)])
    fake_gpu_torch(monkeypatch, count=3)
    runtime = {"runtime": "local", "backend": "cuda", "pool": ["1", "2"]}
    monkeypatch.setenv(RUNTIME_ENV, json.dumps({"pytorch": runtime}))
    monkeypatch.setenv("ACCELPIPE_LOCK_DIR", str(tmp_path / "locks"))
    out = tmp_path / "doctor.json"
    assert main(["--framework", "pytorch", "--accel", "2", "doctor", "--json", str(out)]) == 0
    report = _report(out)
    assert report["backend"] == "cuda" and report["asked"]["pool"] == ["1", "2"]
    assert report["system"]["device_count"] == 2  # GPU 0, busy, is outside the pool
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert not (tmp_path / "locks").exists()  # nothing leased


def test_a_torch_outside_the_supported_range_is_a_framework_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(RUNTIME_ENV, raising=False)
    monkeypatch.setattr(torch, "__version__", "2.5.1+cu121")
    assert main(["doctor", "--json", str(tmp_path / "doctor.json")]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "1 problem: framework" in error and "torch 2.5.1+cu121 in " in error
    assert _report(tmp_path / "doctor.json")["problems"] == ["framework"]
