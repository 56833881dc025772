"""The device side of a trace as HTA (HolisticTraceAnalysis) reads it, per rank: kineto
files (``from_kineto``) and TF trace viewer files (``from_tf``, rank 0) alike.

A file's device ops are its kernels, memcpys and memsets (``cuda_sync`` rows are waits, not
activity: HTA counts them, see docs/traces.md). Each op has a kind from its name
(``classify.op_kind``: computation, communication, memory, other). Everything here works on
the file's columns with sorted numpy arrays; nothing loops over events in Python.

* ``kernel_breakdown``: per kind, count, summed duration and its share of all ops' summed
  duration; ``kernel_type_ms``: HTA's kernel type breakdown, the device-busy time split into
  exclusive classes (``computation``, ``computation overlapping communication``, ...) of the
  union of each kind's intervals; ``top_kernels``: per kind, the names with the most time.
* ``temporal_breakdown`` (HTA's): the window is the first op's start to the last op's end
  (``kernel_time``); ``idle_time`` = window - union of all ops; ``compute_time`` = union of
  computation kernels; ``non_compute_time`` = the rest.
* ``idle_time_breakdown`` (HTA's), per stream: each gap between an op and the previous op of
  its stream (start minus the previous op's end) is ``host_wait`` when the op's runtime call
  (same correlation) started after the previous op ended, else ``kernel_wait`` when it is
  under ``CONSECUTIVE_KERNEL_DELAY_US``, else ``other``.
* ``comp_comm_overlap_ratio`` (HTA's): the time communication and computation kernels both
  run over the union of communication kernels.
* ``kernel_launches``: launch delay = a kernel's start minus its launch call's start (HTA
  measures from the call's end and clips at 0), for calls that launch one kernel
  (``classify.is_kernel_launch``); short kernels: kernels shorter than ``short_kernel_us``.

Several files of one rank (successive profiler cycles) add up: windows, idle and busy times
are summed, so the gaps between cycles never count as idle.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelpipe.traces import classify, tf_collect
from accelpipe.traces.collect import FileEvents
from accelpipe.traces.intervals import merged
from accelpipe.traces.tf_collect import TFEvents

CONSECUTIVE_KERNEL_DELAY_US = 30.0  # HTA's default for get_idle_time_breakdown
SHORT_KERNEL_US = 10.0  # summarize-trace's default for short kernels
TOP_KERNELS = 10
KINDS = classify.DEVICE_KINDS
_BITS = {classify.COMPUTATION: 1, classify.COMMUNICATION: 2, classify.MEMORY: 4}
_IDLE = ("host_wait", "kernel_wait", "other")


@dataclass
class RankDevice:
    """One rank's device figures in µs, summed over its files."""

    window: float = 0.0
    busy: float = 0.0
    compute: float = 0.0
    comm_busy: float = 0.0
    comm_comp_overlap: float = 0.0
    classes: np.ndarray = field(default_factory=lambda: np.zeros(8))
    kinds: dict[str, list[float]] = field(default_factory=dict)  # kind: [count, total]
    names: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # count, sum, min, max
    idle: dict[str, np.ndarray] = field(default_factory=dict)  # stream: host, kernel, other
    delays: list[np.ndarray] = field(default_factory=list)
    kernels: list[float] = field(default_factory=lambda: [0, 0.0, 0, 0.0])  # n, µs, short n, µs


@dataclass
class Columns:
    """One file's device ops (kernels first, then memcpys/memsets) and runtime calls, in
    whichever producer's form: ``from_kineto``, ``from_tf``."""

    ts: np.ndarray
    dur: np.ndarray
    name: np.ndarray  # ids into ``names``
    names: list[str]
    thread: np.ndarray  # ids into ``labels``
    labels: list[str]  # each thread's stream label
    corr: np.ndarray  # -1: none
    n_kernels: int
    launch_corr: np.ndarray
    launch_ts: np.ndarray
    launch_is_kernel: np.ndarray  # bool


