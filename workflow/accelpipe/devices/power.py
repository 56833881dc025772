"""Board power and energy over a window of training steps, where the backend can read it.

`open_meter(backend, devices)` picks the source of the backend and returns a `PowerMeter`,
or a `NoPower` that says why energy cannot be measured. Both have `start()`, `sample()`,
`joules()` (the window's joules so far, the window kept open: what train_log.csv's
`energy_j` differences per logged step), `stop() -> Energy` and `close()`; none ever raises,
so a meter can never make training fail: a source that errors becomes the `reason` of the
window's `Energy` (logged once).

Sources, by backend (only the devices the run uses):

- cuda: NVML through `pynvml` (the `nvidia-ml-py` package). The total-energy counter
  (`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded, Volta and newer) where
  every device has it, else board power (`nvmlDeviceGetPowerUsage`, mW) sampled.
- rocm: `amdsmi`. The energy accumulator (`amdsmi_get_energy_count`: ticks times
  `counter_resolution` µJ; bare-metal Linux only) where every device has it, else socket
  power (`amdsmi_get_power_info`, W) sampled.
- gaudi: `hl-smi -Q module_id,power.draw -f csv,noheader` sampled (one call reads every
  module; the rows of the run's module ids are kept, the ids HABANA_VISIBLE_MODULES takes).
- cpu: Intel RAPL through the powercap driver, `<root>/intel-rapl:N/energy_uj` of the
  package domains (AMD Zen CPUs appear there too), wraparound at `max_energy_range_uj`
  handled. Since Linux 5.10 energy_uj is readable by root only (CVE-2020-8694). The powercap
  folder is /sys/class/powercap, or the one `ACCELPIPE_RAPL_ROOT` names (a copy of the tree, or
  the tests' stand-in).

Devices: the ids passed in (the leased devices), else the vendor's visibility variable
(CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, HABANA_VISIBLE_MODULES), else every device the
source sees (inside a container that is the devices given to it). cuda ids are NVML indices
(nvidia-smi's numbering, which the leases use) or GPU UUIDs; rocm ids index amdsmi's
processor handles; gaudi ids are module ids; cpu ids name RAPL zones (`package-0` or `0`).

Counters are read every `interval_s` too (1 s by default), so that a wrap within the window
is seen; sampled power (every 0.1 s, 0.5 s for hl-smi) is integrated with the trapezoidal
rule. Readings happen in a daemon thread, which stops at the first error. Each reading adds
its step to running totals, so `joules()` costs one reading, not a pass over the window:
quick sources (NVML, amdsmi, RAPL: a library call or a file) are read in the caller, unless
the thread is reading at that moment (then its last reading counts, and the rest falls into
the next call); hl-smi, a process per reading, is never read in the caller.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from accelpipe.core.leases import VISIBILITY_ENV

log = logging.getLogger(__name__)

RAPL_ROOT = Path("/sys/class/powercap")
# Names another powercap folder for the cpu backend's RAPL (open_meter's default rapl_root).
RAPL_ROOT_ENV = "ACCELPIPE_RAPL_ROOT"
HL_SMI_ARGS = ("-Q", "module_id,power.draw", "-f", "csv,noheader")
# Seconds between readings: sampled power, energy counters, and hl-smi (a process per reading).
POWER_INTERVAL_S = 0.1
COUNTER_INTERVAL_S = 1.0
HL_SMI_INTERVAL_S = 0.5
TOOL_TIMEOUT_S = 10.0
# How long stop() waits for a reading in progress before giving up on the source.
JOIN_TIMEOUT_S = 15.0
COUNTER = "energy counter"
SAMPLED = "sampled power, trapezoidal"
# Values amdsmi reports for a field the device does not support.
_AMDSMI_UNSUPPORTED = {0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF}

Clock = Callable[[], float]


class SourceError(Exception):
    """A power source that cannot answer (the message becomes the reason)."""


@dataclass(frozen=True)
class Energy:
    """What a window measured. `joules` is None, with its `reason`, where nothing was.

    joules and per_device (joules per device id) cover the window from the first reading,
    at start(), to the last, at stop(): `seconds`. `samples` counts the readings.
    """

    joules: float | None
    seconds: float | None
    mean_watts: float | None
    source: str | None
    method: str | None
    samples: int
    interval_s: float | None
    per_device: dict[str, float] = field(default_factory=dict)
    reason: str | None = None

    @classmethod
    def absent(cls, reason: str, source: str | None = None) -> Energy:
        return cls(None, None, None, source, None, 0, None, {}, reason)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def joules_per_1000_samples(energy: Energy, samples: int | float) -> float | None:
    """Joules per 1,000 samples processed in the window; None where either is unknown."""
    if energy.joules is None or not samples or samples <= 0:
        return None
    return energy.joules * 1000.0 / samples


def combine(parts: Sequence[Energy]) -> Energy:
    """One Energy over several windows of one meter (e.g. the measured steps of each epoch)."""
    if not parts:
        return Energy.absent("no window measured")
    missing = [p.reason or "no energy" for p in parts if p.joules is None]
    first = parts[0]
    if missing:
        return Energy.absent(missing[0], first.source)
    joules = sum(p.joules or 0.0 for p in parts)
    seconds = sum(p.seconds or 0.0 for p in parts)
    per_device: dict[str, float] = {}
    for part in parts:
        for device, value in part.per_device.items():
            per_device[device] = per_device.get(device, 0.0) + value
    return Energy(
        joules=joules,
        seconds=seconds,
        mean_watts=joules / seconds if seconds > 0 else None,
        source=first.source,
        method=first.method,
        samples=sum(p.samples for p in parts),
        interval_s=first.interval_s,
        per_device=per_device,
    )


class _Source:
    """Readings per device: cumulative joules (method COUNTER) or watts (SAMPLED)."""

    name: str
    # Whether a reading is quick enough to take in the training thread (joules()).
    quick = True
    method: str
    interval_s: float
    devices: list[str]
    # Per device, the joules where its counter wraps to 0 (None: it never wraps).
    wrap_j: list[float | None]

    def read(self) -> list[float]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class PowerMeter:
    """Energy of a window over `source`'s devices: start(), then stop() -> Energy."""

    available = True
    reason: str | None = None

    def __init__(
        self, source: _Source, *, interval_s: float | None = None, clock: Clock = time.monotonic
    ) -> None:
        self._source = source
        self.interval_s = source.interval_s if interval_s is None else interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._running: _Running | None = None  # the window so far; replaced, never mutated
        self._error: str | None = None
        self._warned = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._window = False
        self._closed = False
        self._hung: str | None = None  # a reading that never returned: the meter is done

    @property
    def source(self) -> str:
        return self._source.name

    @property
    def devices(self) -> list[str]:
        return list(self._source.devices)

    @property
    def sampling(self) -> bool:
        """Whether the sampling thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Begin a window: one reading now, then one every interval_s in a daemon thread."""
        if self._window or self._closed or self._hung:
            return
        self._running = None
        self._error = None
        self._stopping = threading.Event()
        self._window = True
        self.sample()
        if self._error is None:
            self._thread = threading.Thread(
                target=self._run, args=(self._stopping,), name="accelpipe-power", daemon=True
            )
            self._thread.start()

    def sample(self) -> None:
        """Take one reading now (the thread calls this every interval_s); never raises."""
        self._sample(wait=True)

    def joules(self) -> float | None:
        """The joules of the window so far, from start() to now, the window kept open; None
        where it measures nothing (not started, or an error: stop() gives the reason). A
        quick source is read now, unless the thread is reading (then the thread's reading
        counts: this never waits for the thread); hl-smi gives the thread's latest reading.
        Never raises."""
        try:
            if not self._window or self._hung:
                return None
            if self._source.quick:
                self._sample(wait=False)
            running = self._running
            if self._error is not None or running is None:
                return None
            return sum(running.totals)
        except Exception as err:  # a bug here must not fail training either
            self._fail(f"energy not computed: {_text(err)}")
            return None

    def _sample(self, wait: bool) -> None:
        """One reading added to the running totals; `wait=False`: none where the thread
        is taking one now."""
        if not self._lock.acquire(blocking=wait):
            return
        try:
            if self._error is not None:
                return
            running = self._running
            count = running.count if running else 0
            try:
                values = tuple(float(v) for v in self._source.read())
                if len(values) != len(self._source.devices):
                    raise SourceError(
                        f"{len(values)} readings for {len(self._source.devices)} devices"
                    )
                now = self._clock()
            except Exception as err:
                self._fail(f"{self.source} failed after {count} readings: {_text(err)}")
                return
            try:
                self._running = _advance(
                    running, now, values, self._source.method, self._source.wrap_j
                )
            except Exception as err:
                self._fail(f"energy not computed: {_text(err)}")
        finally:
            self._lock.release()

    def stop(self) -> Energy:
        """End the window: the last reading, then the energy over it; never raises."""
        try:
            return self._stop()
        except Exception as err:  # a bug here must not fail training either
            self._fail(f"energy not computed: {_text(err)}")
            return Energy.absent(self._error or "energy not computed", self.source)

    def _stop(self) -> Energy:
        if self._hung:
            return Energy.absent(self._hung, self.source)
        if not self._window:
            return Energy.absent("the meter was not started", self.source)
        self._window = False
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(JOIN_TIMEOUT_S + self.interval_s)
            if thread.is_alive():  # a reading hangs: leave the daemon thread to it
                self._hung = f"{self.source} did not answer within {JOIN_TIMEOUT_S:.0f} s"
                self._fail(self._hung)
                return Energy.absent(self._hung, self.source)
        self.sample()
        running = self._running
        if self._error is not None or running is None:
            return Energy.absent(self._error or "no reading", self.source)
        seconds = running.time - running.first
        joules = sum(running.totals)
        return Energy(
            joules=joules,
            seconds=seconds,
            mean_watts=joules / seconds if seconds > 0 else None,
            source=self.source,
            method=self._source.method,
            samples=running.count,
            interval_s=self.interval_s,
            per_device=dict(zip(self._source.devices, running.totals, strict=True)),
        )

    def close(self) -> None:
        """Stop sampling and release the source (NVML, amdsmi); never raises."""
        if self._closed:
            return
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S + self.interval_s)
        self._closed = True
        if self._hung or (self._thread is not None and self._thread.is_alive()):
            return  # the source is in use by a reading that never returned
        try:
            self._source.close()
        except Exception as err:
            log.debug("closing %s: %s", self.source, _text(err))

    def __enter__(self) -> PowerMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.interval_s):
            self.sample()
            if self._error is not None:
                return

    def _fail(self, message: str) -> None:
        if self._error is None:
            self._error = message
        if not self._warned:
            self._warned = True
            log.warning("energy not measured: %s", message)


