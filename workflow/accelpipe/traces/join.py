"""Joining one file's sections, runtime launches and device kernels (all numpy).

* A kernel joins the runtime event with the same ``args.correlation`` (its launch). All
  kernels carrying one launch's correlation (a CUDA graph's kernels share their
  ``cudaGraphLaunch``'s) count for that launch; the first launch of a correlation is the one.
* A launch belongs to a section by time: its ``ts`` lies inside a section instance's
  ``[ts, ts + dur]`` and both are in the same process (pid), on any thread. Same-thread
  joining misses the GPU work of ``backward``: PyTorch's autograd engine launches backward
  kernels from its own worker thread, not from the thread that holds the ``backward``
  ``record_function``. Different section names are independent, so a launch inside nested
  sections counts for each of them (parents include their children).
* Per section name a launch counts at most once: when instances of one name overlap (a
  name nested in itself, or open on two threads at once), the launch goes to the innermost
  instance (the latest-starting one that contains it; ties: the one that ends first).
* ``device_busy_ms`` needs no correlation: the time inside each instance during which at
  least one kernel ran (any device, any stream). It measures overlap, not causation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from accelpipe.traces.intervals import busy_and_span, covered, slot_owners

if TYPE_CHECKING:  # collect imports memory, which imports this module
    from accelpipe.traces.collect import FileEvents


@dataclass
class Instances:
    """One file's section instances with their figures (µs): host busy time and span
    (``intervals``: for a kineto ``record_function``, both its duration), and the joined
    device figures."""

    name: np.ndarray  # name ids (FileEvents.names)
    pid: np.ndarray  # process ids (FileEvents.pid_of)
    start: np.ndarray
    host_busy: np.ndarray
    host_span: np.ndarray
    kernel: np.ndarray
    kernel_span: np.ndarray
    device_busy: np.ndarray
    has_kernels: np.ndarray  # bool: at least one kernel joined


@dataclass
class _Launches:
    """Launches that ran kernels, sorted by (pid, ts), with their kernels' figures."""

    pid: np.ndarray
    ts: np.ndarray
    kern_sum: np.ndarray
    kern_first: np.ndarray
    kern_last: np.ndarray


def join_file(fe: FileEvents) -> tuple[Instances, int]:
    """The file's section instances (device-row annotations dropped) with kernel time,
    kernel span and device busy time; and the number of kernels with no launch."""
    sec_thread = np.frombuffer(fe.sec_thread, np.int32)
    # An annotation on a device row is a device mirror, whatever its category.
    keep = ~np.isin(sec_thread, fe.device_rows())
    sec_pid = fe.pid_of(sec_thread[keep])
    names = np.frombuffer(fe.sec_name, np.int32)[keep]
    start = np.frombuffer(fe.sec_ts, np.float64)[keep]
    end = start + np.frombuffer(fe.sec_dur, np.float64)[keep]
    # Each record_function is an instance of one interval: busy time and span by the one
    # definition (both its duration).
    host = busy_and_span(np.arange(len(start)), start, end)
    launches, orphans = _launches(fe)
    kern, first, last = attribute(sec_pid, names, start, end, launches)
    has = last >= first
    span = np.where(has, last - first, 0.0)
    busy = busy_within(fe, start, end)
    host_span = host.last - host.first
    return Instances(names, sec_pid, start, host.busy, host_span, kern, span, busy, has), orphans


def _launches(fe: FileEvents) -> tuple[_Launches, int]:
    """Launches joined to their kernels; and how many kernels no launch claims."""
    kern_corr = np.frombuffer(fe.kern_corr, np.int64)
    empty = np.zeros(0)
    none = _Launches(np.zeros(0, np.int32), empty, empty, empty, empty)
    if not len(kern_corr) or not len(fe.launch_corr):
        return none, len(kern_corr)
    uniq, k_sum, k_first, k_last = _kernels_by_correlation(fe)
    l_corr = np.frombuffer(fe.launch_corr, np.int64)
    l_corr, pick = np.unique(l_corr, return_index=True)  # the first launch per correlation
    orphans = int(np.count_nonzero(~np.isin(kern_corr, l_corr)))
    pos = np.minimum(np.searchsorted(uniq, l_corr), len(uniq) - 1)
    hit = uniq[pos] == l_corr  # only launches that ran kernels
    pick, pos = pick[hit], pos[hit]
    pid = fe.pid_of(np.frombuffer(fe.launch_thread, np.int32)[pick])
    ts = np.frombuffer(fe.launch_ts, np.float64)[pick]
    order = np.lexsort((ts, pid))
    pos = pos[order]
    joined = _Launches(pid[order], ts[order], k_sum[pos], k_first[pos], k_last[pos])
    return joined, orphans