@dataclass
class _Ops:
    """A file's device ops, sorted by start."""

    ts: np.ndarray
    end: np.ndarray
    kind: np.ndarray  # index into KINDS
    name: np.ndarray  # Columns.names ids
    thread: np.ndarray
    corr: np.ndarray
    is_kernel: np.ndarray


def from_kineto(fe: FileEvents) -> Columns:
    def both(a: Any, b: Any, dtype: Any) -> np.ndarray:
        return np.concatenate((np.frombuffer(a, dtype), np.frombuffer(b, dtype)))

    return Columns(
        ts=both(fe.kern_ts, fe.copy_ts, np.float64),
        dur=both(fe.kern_dur, fe.copy_dur, np.float64),
        name=both(fe.kern_name, fe.copy_name, np.int32),
        names=list(fe.op_names),
        thread=both(fe.kern_thread, fe.copy_thread, np.int32),
        labels=_stream_labels(list(fe.threads)),
        corr=both(fe.kern_corr, fe.copy_corr, np.int64),
        n_kernels=len(fe.kern_ts),
        launch_corr=np.frombuffer(fe.launch_corr, np.int64),
        launch_ts=np.frombuffer(fe.launch_ts, np.float64),
        launch_is_kernel=np.frombuffer(fe.launch_is_kernel, np.int8) == 1,
    )


def from_tf(tfe: TFEvents, device_rows: np.ndarray, row_labels: list[str]) -> Columns:
    """A TF trace viewer file: correlated events on device stream rows are the ops (kind
    from the name: ``MemcpyH2D`` ... are memory), those on host rows the runtime calls."""
    row = np.frombuffer(tfe.dev_row, np.int32)
    on = device_rows[row] if len(row) else np.zeros(0, bool)
    copy = np.frombuffer(tfe.dev_kind, np.int8) != tf_collect.KERNEL
    order = np.concatenate((np.flatnonzero(on & ~copy), np.flatnonzero(on & copy)))
    corr = np.frombuffer(tfe.dev_corr, np.int64)
    names = np.frombuffer(tfe.dev_name, np.int32)
    launch = ~on & (corr >= 0)
    is_launch = np.array([classify.is_kernel_launch(n) for n in tfe.dev_names] or [False])
    return Columns(
        ts=np.frombuffer(tfe.dev_ts, np.float64)[order],
        dur=np.frombuffer(tfe.dev_dur, np.float64)[order],
        name=names[order],
        names=list(tfe.dev_names),
        thread=row[order],
        labels=row_labels,
        corr=corr[order],
        n_kernels=int((on & ~copy).sum()),
        launch_corr=corr[launch],
        launch_ts=np.frombuffer(tfe.dev_ts, np.float64)[launch],
        launch_is_kernel=is_launch[names[launch]],
    )


def _ops(cols: Columns) -> _Ops:
    kinds = np.array([KINDS.index(classify.op_kind(n)) for n in cols.names] or [0], np.int8)
    kind = kinds[cols.name]
    kind[cols.n_kernels :] = KINDS.index(classify.MEMORY)  # a memcpy or memset, any name
    is_kernel = np.arange(len(cols.ts)) < cols.n_kernels
    order = np.argsort(cols.ts, kind="stable")
    ts = cols.ts[order]
    return _Ops(
        ts,
        ts + np.maximum(cols.dur[order], 0.0),
        kind[order],
        cols.name[order],
        cols.thread[order],
        cols.corr[order],
        is_kernel[order],
    )


def add_file(rank: RankDevice, cols: Columns, short_kernel_us: float) -> None:
    """Add one file's device figures to its rank's."""
    if not len(cols.ts):
        return
    ops = _ops(cols)
    rank.window += float(ops.end.max() - ops.ts[0])
    lo, hi = merged(ops.ts, ops.end)
    rank.busy += float((hi - lo).sum())
    _add_kinds(rank, ops)
    _add_names(rank, ops, cols.names)
    launch_ts, launch_kernel = _launch_lookup(cols, ops.corr)
    _add_idle(rank, ops, launch_ts, cols.labels)
    k = ops.is_kernel
    dur = ops.end[k] - ops.ts[k]
    short = dur < short_kernel_us
    counts = rank.kernels
    counts[0] += int(k.sum())
    counts[1] += float(dur.sum())
    counts[2] += int(short.sum())
    counts[3] += float(dur[short].sum())
    delay = (ops.ts - launch_ts)[k & launch_kernel]
    if len(delay):
        rank.delays.append(delay)