@dataclass
class NoPower:
    """No power source for this run; `reason` says why. start/stop do nothing."""

    reason: str
    available = False
    source = None
    devices: list[str] = field(default_factory=list)

    def start(self) -> None:
        pass

    def sample(self) -> None:
        pass

    def joules(self) -> float | None:
        return None

    def stop(self) -> Energy:
        return Energy.absent(self.reason)

    def close(self) -> None:
        pass

    def __enter__(self) -> NoPower:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def open_meter(
    backend: str,
    devices: Sequence[str | int] = (),
    *,
    interval_s: float | None = None,
    clock: Clock = time.monotonic,
    rapl_root: Path | None = None,
    tool_timeout_s: float = TOOL_TIMEOUT_S,
) -> PowerMeter | NoPower:
    """A meter over `devices` of `backend`, or NoPower with the reason; never raises.
    `rapl_root`: the powercap folder (default: $ACCELPIPE_RAPL_ROOT, else RAPL_ROOT)."""
    ids = [str(d).strip() for d in devices]
    if rapl_root is None:
        rapl_root = Path(os.environ.get(RAPL_ROOT_ENV) or RAPL_ROOT)
    try:
        if backend == "cuda":
            source = _open_nvml(ids)
        elif backend == "rocm":
            source = _open_amdsmi(ids)
        elif backend == "gaudi":
            source = _open_hl_smi(ids, tool_timeout_s)
        elif backend == "cpu":
            source = _open_rapl(ids, Path(rapl_root))
        else:
            raise SourceError(f"no power source for backend {backend!r}")
    except SourceError as err:
        log.info("energy not measured: %s", err)
        return NoPower(str(err), ids)
    except Exception as err:
        log.warning("energy not measured: opening the %s power source: %s", backend, _text(err))
        return NoPower(f"no power source: opening it failed: {_text(err)}", ids)
    return PowerMeter(source, interval_s=interval_s, clock=clock)


