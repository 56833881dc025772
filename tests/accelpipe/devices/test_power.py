"""devices/power: energy over a window from NVML, amdsmi, hl-smi and RAPL, each stood in for
on the CPU (tests/helpers/fake_power.py). A FakeClock advances 2 s per reading and a long
interval keeps the thread from reading unless a test wants it to, so every energy is exact."""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

import pytest

from accelpipe.devices import power
from accelpipe.devices.power import (
    COUNTER,
    SAMPLED,
    Energy,
    NoPower,
    PowerMeter,
    combine,
    joules_per_1000_samples,
    open_meter,
)
from tests.helpers.fake_power import (
    FakeClock,
    fake_amdsmi,
    fake_pynvml,
    install_hl_smi,
    set_rapl_energy,
    write_rapl_zone,
)

HOUR = 3600.0  # an interval the thread never reaches: only start, sample() and stop() read


@pytest.fixture(autouse=True)
def _no_visibility_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "HABANA_VISIBLE_MODULES"):
        monkeypatch.delenv(name, raising=False)


def _meter(backend: str, devices: list[str], **kwargs) -> PowerMeter:
    meter = open_meter(backend, devices, interval_s=HOUR, clock=FakeClock(), **kwargs)
    assert isinstance(meter, PowerMeter), getattr(meter, "reason", None)
    return meter


# --- cuda: NVML --------------------------------------------------------------------------


