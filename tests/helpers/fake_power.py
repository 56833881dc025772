"""Stand-ins for the power sources of accelpipe.devices.power: a clock that advances by a
fixed step per reading, `pynvml` and `amdsmi` modules to put in sys.modules, an `hl-smi`
script for PATH and a powercap RAPL tree."""

from __future__ import annotations

import stat
import threading
import types
from collections.abc import Sequence
from pathlib import Path


class FakeClock:
    """Returns start, start + step, start + 2 step, ... one value per call."""

    def __init__(self, start: float = 100.0, step: float = 2.0) -> None:
        self.now = start
        self.step = step
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            value = self.now
            self.now += self.step
            return value


class _Readings:
    """Per device, the values read one after another; the last one repeats. The first
    value is read twice: by open_meter's probe, then by start()."""

    def __init__(self, per_device: Sequence[Sequence[float]]) -> None:
        self.per_device = [list(values) for values in per_device]
        self.reads = [0] * len(self.per_device)

    def next(self, index: int) -> float:
        values = self.per_device[index]
        value = values[min(max(self.reads[index] - 1, 0), len(values) - 1)]
        self.reads[index] += 1
        return value


def fake_pynvml(
    *,
    energy_mj: Sequence[Sequence[float]] | None = None,
    power_mw: Sequence[Sequence[float]] | None = None,
    count: int | None = None,
    init_error: int | None = None,
    fail_after: int | None = None,
) -> types.ModuleType:
    """A `pynvml` whose devices read `energy_mj` (None: the counter is Not Supported, as
    before Volta) and `power_mw`; `fail_after` readings in all, it raises NVMLError
    (Unknown Error). `calls` records init, shutdown and handle look-ups."""
    nvml = types.ModuleType("pynvml")
    names = {1: "Uninitialized", 3: "Not Supported", 9: "Driver Not Loaded", 999: "Unknown Error"}

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return names.get(self.value, f"NVML Error with code {self.value}")

    devices = count if count is not None else len(energy_mj or power_mw or [])
    energy = _Readings(energy_mj) if energy_mj is not None else None
    power = _Readings(power_mw) if power_mw is not None else None
    state = {"init": 0, "shutdown": 0, "handles": [], "reads": 0}

    def read(readings: _Readings | None, handle: int) -> float:
        if readings is None:
            raise NVMLError(3)
        state["reads"] += 1
        if fail_after is not None and state["reads"] > fail_after:
            raise NVMLError(999)
        return readings.next(handle)

    def nvmlInit() -> None:
        if init_error is not None:
            raise NVMLError(init_error)
        state["init"] += 1

    def nvmlShutdown() -> None:
        state["shutdown"] += 1

    def nvmlDeviceGetCount() -> int:
        return devices

    def nvmlDeviceGetHandleByIndex(index: int) -> int:
        if not 0 <= index < devices:
            raise NVMLError(2)
        state["handles"].append(index)
        return index

    def nvmlDeviceGetHandleByUUID(uuid: str) -> int:
        index = int(uuid.rsplit("-", 1)[-1]) if uuid.startswith("GPU-") else -1
        return nvmlDeviceGetHandleByIndex(index)

    nvml.NVMLError = NVMLError
    nvml.nvmlInit = nvmlInit
    nvml.nvmlShutdown = nvmlShutdown
    nvml.nvmlDeviceGetCount = nvmlDeviceGetCount
    nvml.nvmlDeviceGetHandleByIndex = nvmlDeviceGetHandleByIndex
    nvml.nvmlDeviceGetHandleByUUID = nvmlDeviceGetHandleByUUID
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda handle: read(energy, handle)
    nvml.nvmlDeviceGetPowerUsage = lambda handle: read(power, handle)
    nvml.calls = state
    return nvml


def fake_amdsmi(
    *,
    energy_ticks: Sequence[Sequence[int]] | None = None,
    resolution_uj: float = 15.25,
    legacy_key: bool = False,
    power_info: Sequence[Sequence[dict]] | None = None,
) -> types.ModuleType:
    """An `amdsmi` whose GPUs count `energy_ticks` of `resolution_uj` (None: Not supported,
    as on a VM guest) or report `power_info` dicts; `legacy_key` names the count `power`,
    as before ROCm 6.4."""
    amdsmi = types.ModuleType("amdsmi")

    class AmdSmiException(Exception):
        pass

    devices = len(energy_ticks or power_info or [])
    energy = _Readings(energy_ticks) if energy_ticks is not None else None
    power = _Readings(power_info) if power_info is not None else None
    state = {"init": 0, "shutdown": 0}

    def amdsmi_init(flag: int = 2) -> None:
        state["init"] += 1

    def amdsmi_shut_down() -> None:
        state["shutdown"] += 1

    def amdsmi_get_energy_count(handle: int) -> dict:
        if energy is None:
            raise AmdSmiException("Error code:\n\t2 | AMDSMI_STATUS_NOT_SUPPORTED")
        ticks = energy.next(handle)
        key = "power" if legacy_key else "energy_accumulator"
        return {key: ticks, "counter_resolution": resolution_uj, "timestamp": 0}

    def amdsmi_get_power_info(handle: int) -> dict:
        if power is None:
            raise AmdSmiException("Error code:\n\t2 | AMDSMI_STATUS_NOT_SUPPORTED")
        return power.next(handle)

    amdsmi.AmdSmiException = AmdSmiException
    amdsmi.amdsmi_init = amdsmi_init
    amdsmi.amdsmi_shut_down = amdsmi_shut_down
    amdsmi.amdsmi_get_processor_handles = lambda: list(range(devices))
    amdsmi.amdsmi_get_energy_count = amdsmi_get_energy_count
    amdsmi.amdsmi_get_power_info = amdsmi_get_power_info
    amdsmi.calls = state
    return amdsmi


def install_hl_smi(bin_dir: Path, csv: str, *, exit_status: int = 0) -> Path:
    """An `hl-smi` in `bin_dir` printing the file hl-smi.csv (written here with `csv`; the
    test may rewrite it between readings) and appending its arguments to hl-smi.args."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "hl-smi.csv").write_text(csv)
    tool = bin_dir / "hl-smi"
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{bin_dir}/hl-smi.args"\n'
        f'cat "{bin_dir}/hl-smi.csv"\n'
        f"exit {exit_status}\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return tool


def write_rapl_zone(
    root: Path,
    zone: str,
    name: str,
    energy_uj: int,
    max_energy_range_uj: int = 262_143_328_850,
) -> Path:
    """One powercap zone `root/zone` (e.g. intel-rapl:0, named package-0)."""
    path = root / zone
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(f"{name}\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_energy_range_uj}\n")
    return path


def set_rapl_energy(root: Path, zone: str, energy_uj: int) -> None:
    """A new counter value, written whole (a meter's thread may be reading the file)."""
    path = root / zone / "energy_uj"
    tmp = path.with_name("energy_uj.tmp")
    tmp.write_text(f"{energy_uj}\n")
    tmp.replace(path)


def rapl_energy(root: Path, zone: str) -> int:
    return int((root / zone / "energy_uj").read_text())