# --- integration -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Running:
    """A window so far: its first reading's time, the last reading (time, values), the
    joules per device between them and the number of readings."""

    first: float
    time: float
    values: tuple[float, ...]
    totals: tuple[float, ...]
    count: int


def _advance(
    running: _Running | None,
    now: float,
    values: tuple[float, ...],
    method: str,
    wrap_j: list[float | None],
) -> _Running:
    """The window with one more reading: per device, the counter's delta (a counter that
    went back wrapped once at wrap_j) or the trapezoid of sampled watts since the last."""
    if running is None:
        return _Running(now, now, values, (0.0,) * len(values), 1)
    totals = []
    for i, (a, b) in enumerate(zip(running.values, values, strict=True)):
        if method == SAMPLED:
            step = 0.5 * (a + b) * (now - running.time)
        else:
            step = b - a
            if step < 0:
                wrap = wrap_j[i]
                if wrap is None:
                    raise SourceError(f"the energy counter went back ({a} J, then {b} J)")
                step += wrap
        totals.append(running.totals[i] + step)
    return _Running(running.first, now, values, tuple(totals), running.count + 1)


def _visible(backend: str) -> list[str] | None:
    """The ids in the backend's visibility variable; None where it is unset."""
    value = os.environ.get(VISIBILITY_ENV[backend])
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def _text(err: BaseException) -> str:
    message = str(err).strip()
    return message or type(err).__name__