def test_nvml_energy_counter_gives_the_joules_between_start_and_stop(monkeypatch) -> None:
    nvml = fake_pynvml(energy_mj=[[1000, 6000, 11000], [0, 2000, 4000]], power_mw=[[1], [1]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with _meter("cuda", ["0", "1"]) as meter:
        meter.start()
        meter.sample()
        energy = meter.stop()
    assert energy == Energy(
        joules=14.0,
        seconds=4.0,
        mean_watts=3.5,
        source="nvml total energy counter",
        method=COUNTER,
        samples=3,
        interval_s=HOUR,
        per_device={"0": 10.0, "1": 4.0},
    )
    assert nvml.calls["init"] == 1 and nvml.calls["shutdown"] == 1


def test_nvml_reads_only_the_devices_of_the_run(monkeypatch) -> None:
    nvml = fake_pynvml(energy_mj=[[0, 1], [0, 5000], [0, 1]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = _meter("cuda", [1])  # YAML-style int ids are accepted too
    meter.start()
    energy = meter.stop()
    assert energy.per_device == {"1": 5.0} and energy.joules == 5.0
    assert nvml.calls["handles"] == [1]


def test_nvml_without_energy_counter_integrates_sampled_power(monkeypatch) -> None:
    # Pre-Volta: no total-energy counter, so board power (mW) every interval, trapezoids.
    nvml = fake_pynvml(power_mw=[[100_000, 200_000, 400_000]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = _meter("cuda", ["0"])
    meter.start()
    meter.sample()
    energy = meter.stop()
    # (100 + 200) / 2 * 2 s + (200 + 400) / 2 * 2 s
    assert energy.joules == 900.0 and energy.seconds == 4.0 and energy.mean_watts == 225.0
    assert energy.source == "nvml power usage" and energy.method == SAMPLED
    assert energy.samples == 3


def test_the_thread_samples_every_interval(monkeypatch) -> None:
    nvml = fake_pynvml(power_mw=[[250_000]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = open_meter("cuda", ["0"], interval_s=0.001, clock=FakeClock())
    meter.start()
    while nvml.calls["reads"] < 5:  # open_meter's probe, start's reading, 3 of the thread's
        time.sleep(0.001)
    energy = meter.stop()
    assert energy.samples >= 5  # start's, the thread's, and the one at stop()
    assert energy.seconds == 2.0 * (energy.samples - 1)
    assert energy.joules == 250.0 * energy.seconds and energy.mean_watts == 250.0
    assert not meter.sampling


def test_an_nvml_error_while_sampling_stops_the_thread_and_becomes_the_reason(
    monkeypatch, caplog
) -> None:
    nvml = fake_pynvml(power_mw=[[100_000]], fail_after=2)  # open and start read; then fails
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = open_meter("cuda", ["0"], interval_s=0.001, clock=FakeClock())
    with caplog.at_level(logging.WARNING, logger=power.__name__):
        meter.start()
        meter._thread.join()  # it ends by itself at the first error
        assert nvml.calls["reads"] == 3  # no reading after the failing one
        energy = meter.stop()
    assert energy.joules is None and energy.seconds is None
    assert energy.reason == "nvml power usage failed after 1 readings: Unknown Error"
    assert nvml.calls["reads"] == 3  # stop() reads no more either
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Unknown Error" in warnings[0].getMessage()


def test_an_error_at_the_first_reading_is_a_reason_not_an_exception(monkeypatch, caplog) -> None:
    nvml = fake_pynvml(power_mw=[[100_000]], fail_after=1)  # only open_meter's probe works
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = _meter("cuda", ["0"])
    with caplog.at_level(logging.WARNING, logger=power.__name__):
        meter.start()
        assert not meter.sampling
        energy = meter.stop()
    assert energy.joules is None and "failed after 0 readings: Unknown Error" in energy.reason
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_a_reading_that_hangs_does_not_hang_stop(monkeypatch) -> None:
    nvml = fake_pynvml(power_mw=[[100_000]])
    read = nvml.nvmlDeviceGetPowerUsage
    entered, gate = threading.Event(), threading.Event()

    def hanging(handle):
        if nvml.calls["reads"] >= 2:  # open_meter's probe and start() return at once
            entered.set()
            gate.wait()
        return read(handle)

    nvml.nvmlDeviceGetPowerUsage = hanging
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(power, "JOIN_TIMEOUT_S", 0.0)
    meter = open_meter("cuda", ["0"], interval_s=0.001, clock=FakeClock())
    meter.start()
    entered.wait()
    thread = meter._thread
    energy = meter.stop()
    assert energy.joules is None and energy.reason == "nvml power usage did not answer within 0 s"
    meter.start()  # the source is stuck: no new window
    assert not meter.sampling and meter.stop().reason == energy.reason
    gate.set()
    thread.join()


def test_nvml_devices_default_to_cuda_visible_devices(monkeypatch) -> None:
    nvml = fake_pynvml(energy_mj=[[0, 1000], [0, 2000], [0, 3000]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-8d3e-0")
    meter = _meter("cuda", [])
    meter.start()
    assert meter.stop().per_device == {"2": 3.0, "GPU-8d3e-0": 1.0}


def test_nvml_devices_default_to_every_device_nvml_sees(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(energy_mj=[[0, 1000], [0, 2000]]))
    meter = _meter("cuda", [])
    meter.start()
    assert meter.stop().per_device == {"0": 1.0, "1": 2.0}


@pytest.mark.parametrize(
    ("nvml", "devices", "env", "reason"),
    [
        (None, [], None, "no power source: pynvml (the nvidia-ml-py package) not installed"),
        (
            fake_pynvml(power_mw=[[1]], init_error=9),
            [],
            None,
            "no power source: NVML unavailable: Driver Not Loaded",
        ),
        (
            fake_pynvml(energy_mj=None, power_mw=None, count=1),
            [],
            None,
            "no power source: NVML reports no power "
            "(total energy counter: Not Supported; power usage: Not Supported)",
        ),
        (
            fake_pynvml(power_mw=[[1]]),
            ["3"],
            None,
            "no power source: NVML has no device '3': NVML Error with code 2",
        ),
        (fake_pynvml(power_mw=[[1]]), [], "", "no power source: no cuda device is visible"),
    ],
    ids=["not-installed", "no-driver", "no-power", "unknown-device", "none-visible"],
)
def test_nvml_absent_or_unusable_says_why(monkeypatch, nvml, devices, env, reason) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    if env is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    meter = open_meter("cuda", devices)
    assert isinstance(meter, NoPower) and not meter.available
    assert meter.reason.startswith(reason)
    if nvml is not None and nvml.calls["init"]:
        assert nvml.calls["shutdown"] == nvml.calls["init"]  # released when unusable
    meter.start()
    assert meter.stop() == Energy.absent(meter.reason)


# --- rocm: amdsmi ------------------------------------------------------------------------


@pytest.mark.parametrize("legacy_key", [False, True], ids=["energy_accumulator", "power"])
def test_amdsmi_energy_counter_times_its_resolution(monkeypatch, legacy_key) -> None:
    amdsmi = fake_amdsmi(
        energy_ticks=[[500, 1500, 3500], [0, 0, 8000]], resolution_uj=250.0, legacy_key=legacy_key
    )
    monkeypatch.setitem(sys.modules, "amdsmi", amdsmi)
    with _meter("rocm", ["0", "1"]) as meter:
        meter.start()
        meter.sample()
        energy = meter.stop()
    # 3000 ticks x 250 µJ and 8000 ticks x 250 µJ
    assert energy.per_device == {"0": 0.75, "1": 2.0} and energy.joules == 2.75
    assert energy.source == "amdsmi energy counter" and energy.method == COUNTER
    assert amdsmi.calls == {"init": 1, "shutdown": 1}


def test_amdsmi_without_energy_counter_integrates_socket_power(monkeypatch) -> None:
    mi300 = [
        {"current_socket_power": 400, "average_socket_power": "N/A"},
        {"current_socket_power": 600, "average_socket_power": "N/A"},
    ]
    mi200 = [{"current_socket_power": 0xFFFF, "average_socket_power": 100}]
    rocm7 = [{"socket_power": 50, "current_socket_power": 999}]
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(power_info=[mi300, mi200, rocm7]))
    meter = _meter("rocm", [])
    meter.start()
    energy = meter.stop()
    assert energy.per_device == {"0": 1000.0, "1": 200.0, "2": 100.0}
    assert energy.source == "amdsmi socket power" and energy.method == SAMPLED


def test_amdsmi_devices_default_to_hip_visible_devices(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(energy_ticks=[[0, 1e6], [0, 2e6]]))
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    meter = _meter("rocm", [])
    meter.start()
    assert meter.stop().per_device == {"1": 30.5}


@pytest.mark.parametrize(
    ("amdsmi", "devices", "reason"),
    [
        (None, [], "no power source: amdsmi not installed"),
        (
            fake_amdsmi(power_info=[[{"current_socket_power": "N/A"}]]),
            [],
            "no power source: amdsmi reports no power (energy counter: Error code:",
        ),
        (fake_amdsmi(energy_ticks=[[0]]), ["4"], "no power source: amdsmi has no device '4'"),
    ],
    ids=["not-installed", "no-power", "unknown-device"],
)
def test_amdsmi_absent_or_unusable_says_why(monkeypatch, amdsmi, devices, reason) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", amdsmi)
    meter = open_meter("rocm", devices)
    assert isinstance(meter, NoPower) and meter.reason.startswith(reason)
    if amdsmi is not None:
        assert amdsmi.calls["shutdown"] == amdsmi.calls["init"] == 1


# --- gaudi: hl-smi -----------------------------------------------------------------------


@pytest.fixture()
def hl_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


@pytest.mark.parametrize("unit", [" W", ""], ids=["with-units", "nounits"])
def test_hl_smi_power_of_the_runs_modules_is_integrated(hl_bin, unit) -> None:
    install_hl_smi(hl_bin, f"0, 100{unit}\n1, 200{unit}\n2, 300{unit}\n")
    meter = _meter("gaudi", ["2", "0"])
    meter.start()
    (hl_bin / "hl-smi.csv").write_text(f"0, 300{unit}\n1, 0{unit}\n2, 500.5{unit}\n")
    energy = meter.stop()
    assert energy.per_device == {"2": 800.5, "0": 400.0} and energy.joules == 1200.5
    assert energy.source == "hl-smi power.draw" and energy.method == SAMPLED
    calls = (hl_bin / "hl-smi.args").read_text().splitlines()
    assert set(calls) == {"-Q module_id,power.draw -f csv,noheader"}


def test_hl_smi_modules_default_to_habana_visible_modules(hl_bin, monkeypatch) -> None:
    install_hl_smi(hl_bin, "0, 100 W\n1, 200 W\n")
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "1")
    meter = _meter("gaudi", [])
    meter.start()
    assert meter.stop().per_device == {"1": 400.0}


def test_hl_smi_modules_default_to_every_module(hl_bin) -> None:
    install_hl_smi(hl_bin, "1, 200 W\n0, 100 W\n")
    meter = _meter("gaudi", [])
    meter.start()
    assert meter.stop().per_device == {"0": 200.0, "1": 400.0}


def test_hl_smi_failing_while_sampling_is_the_reason(hl_bin) -> None:
    install_hl_smi(hl_bin, "0, 100 W\n")
    meter = _meter("gaudi", ["0"])
    meter.start()
    install_hl_smi(hl_bin, "", exit_status=1)
    energy = meter.stop()
    assert energy.joules is None
    assert energy.reason == (
        "hl-smi power.draw failed after 1 readings: "
        "`hl-smi -Q module_id,power.draw -f csv,noheader` failed with exit status 1"
    )


@pytest.mark.parametrize(
    ("csv", "status", "devices", "reason"),
    [
        (None, 0, [], "no power source: hl-smi not found on PATH"),
        (
            "",
            3,
            [],
            "no power source: `hl-smi -Q module_id,power.draw -f csv,noheader` "
            "failed with exit status 3",
        ),
        ("0, N/A\n", 0, [], "no power source: `hl-smi -Q module_id,power.draw -f csv,noheader` "),
        ("0, 90 W\n", 0, ["5"], "no power source: hl-smi lists no power for module 5 (it lists 0)"),
    ],
    ids=["not-installed", "failing", "no-power", "unknown-module"],
)
def test_hl_smi_absent_or_unusable_says_why(hl_bin, csv, status, devices, reason) -> None:
    if csv is not None:
        install_hl_smi(hl_bin, csv, exit_status=status)
    meter = open_meter("gaudi", devices)
    assert isinstance(meter, NoPower) and meter.reason.startswith(reason)


# --- cpu: RAPL ---------------------------------------------------------------------------


def _rapl_tree(root: Path) -> Path:
    write_rapl_zone(root, "intel-rapl:0", "package-0", 7_000_000, max_energy_range_uj=8_000_000)
    write_rapl_zone(root, "intel-rapl:0:0", "core", 1)  # a subdomain: inside package-0
    write_rapl_zone(root, "intel-rapl:0:1", "dram", 1)
    write_rapl_zone(root, "intel-rapl:1", "package-1", 5_000_000)
    write_rapl_zone(root, "intel-rapl:2", "psys", 1)  # the platform: not a package
    return root


def test_rapl_package_counters_with_a_wraparound(tmp_path) -> None:
    root = _rapl_tree(tmp_path / "powercap")
    meter = _meter("cpu", [], rapl_root=root)
    assert meter.devices == ["package-0", "package-1"]
    meter.start()
    set_rapl_energy(root, "intel-rapl:0", 1_000_000)  # wrapped at 8 J: 7 -> 8 = 0 -> 1
    set_rapl_energy(root, "intel-rapl:1", 6_000_000)
    meter.sample()
    set_rapl_energy(root, "intel-rapl:0", 3_000_000)
    set_rapl_energy(root, "intel-rapl:1", 7_500_000)
    energy = meter.stop()
    assert energy.per_device == {"package-0": 4.0, "package-1": 2.5}
    assert energy.joules == 6.5 and energy.seconds == 4.0 and energy.mean_watts == 1.625
    assert energy.source == "rapl package energy counter" and energy.method == COUNTER


def test_rapl_devices_select_packages(tmp_path) -> None:
    root = _rapl_tree(tmp_path / "powercap")
    assert _meter("cpu", ["1"], rapl_root=root).devices == ["package-1"]
    assert _meter("cpu", ["package-0"], rapl_root=root).devices == ["package-0"]


def test_rapl_counter_going_back_without_a_range_is_a_reason(tmp_path) -> None:
    root = tmp_path / "powercap"
    zone = write_rapl_zone(root, "intel-rapl:0", "package-0", 5_000_000)
    (zone / "max_energy_range_uj").unlink()
    meter = _meter("cpu", [], rapl_root=root)
    meter.start()
    set_rapl_energy(root, "intel-rapl:0", 1_000_000)
    energy = meter.stop()
    assert energy.joules is None
    assert energy.reason == "energy not computed: the energy counter went back (5.0 J, then 1.0 J)"


def test_rapl_unreadable_as_non_root_says_so(tmp_path, monkeypatch) -> None:
    root = _rapl_tree(tmp_path / "powercap")
    # chmod 0400 as on Linux >= 5.10; the tests may run as root, which reads it anyway
    (root / "intel-rapl:0" / "energy_uj").chmod(0o400)
    read_text = Path.read_text

    def denied(self: Path, *args, **kwargs) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    meter = open_meter("cpu", [], rapl_root=root)
    assert isinstance(meter, NoPower)
    assert meter.reason.startswith(
        f"RAPL not readable: permission denied on {root}/intel-rapl:0/energy_uj (root only"
    )


def test_no_rapl_says_so(tmp_path) -> None:
    meter = open_meter("cpu", [], rapl_root=tmp_path / "absent")
    assert isinstance(meter, NoPower)
    assert meter.reason.startswith(f"no power source: no RAPL package domain under {tmp_path}")


def test_this_machines_cpu_gives_a_meter_or_a_reason() -> None:
    meter = open_meter("cpu", [])
    meter.start()
    energy = meter.stop()
    meter.close()
    if isinstance(meter, NoPower):
        assert meter.reason and energy.reason == meter.reason and energy.joules is None
    else:
        assert (energy.joules is not None and energy.joules >= 0) or energy.reason


# --- the meter and its results -----------------------------------------------------------


def test_unknown_backend_has_no_power() -> None:
    meter = open_meter("tpu", [])
    assert isinstance(meter, NoPower)
    assert meter.reason == "no power source for backend 'tpu'"


def test_stop_without_start_and_windows_one_after_another(monkeypatch) -> None:
    nvml = fake_pynvml(energy_mj=[[0, 1000, 3000, 6000]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = _meter("cuda", ["0"])
    assert meter.stop().reason == "the meter was not started"
    meter.start()
    meter.start()  # already measuring: ignored
    first = meter.stop()
    meter.start()
    second = meter.stop()
    assert (first.joules, first.samples, second.joules, second.samples) == (1.0, 2, 3.0, 2)
    assert meter.stop().reason == "the meter was not started"
    both = combine([first, second])
    assert (both.joules, both.seconds, both.mean_watts, both.samples) == (4.0, 4.0, 1.0, 4)
    assert both.per_device == {"0": 4.0}


def test_combine_with_a_window_without_energy_keeps_its_reason() -> None:
    done = Energy(2.0, 1.0, 2.0, "rapl", COUNTER, 2, 1.0, {"package-0": 2.0})
    assert combine([done, Energy.absent("x failed")]).reason == "x failed"
    assert combine([]).reason == "no window measured"


def test_energy_as_dict_and_joules_per_1000_samples() -> None:
    energy = Energy(14.0, 4.0, 3.5, "nvml total energy counter", COUNTER, 3, 1.0, {"0": 14.0})
    assert energy.as_dict() == {
        "joules": 14.0,
        "seconds": 4.0,
        "mean_watts": 3.5,
        "source": "nvml total energy counter",
        "method": COUNTER,
        "samples": 3,
        "interval_s": 1.0,
        "per_device": {"0": 14.0},
        "reason": None,
    }
    assert joules_per_1000_samples(energy, 700) == 20.0
    assert joules_per_1000_samples(energy, 0) is None
    assert joules_per_1000_samples(Energy.absent("none"), 700) is None


# --- joules so far: what each train_log.csv row's energy_j differences ---------------------


def test_joules_reads_a_quick_source_now_and_keeps_the_window_open(monkeypatch) -> None:
    nvml = fake_pynvml(energy_mj=[[1000, 4000, 4500, 9000]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = _meter("cuda", ["0"])
    assert meter.joules() is None  # not started
    meter.start()  # reads 1000 mJ
    assert meter.joules() == 3.0  # 4000 mJ now
    assert meter.joules() == 3.5
    energy = meter.stop()  # 9000 mJ: the window went on through the joules() readings
    assert energy.joules == 8.0 and energy.samples == 4 and energy.seconds == 6.0
    assert meter.joules() is None  # stopped


def test_joules_while_the_thread_reads_takes_its_last_reading_without_waiting(
    monkeypatch,
) -> None:
    nvml = fake_pynvml(energy_mj=[[0, 2000, 5000]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = _meter("cuda", ["0"])
    meter.start()
    meter.sample()  # 2000 mJ
    with meter._lock:  # the thread is inside a reading
        assert meter.joules() == 2.0
    assert meter.joules() == 5.0  # the next call reads: nothing is lost


def test_joules_never_reads_hl_smi_in_the_caller(hl_bin) -> None:
    install_hl_smi(hl_bin, "0, 100 W\n")
    meter = _meter("gaudi", ["0"])
    meter.start()
    calls = len((hl_bin / "hl-smi.args").read_text().splitlines())
    assert meter.joules() == 0.0  # start()'s reading only
    meter.sample()  # the thread's, 2 s later
    assert meter.joules() == 200.0
    assert len((hl_bin / "hl-smi.args").read_text().splitlines()) == calls + 1


def test_joules_after_a_failed_reading_is_none_and_stop_says_why(monkeypatch) -> None:
    nvml = fake_pynvml(energy_mj=[[0, 1000]], fail_after=3)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = _meter("cuda", ["0"])
    meter.start()
    assert meter.joules() == 1.0
    assert meter.joules() is None
    assert meter.stop().reason == "nvml total energy counter failed after 2 readings: Unknown Error"


def test_no_power_has_no_joules() -> None:
    meter = open_meter("tpu", [])
    meter.start()
    assert meter.joules() is None


def test_the_rapl_root_can_be_named_by_the_environment(tmp_path, monkeypatch) -> None:
    root = _rapl_tree(tmp_path / "powercap")
    monkeypatch.setenv(power.RAPL_ROOT_ENV, str(root))
    assert _meter("cpu", []).devices == ["package-0", "package-1"]
    monkeypatch.setenv(power.RAPL_ROOT_ENV, str(tmp_path / "absent"))
    meter = open_meter("cpu", [])
    assert isinstance(meter, NoPower) and f"under {tmp_path / 'absent'}" in meter.reason
