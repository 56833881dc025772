"""Peak allocated memory per section, from the PyTorch profiler's ``[memory]`` events.

With ``profile_memory=True`` torch writes an instant event (``"ph": "i"``, category
``cpu_instant_event``, name ``[memory]``) for every allocation and free it sees. Its ``args``:
``Bytes`` (the change), ``Total Allocated`` (what that device's allocator holds just after),
``Device Type`` (c10's DeviceType number: 0 cpu, 1 cuda, which ROCm builds report too) and
``Device Id`` (-1 for the CPU). The collector decodes every ``cpu_instant_event``
(``classify``'s ``instant`` role) and hands each here; without ``profile_memory`` a trace
has next to none, so finding them costs a trace without them nothing.

The peak of a section on a device is the highest ``Total Allocated`` while one of its
instances is open: the level it opened at (the device's last event before its start, in the
same process) and every event inside ``[ts, ts + dur]``. A section with no memory event
inside any instance is ``None``: nothing was allocated or freed while it ran, or memory was
not profiled then. Devices are named ``cpu`` and ``<type>:<id>`` (``cuda:0``).

On the CPU, torch's allocator reporter counts only blocks allocated while memory was being
profiled and forgets none it did not see freed, so CPU levels start near 0 at the first
cycle and may carry blocks freed between cycles into later ones. CUDA levels are the
caching allocator's own totals.
"""

from __future__ import annotations

import contextlib
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

from accelpipe.traces.join import Instances, range_reduce

MEMORY_EVENT = "[memory]"
_NUM = (int, float)  # compared with type(), so bools are not numbers here
# c10::DeviceType numbers (torch._C._autograd.DeviceType) of devices with an allocator.
DEVICE_TYPES = {
    0: "cpu",
    1: "cuda",
    6: "hip",
    12: "xpu",
    13: "mps",
    15: "hpu",
    19: "mtia",
    20: "privateuse1",
}


def device_name(kind: Any, index: Any) -> str:
    """``cpu``, ``cuda:0``, ...: the device of a memory event's ``Device Type`` and ``Id``."""
    name = DEVICE_TYPES.get(kind, f"device_type_{kind}") if type(kind) is int else "unknown"
    return f"{name}:{index}" if type(index) is int and index >= 0 else name


class MemoryEvents:
    """One file's ``[memory]`` events: thread (``FileEvents.thread`` ids), time, the
    device's total allocated bytes after the event, and the device (an id into ``devices``)."""

    def __init__(self) -> None:
        self.thread, self.device = array("i"), array("i")
        self.ts, self.total = array("d"), array("q")
        self.devices: dict[str, int] = {}
        self._device_ids: dict[tuple[Any, Any], int] = {}  # (Device Type, Device Id) -> id
        self.nonfinite = 0

    def add_many(
        self, events: list[dict], threads: dict[Any, int], thread: Callable[[Any], int]
    ) -> None:
        """Record the memory events among ``events`` (instant events) that have a finite time
        and a byte total; ``threads`` / ``thread``: the collector's (pid, tid) ids. A hot
        loop in traces with memory events (~1 per cpu_op), hence the local names."""
        ids = self._device_ids
        add_thread, add_device = self.thread.append, self.device.append
        add_ts, add_total = self.ts.append, self.total.append
        for ev in events:
            # JSON values, numbers past the exact type() test (which mypy does not narrow on)
            args = ev.get("args")
            ts: Any = ev.get("ts")
            if ev.get("name") != MEMORY_EVENT or type(args) is not dict:
                continue
            total: Any = args.get("Total Allocated")
            if type(ts) not in _NUM or type(total) not in _NUM or not 0 <= total < 1 << 63:
                continue  # not a byte count array("q") holds (NaN fails the comparison too)
            if ts - ts != 0:
                self.nonfinite += 1
                continue
            key = (args.get("Device Type"), args.get("Device Id"))
            where = (ev.get("pid"), ev.get("tid"))
            try:
                device, tid = ids[key], threads[where]
            except (KeyError, TypeError):  # new, or an unhashable value
                device, tid = self._device(key), thread(where)
            add_device(device)
            add_thread(tid)
            add_ts(ts)
            add_total(int(total))

    def _device(self, key: tuple[Any, Any]) -> int:
        name = device_name(*key)
        device = self.devices.setdefault(name, len(self.devices))
        with contextlib.suppress(TypeError):  # a list as Device Type or Id: named every time
            self._device_ids[key] = device
        return device


class MemoryPool:
    """Peaks per section and device, accumulated across files (a few numbers per name)."""

    def __init__(self) -> None:
        self.events = 0
        self.overall: dict[str, int] = {}
        self.peaks: dict[str, dict[str, int]] = {}
        self.with_events: set[str] = set()

    def extend(
        self,
        names: list[str],
        inst: Instances,
        mem: MemoryEvents,
        pid_of: Callable[[array], np.ndarray],
    ) -> None:
        """Add one file: ``inst`` its section instances, ``pid_of`` maps its thread ids."""
        if not len(mem.ts):
            return
        self.events += len(mem.ts)
        device = np.frombuffer(mem.device, np.int32)
        pid = pid_of(mem.thread)
        ts, total = np.frombuffer(mem.ts, np.float64), np.frombuffer(mem.total, np.int64)
        inside_any = np.zeros(len(names), bool)
        for dev, d in mem.devices.items():
            sel = device == d
            self.overall[dev] = max(self.overall.get(dev, 0), int(total[sel].max()))
            peak, inside = instance_peaks(pid[sel], ts[sel], total[sel], inst)
            np.logical_or.at(inside_any, inst.name, inside)
            best = np.full(len(names), -np.inf)
            np.maximum.at(best, inst.name, peak)
            for i in np.flatnonzero(best > -np.inf).tolist():
                known = self.peaks.setdefault(names[i], {})
                known[dev] = max(known.get(dev, 0), int(best[i]))
        self.with_events.update(names[i] for i in np.flatnonzero(inside_any).tolist())

    def summary(self, sections: list[str]) -> dict | None:
        """None without memory events; else the event count, each device's peak over the
        whole trace and each section's peak per device (None: no event while open)."""
        if not self.events:
            return None
        return {
            "events": self.events,
            "peak_allocated_bytes": dict(sorted(self.overall.items())),
            "sections": {
                name: dict(sorted(self.peaks[name].items())) if name in self.with_events else None
                for name in sections
            },
        }


def instance_peaks(
    pid: np.ndarray, ts: np.ndarray, total: np.ndarray, inst: Instances
) -> tuple[np.ndarray, np.ndarray]:
    """One device's events against every section instance: the peak level while the
    instance is open (-inf before the device's first event) and whether an event fell
    inside it (the rule in the module docstring)."""
    n = len(inst.start)
    peak, inside = np.full(n, -np.inf), np.zeros(n, bool)
    order = np.lexsort((ts, pid))
    pid, ts, level = pid[order], ts[order], total[order].astype(np.float64)
    end = inst.start + inst.host_span
    for p in np.unique(inst.pid).tolist():
        a, b = np.searchsorted(pid, [p, p + 1]).tolist()
        if a == b:
            continue
        rows = np.flatnonzero(inst.pid == p)
        t, v = ts[a:b], level[a:b]
        lo = np.searchsorted(t, inst.start[rows], side="left")
        hi = np.searchsorted(t, end[rows], side="right")
        carried = np.where(lo > 0, v[np.maximum(lo - 1, 0)], -np.inf)
        peak[rows] = np.maximum(carried, range_reduce(np.maximum, v, lo, hi, -np.inf))
        inside[rows] = hi > lo
    return peak, inside