def _import(name: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as err:
        what = name if name == package else f"{name} (the {package} package)"
        raise SourceError(f"no power source: {what} not installed") from err


def _first_working(candidates: list[tuple[str, Callable[[], _Source]]], what: str) -> _Source:
    """The first candidate source whose first reading works; else SourceError naming why
    each failed."""
    failures = []
    for label, make in candidates:
        try:
            source = make()
            source.read()
            return source
        except Exception as err:
            failures.append(f"{label}: {_text(err)}")
    raise SourceError(f"no power source: {what} reports no power ({'; '.join(failures)})")


# --- cuda: NVML --------------------------------------------------------------------------


class _NvmlSource(_Source):
    def __init__(self, nvml: ModuleType, handles: list[Any], devices: list[str], energy: bool):
        self._nvml = nvml
        self._handles = handles
        self.devices = devices
        self.wrap_j = [None] * len(devices)
        if energy:
            self.name = "nvml total energy counter"
            self.method = COUNTER
            self.interval_s = COUNTER_INTERVAL_S
            self._read = nvml.nvmlDeviceGetTotalEnergyConsumption  # mJ
        else:
            self.name = "nvml power usage"
            self.method = SAMPLED
            self.interval_s = POWER_INTERVAL_S
            self._read = nvml.nvmlDeviceGetPowerUsage  # mW

    def read(self) -> list[float]:
        return [self._read(handle) / 1000.0 for handle in self._handles]

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def _open_nvml(ids: list[str]) -> _Source:
    nvml = _import("pynvml", "nvidia-ml-py")
    try:
        nvml.nvmlInit()
    except Exception as err:
        raise SourceError(f"no power source: NVML unavailable: {_text(err)}") from err
    try:
        if not ids:
            visible = _visible("cuda")
            if visible is None:
                visible = [str(i) for i in range(nvml.nvmlDeviceGetCount())]
            ids = visible
        if not ids:
            raise SourceError("no power source: no cuda device is visible to this run")
        handles = [_nvml_handle(nvml, device) for device in ids]
        return _first_working(
            [
                ("total energy counter", lambda: _NvmlSource(nvml, handles, ids, energy=True)),
                ("power usage", lambda: _NvmlSource(nvml, handles, ids, energy=False)),
            ],
            "NVML",
        )
    except BaseException:
        try:
            nvml.nvmlShutdown()
        except Exception as err:
            log.debug("nvmlShutdown: %s", _text(err))
        raise


def _nvml_handle(nvml: ModuleType, device: str) -> Any:
    try:
        if device.isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(device))
        return nvml.nvmlDeviceGetHandleByUUID(device)
    except Exception as err:
        raise SourceError(f"no power source: NVML has no device {device!r}: {_text(err)}") from err