def _add_kinds(rank: RankDevice, ops: _Ops) -> None:
    """Counts and totals per kind, the exclusive overlap classes, compute and comm time."""
    dur = ops.end - ops.ts
    times, steps = [], []
    for i, kind in enumerate(KINDS):
        sel = ops.kind == i
        entry = rank.kinds.setdefault(kind, [0, 0.0])
        entry[0] += int(sel.sum())
        entry[1] += float(dur[sel].sum())
        if kind in _BITS and sel.any():
            s, e = merged(ops.ts[sel], ops.end[sel])
            busy = float((e - s).sum())
            if kind == classify.COMPUTATION:
                rank.compute += busy
            elif kind == classify.COMMUNICATION:
                rank.comm_busy += busy
            times += [s, e]
            steps += [np.full(len(s), _BITS[kind]), np.full(len(e), -_BITS[kind])]
    if not times:
        return
    t, v = np.concatenate(times), np.concatenate(steps)
    order = np.argsort(t, kind="stable")
    t, running = t[order], np.cumsum(v[order])
    classes = np.bincount(running[:-1], np.diff(t), minlength=8)[:8]
    rank.classes += classes
    both = _BITS[classify.COMPUTATION] | _BITS[classify.COMMUNICATION]
    rank.comm_comp_overlap += float(sum(classes[c] for c in range(8) if c & both == both))


