"""devices/smi: what nvidia-smi, rocm-smi, amd-smi and hl-smi say, read from stand-in tools
on PATH (tests/helpers/fake_smi.py, fake_power.install_hl_smi) that print what the real ones
print for the doctor's queries."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelpipe.devices import smi
from tests.helpers.fake_power import install_hl_smi
from tests.helpers.fake_smi import (
    H100,
    amd_smi_memory,
    amd_smi_static,
    app_row,
    gpu_row,
    hl_smi_row,
    install_amd_smi,
    install_nvidia_smi,
    install_rocm_smi,
    path_without_vendor_tools,
    rocm_smi_output,
)

GIB = 2**30


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder first on PATH, and nothing else of the vendors' on it."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", path_without_vendor_tools(folder))
    return folder


def test_nvidia_smi_gives_driver_devices_memory_capability_and_processes(bin_dir: Path) -> None:
    install_nvidia_smi(
        bin_dir,
        [gpu_row(0), gpu_row(1, "NVIDIA A100-SXM4-40GB", total=40960, used=20480, cap="8.0")],
        [app_row(1, os.getpid(), used=20000), app_row(1, 999_999_999, name="train.py")],
    )
    vendor = smi.query("cuda")
    assert (vendor.tool, vendor.driver, vendor.processes_listed) == (
        "nvidia-smi",
        "550.54.15",
        True,
    )
    first, second = vendor.devices
    assert (first.id, first.name, first.total_mib, first.used_mib) == ("0", H100, 81559, 3)
    assert (first.free_mib, first.compute_capability, first.processes) == (81556, "9.0", ())
    assert (second.id, second.compute_capability, second.free_mib) == ("1", "8.0", 20480)
    mine, other = second.processes
    assert (mine.pid, mine.used_mib, mine.uid) == (os.getpid(), 20000, os.getuid())
    assert mine.user is not None
    assert (other.name, other.uid, other.user) == ("train.py", None, None)  # /proc shows no owner


def test_a_driver_before_compute_cap_is_asked_again_without_it(bin_dir: Path) -> None:
    install_nvidia_smi(bin_dir, [gpu_row(0)[: -len(", 9.0")]], no_compute_cap=True)
    vendor = smi.query("cuda")
    assert vendor.devices[0].compute_capability is None and vendor.devices[0].total_mib == 81559
    asked = (bin_dir / "nvidia-smi.args").read_text().splitlines()
    assert "compute_cap" in asked[0] and "compute_cap" not in asked[1]


def test_a_missing_tool_and_a_failing_one_are_told_apart(bin_dir: Path) -> None:
    with pytest.raises(smi.ToolMissing) as missing:
        smi.query("cuda")
    assert missing.value.tools == ("nvidia-smi",)
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    install_nvidia_smi(bin_dir, [gpu_row(0)], fail=message)
    with pytest.raises(smi.ToolFailed) as failed:
        smi.query("cuda")
    assert str(failed.value) == f"nvidia-smi failed with exit status 9: {message}"
    # asked once: a failing driver is no reason to ask again without compute_cap
    assert len((bin_dir / "nvidia-smi.args").read_text().splitlines()) == 1


def test_a_tool_that_lists_no_gpu_fails(bin_dir: Path) -> None:
    install_nvidia_smi(bin_dir, [])
    with pytest.raises(smi.ToolFailed, match="lists no GPU"):
        smi.query("cuda")


def test_rocm_smi_gives_driver_series_gfx_target_and_vram(bin_dir: Path) -> None:
    total, used = 192 * GIB, 3 * GIB
    install_rocm_smi(
        bin_dir, rocm_smi_output([("AMD Instinct MI300X OAM", "gfx942", total, used)] * 2)
    )
    vendor = smi.query("rocm")
    assert (vendor.tool, vendor.driver, vendor.processes_listed) == ("rocm-smi", "6.7.0", False)
    assert [d.id for d in vendor.devices] == ["0", "1"]
    device = vendor.devices[1]
    assert (device.name, device.arch) == ("AMD Instinct MI300X OAM", "gfx942")
    assert (device.total_mib, device.used_mib, device.free_mib) == (
        192 * 1024,
        3 * 1024,
        189 * 1024,
    )


def test_without_rocm_smi_amd_smi_answers(bin_dir: Path) -> None:
    install_amd_smi(
        bin_dir,
        amd_smi_static([("AMD Instinct MI250X", "gfx90a", "65536 MB")]),
        amd_smi_memory([("65536 MB", "1024 MB", "64512 MB")]),
    )
    vendor = smi.query("rocm")
    assert (vendor.tool, vendor.driver) == ("amd-smi", "6.7.0")
    (device,) = vendor.devices
    assert (device.id, device.name, device.arch) == ("0", "AMD Instinct MI250X", "gfx90a")
    assert device.free_mib == pytest.approx(64512e6 / 2**20)


def test_neither_rocm_tool_is_named_when_both_are_missing(bin_dir: Path) -> None:
    with pytest.raises(smi.ToolMissing) as missing:
        smi.query("rocm")
    assert missing.value.tools == ("rocm-smi", "amd-smi")


def test_hl_smi_gives_modules_by_module_id(bin_dir: Path) -> None:
    install_hl_smi(bin_dir, "".join(f"{hl_smi_row(m)}\n" for m in (3, 0)))
    vendor = smi.query("gaudi")
    assert (vendor.tool, vendor.driver) == ("hl-smi", "1.21.0-fw-53.1.1")
    assert [d.id for d in vendor.devices] == ["0", "3"]
    assert (vendor.devices[0].name, vendor.devices[0].free_mib) == ("HL-225", 98304 - 768)
    query = (bin_dir / "hl-smi.args").read_text()
    assert "module_id,name,driver_version,memory.total,memory.used,memory.free" in query


@pytest.mark.parametrize(
    ("text", "unit", "mib"),
    [
        ("81559", "mib", 81559),
        ("98304 MiB", "mib", 98304),
        ("2 GiB", "mib", 2048),
        ("1048576", "b", 1.0),
        ("[N/A]", "mib", None),
        ("", "mib", None),
    ],
)
def test_sizes_as_the_tools_print_them(text: str, unit: str, mib: float | None) -> None:
    assert smi.mib(text, unit) == mib