# --- rocm: amdsmi ------------------------------------------------------------------------


class _AmdSmiSource(_Source):
    def __init__(self, amdsmi: ModuleType, handles: list[Any], devices: list[str], energy: bool):
        self._amdsmi = amdsmi
        self._handles = handles
        self.devices = devices
        self.wrap_j = [None] * len(devices)
        self._energy = energy
        self.name = "amdsmi energy counter" if energy else "amdsmi socket power"
        self.method = COUNTER if energy else SAMPLED
        self.interval_s = COUNTER_INTERVAL_S if energy else POWER_INTERVAL_S

    def read(self) -> list[float]:
        if self._energy:
            return [self._joules(handle) for handle in self._handles]
        return [self._watts(handle) for handle in self._handles]

    def _joules(self, handle: Any) -> float:
        count = self._amdsmi.amdsmi_get_energy_count(handle)
        # `energy_accumulator` since ROCm 6.x; `power` is its older, deprecated name.
        ticks = count.get("energy_accumulator", count.get("power"))
        resolution = count.get("counter_resolution")  # µJ per tick
        if not isinstance(ticks, (int, float)) or not isinstance(resolution, (int, float)):
            raise SourceError(f"amdsmi_get_energy_count returned {count!r}")
        return ticks * resolution / 1e6

    def _watts(self, handle: Any) -> float:
        info = self._amdsmi.amdsmi_get_power_info(handle)
        # socket_power (ROCm 7), current_socket_power (MI300 and newer), average_socket_power
        # (MI200 and older, Navi); the others read "N/A" or the all-ones sentinel.
        for key in ("socket_power", "current_socket_power", "average_socket_power"):
            value = info.get(key)
            if isinstance(value, (int, float)) and value not in _AMDSMI_UNSUPPORTED:
                return float(value)
        raise SourceError(f"amdsmi_get_power_info has no socket power: {info!r}")

    def close(self) -> None:
        self._amdsmi.amdsmi_shut_down()


def _open_amdsmi(ids: list[str]) -> _Source:
    amdsmi = _import("amdsmi", "amdsmi")
    try:
        amdsmi.amdsmi_init()  # AMD GPUs only, its default
    except Exception as err:
        raise SourceError(f"no power source: amdsmi unavailable: {_text(err)}") from err
    try:
        every = list(amdsmi.amdsmi_get_processor_handles())
        if not ids:
            visible = _visible("rocm")
            if visible is None:
                visible = [str(i) for i in range(len(every))]
            ids = visible
        if not ids:
            raise SourceError("no power source: no rocm device is visible to this run")
        handles = []
        for device in ids:
            if not device.isdigit() or int(device) >= len(every):
                raise SourceError(
                    f"no power source: amdsmi has no device {device!r} ({len(every)} GPUs)"
                )
            handles.append(every[int(device)])
        return _first_working(
            [
                ("energy counter", lambda: _AmdSmiSource(amdsmi, handles, ids, energy=True)),
                ("socket power", lambda: _AmdSmiSource(amdsmi, handles, ids, energy=False)),
            ],
            "amdsmi",
        )
    except BaseException:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception as err:
            log.debug("amdsmi_shut_down: %s", _text(err))
        raise


# --- gaudi: hl-smi -----------------------------------------------------------------------

_HL_ROW = re.compile(r"^\s*(\d+)\s*,\s*([0-9]+(?:\.[0-9]+)?)\s*(?:W)?\s*$")