def _add_names(rank: RankDevice, ops: _Ops, names: list[str]) -> None:
    """Per (kind, name): count, summed, min and max duration."""
    dur = ops.end - ops.ts
    key = ops.kind.astype(np.int64) * max(len(names), 1) + ops.name
    uniq, inv = np.unique(key, return_inverse=True)
    count = np.bincount(inv)
    total = np.bincount(inv, dur)
    low = np.full(len(uniq), np.inf)
    high = np.full(len(uniq), -np.inf)
    np.minimum.at(low, inv, dur)
    np.maximum.at(high, inv, dur)
    width = max(len(names), 1)
    for u, c, s, a, b in zip(uniq.tolist(), count, total, low, high, strict=True):
        slot = (KINDS[u // width], names[u % width])
        entry = rank.names.get(slot)
        if entry is None:
            rank.names[slot] = [int(c), float(s), float(a), float(b)]
        else:
            entry[0] += int(c)
            entry[1] += float(s)
            entry[2] = min(entry[2], float(a))
            entry[3] = max(entry[3], float(b))


def _launch_lookup(cols: Columns, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per op: its runtime call's start (NaN without one; the first call of a correlation)
    and whether that call launches one kernel."""
    start = np.full(len(corr), np.nan)
    kernel = np.zeros(len(corr), bool)
    if not len(cols.launch_corr):
        return start, kernel
    uniq, first = np.unique(cols.launch_corr, return_index=True)
    pos = np.minimum(np.searchsorted(uniq, corr), len(uniq) - 1)
    hit = (uniq[pos] == corr) & (corr >= 0)
    pick = first[pos[hit]]
    start[hit] = cols.launch_ts[pick]
    kernel[hit] = cols.launch_is_kernel[pick]
    return start, kernel


def _stream_labels(keys: list[Any]) -> list[str]:
    """A label per kineto thread id (its (pid, tid) key): its tid (a device row's tid is its
    stream), with the pid when two processes' rows share a tid."""
    tids = [k[1] if isinstance(k, tuple) else k for k in keys]
    shared = {t for t, n in Counter(map(str, tids)).items() if n > 1}
    return [
        f"{k[0]}/{t}" if str(t) in shared and isinstance(k, tuple) else str(t)
        for k, t in zip(keys, tids, strict=True)
    ]


def _add_idle(rank: RankDevice, ops: _Ops, launch_ts: np.ndarray, labels: list[str]) -> None:
    """HTA's idle time breakdown, per stream (the module docstring)."""
    order = np.lexsort((ops.end, ops.ts, ops.thread))  # by stream, start, end: any input order
    thread, ts, end, launch = ops.thread[order], ops.ts[order], ops.end[order], launch_ts[order]
    same = np.flatnonzero(thread[1:] == thread[:-1]) + 1  # ops with a previous op on the row
    prev_end = end[same - 1]
    gap = ts[same] - prev_end
    with np.errstate(invalid="ignore"):
        host = launch[same] > prev_end
    kernel = ~host & (gap < CONSECUTIVE_KERNEL_DELAY_US)
    cause = np.where(host, 0, np.where(kernel, 1, 2))
    streams = np.unique(thread)
    idx = np.searchsorted(streams, thread[same])
    sums = np.bincount(idx * 3 + cause, gap, minlength=3 * len(streams)).reshape(-1, 3)
    for s, row in zip(streams.tolist(), sums, strict=True):
        label = labels[s]
        rank.idle[label] = rank.idle.get(label, np.zeros(3)) + row


# --------------------------------------------------------------------------- summary


def _ms(us: float) -> float:
    return round(us / 1e3, 6)


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 6) if whole > 0 else None


def _class_name(bits: int) -> str:
    return " overlapping ".join(k for k, b in _BITS.items() if bits & b)


def rank_summary(rank: RankDevice, short_kernel_us: float) -> dict:
    """The summary.json figures of one rank (docs/traces.md has the table)."""
    total = sum(t for _, t in rank.kinds.values())
    idle = rank.window - rank.busy
    return {
        "kernel_breakdown": {
            kind: {"count": int(c), "total_ms": _ms(t), "share": _share(t, total)}
            for kind, (c, t) in rank.kinds.items()
        },
        "kernel_type_ms": {
            _class_name(b): _ms(float(rank.classes[b])) for b in range(1, 8) if rank.classes[b] > 0
        },
        "top_kernels": _top(rank),
        "temporal_breakdown": {
            "kernel_time_ms": _ms(rank.window),
            "idle_time_ms": _ms(idle),
            "compute_time_ms": _ms(rank.compute),
            "non_compute_time_ms": _ms(rank.window - rank.compute - idle),
            "idle_time_share": _share(idle, rank.window),
            "compute_time_share": _share(rank.compute, rank.window),
        },
        "idle_time_breakdown": {
            stream: {f"{c}_ms": _ms(float(v)) for c, v in zip(_IDLE, row, strict=True)}
            for stream, row in sorted(rank.idle.items())
        },
        "comp_comm_overlap_ratio": (
            _share(rank.comm_comp_overlap, rank.comm_busy) if rank.comm_busy > 0 else None
        ),
        "kernel_launches": _launches(rank, short_kernel_us),
    }


def _top(rank: RankDevice) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for kind in KINDS:
        rows = [(name, v) for (k, name), v in rank.names.items() if k == kind]
        rows.sort(key=lambda r: (-r[1][1], r[0]))
        if rows:
            out[kind] = [
                {
                    "name": name,
                    "count": int(c),
                    "total_ms": _ms(s),
                    "mean_ms": _ms(s / c),
                    "min_ms": _ms(a),
                    "max_ms": _ms(b),
                }
                for name, (c, s, a, b) in rows[:TOP_KERNELS]
            ]
    return out


def _launches(rank: RankDevice, short_kernel_us: float) -> dict:
    delays = np.concatenate(rank.delays) if rank.delays else np.zeros(0)
    n, total, n_short, short_total = rank.kernels
    dist = None
    if len(delays):
        p50, p90, p99 = np.percentile(delays, [50, 90, 99]).tolist()
        dist = {
            "count": len(delays),
            "p50": round(p50, 3),
            "p90": round(p90, 3),
            "p99": round(p99, 3),
            "max": round(float(delays.max()), 3),
        }
    return {
        "launch_delay_us": dist,
        "short_kernels": {
            "threshold_us": short_kernel_us,
            "count": int(n_short),
            "count_share": _share(n_short, n),
            "total_ms": _ms(short_total),
            "time_share": _share(short_total, total),
        },
    }