def _kernels_by_correlation(fe: FileEvents) -> tuple[np.ndarray, ...]:
    """Unique correlation ids with their kernels' summed duration, first start, last end."""
    corr = np.frombuffer(fe.kern_corr, np.int64)
    ts = np.frombuffer(fe.kern_ts, np.float64)
    dur = np.frombuffer(fe.kern_dur, np.float64)
    order = np.argsort(corr, kind="stable")
    corr, ts, dur = corr[order], ts[order], dur[order]
    uniq, first = np.unique(corr, return_index=True)
    return (
        uniq,
        np.add.reduceat(dur, first),
        np.minimum.reduceat(ts, first),
        np.maximum.reduceat(ts + dur, first),
    )


def attribute(
    pid: np.ndarray, name: np.ndarray, start: np.ndarray, end: np.ndarray, launches: _Launches
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per section instance: summed kernel µs, first kernel start, last kernel end
    (inf / -inf with no kernel), by the rule in the module docstring."""
    n = len(start)
    kern, first, last = np.zeros(n), np.full(n, np.inf), np.full(n, -np.inf)
    if not n or not len(launches.ts):
        return kern, first, last
    order = np.lexsort((start, name, pid))  # groups of one (pid, name), by start
    key_pid, key_name = pid[order], name[order]
    cuts = np.flatnonzero((key_pid[1:] != key_pid[:-1]) | (key_name[1:] != key_name[:-1])) + 1
    parts: dict[int, _Launches] = {}  # each process's launches, a slice of the sorted ones
    for p in np.unique(pid).tolist():
        lo, hi = np.searchsorted(launches.pid, [p, p + 1], side="left").tolist()
        if hi > lo:
            parts[p] = _Launches(
                *(getattr(launches, f)[lo:hi] for f in _Launches.__dataclass_fields__)
            )
    for rows in np.split(order, cuts):
        part = parts.get(int(pid[rows[0]]))
        if part is not None:
            kern[rows], first[rows], last[rows] = _group(start[rows], end[rows], part)
    return kern, first, last


def _group(
    start: np.ndarray, end: np.ndarray, part: _Launches
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kernel figures of one name's instances (sorted by start) from one process's
    launches (sorted by ts). Windows are closed: a launch at either edge is inside."""
    times = part.ts
    csum = np.concatenate(([0.0], np.cumsum(part.kern_sum)))
    reach = np.maximum.accumulate(end)
    if not (start[1:] <= reach[:-1]).any():  # disjoint instances: each launch in at most one
        lo = np.searchsorted(times, start, side="left")
        hi = np.searchsorted(times, end, side="right")
        return (
            csum[hi] - csum[lo],
            range_reduce(np.minimum, part.kern_first, lo, hi, np.inf),
            range_reduce(np.maximum, part.kern_last, lo, hi, -np.inf),
        )
    # Overlapping instances: cut time into slots (each distinct boundary point, and the open
    # stretches between them), give each slot its innermost instance, sum launches per slot.
    points, owners = slot_owners(start, end)
    bounds = np.empty(2 * len(points) + 2, np.int64)
    bounds[0], bounds[-1] = 0, len(times)
    bounds[1:-1:2] = np.searchsorted(times, points, side="left")
    bounds[2:-1:2] = np.searchsorted(times, points, side="right")
    lo, hi = bounds[:-1], bounds[1:]
    owned = owners >= 0
    who = owners[owned]
    k = len(start)
    kern = np.bincount(who, (csum[hi] - csum[lo])[owned], minlength=k)
    first, last = np.full(k, np.inf), np.full(k, -np.inf)
    np.minimum.at(first, who, range_reduce(np.minimum, part.kern_first, lo, hi, np.inf)[owned])
    np.maximum.at(last, who, range_reduce(np.maximum, part.kern_last, lo, hi, -np.inf)[owned])
    return kern, first, last


def range_reduce(
    ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray, empty: float
) -> np.ndarray:
    """``ufunc`` over ``values[lo:hi]`` for each pair (``empty`` where lo == hi)."""
    out = np.full(len(lo), empty)
    live = hi > lo
    if live.any():
        padded = np.append(values, empty)  # so every ``hi`` is a valid reduceat index
        idx = np.column_stack((lo[live], hi[live])).ravel()
        out[live] = ufunc.reduceat(padded, idx)[::2]
    return out


def busy_within(fe: FileEvents, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Time in each ``[start, end]`` covered by at least one kernel (any device or stream)."""
    if not len(fe.kern_ts) or not len(start):
        return np.zeros(len(start))
    k_start = np.frombuffer(fe.kern_ts, np.float64)
    return covered(k_start, k_start + np.frombuffer(fe.kern_dur, np.float64), start, end)