class _HlSmiSource(_Source):
    name = "hl-smi power.draw"
    method = SAMPLED
    quick = False  # a process per reading: only the thread reads it
    interval_s = HL_SMI_INTERVAL_S

    def __init__(self, tool: str, devices: list[str], timeout_s: float):
        self._argv = [tool, *HL_SMI_ARGS]
        self._timeout_s = timeout_s
        self.devices = devices
        self.wrap_j = [None] * len(devices)

    def read_all(self) -> dict[str, float]:
        """Watts per module id, of every module hl-smi lists."""
        command = " ".join(["hl-smi", *HL_SMI_ARGS])
        try:
            done = subprocess.run(
                self._argv, capture_output=True, text=True, timeout=self._timeout_s, check=False
            )
        except subprocess.TimeoutExpired as err:
            raise SourceError(f"`{command}` did not answer within {self._timeout_s:.0f} s") from err
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise SourceError(
                f"`{command}` failed with exit status {done.returncode}"
                f"{': ' + detail[-1] if detail else ''}"
            )
        watts = {}
        for line in done.stdout.splitlines():
            match = _HL_ROW.match(line)
            if match:
                watts[str(int(match.group(1)))] = float(match.group(2))
        if not watts:
            lines = done.stdout.strip().splitlines()
            raise SourceError(f"`{command}` printed no power: {lines[0] if lines else 'nothing'}")
        return watts

    def read(self) -> list[float]:
        watts = self.read_all()
        missing = [d for d in self.devices if d not in watts]
        if missing:
            raise SourceError(
                f"hl-smi lists no power for module {', '.join(missing)} "
                f"(it lists {', '.join(sorted(watts, key=int))})"
            )
        return [watts[d] for d in self.devices]


def _open_hl_smi(ids: list[str], timeout_s: float) -> _Source:
    tool = shutil.which("hl-smi")
    if tool is None:
        raise SourceError("no power source: hl-smi not found on PATH")
    wanted = ids if ids else _visible("gaudi")
    source = _HlSmiSource(tool, [], timeout_s)
    try:
        watts = source.read_all()
    except SourceError as err:
        raise SourceError(f"no power source: {err}") from err
    if wanted is None:
        wanted = sorted(watts, key=int)
    ids = [str(int(d)) if d.isdigit() else d for d in wanted]
    if not ids:
        raise SourceError("no power source: no gaudi module is visible to this run")
    source = _HlSmiSource(tool, ids, timeout_s)
    try:
        source.read()
    except SourceError as err:
        raise SourceError(f"no power source: {err}") from err
    return source


# --- cpu: RAPL ---------------------------------------------------------------------------

_RAPL_ZONE = re.compile(r"^intel-rapl:(\d+)$")


class _RaplSource(_Source):
    name = "rapl package energy counter"
    method = COUNTER
    interval_s = COUNTER_INTERVAL_S

    def __init__(self, files: list[Path], devices: list[str], wrap_j: list[float | None]):
        self._files = files
        self.devices = devices
        self.wrap_j = wrap_j

    def read(self) -> list[float]:
        return [int(path.read_text()) / 1e6 for path in self._files]


def _open_rapl(ids: list[str], root: Path) -> _Source:
    zones = []
    if root.is_dir():
        for zone in sorted(root.iterdir(), key=lambda p: p.name):
            match = _RAPL_ZONE.match(zone.name)
            name = _read_optional(zone / "name")
            if match and name is not None and name.startswith("package"):
                zones.append((match.group(1), name, zone))
    if not zones:
        raise SourceError(
            f"no power source: no RAPL package domain under {root} "
            "(no powercap RAPL driver on this host, or not visible in this container)"
        )
    if ids:
        zones = [z for z in zones if z[0] in ids or z[1] in ids]
        if not zones:
            raise SourceError(f"no power source: no RAPL package domain {', '.join(ids)}")
    files, devices, wrap_j = [], [], []
    for _, name, zone in zones:
        path = zone / "energy_uj"
        try:
            int(path.read_text())
        except PermissionError as err:
            raise SourceError(
                f"RAPL not readable: permission denied on {path} (root only since Linux 5.10, "
                "CVE-2020-8694; an admin can grant read access)"
            ) from err
        except (OSError, ValueError) as err:
            raise SourceError(f"RAPL not readable: {path}: {_text(err)}") from err
        limit = _read_optional(zone / "max_energy_range_uj")
        files.append(path)
        devices.append(name)
        wrap_j.append(int(limit) / 1e6 if limit and limit.isdigit() else None)
    return _RaplSource(files, devices, wrap_j)


def _read_optional(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return None
