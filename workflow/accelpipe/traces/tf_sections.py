"""TensorFlow trace viewer sections and steps, in the kineto summary's terms.

The rule (what each summary field means for a TF trace):

* Steps are the step markers: host events with ``args.step_num``, the TraceMe argument
  xprof groups steps by (``Trace("train", step_num=n, _r=1)`` in the TF engine, any name
  elsewhere). A marker inside another marker of the same process is not a step of its own
  (the outer one is). A step's time is the marker's duration; the incomplete-last-step rule
  of ``traces.steps`` applies as for ``ProfilerStep#N``.
* ``loader_first``, ``loader_next``, ``step`` are ``tf.profiler.experimental.Trace``
  events on the host: one instance per event, one interval (host busy time = host span =
  its duration, as a kineto ``record_function``).
* ``forward``, ``loss``, ``backward``, ``optimizer_step`` are name scopes inside the
  ``tf.function`` (a ``Trace`` there records nothing at run time): the host ops whose
  ``args.long_name`` starts with ``forward/``, ``loss/``, ``backward/`` or
  ``gradient_tape/`` (TF's name for the gradient ops: backward), ``optimizer_step/``.
  One instance per section and step (xprof's ``args.group_id``; ops without one go to the
  step marker that contains them, else to one instance of their own). Its host busy time
  is the time its ops run (the union of their intervals, on any executor thread: ops that
  run at once count once), its host span first op start to last op end (``intervals``).
  The span is no measure of a section's cost: Adam's variable reads, for one, start while
  ``forward`` runs, so ``optimizer_step``'s span covers most of the step.
* The step breakdown (``intervals.step_breakdown``) splits each step among these sections'
  intervals (the Trace events and the scoped ops), so its parts add up to the step.
* GPU rows (``/device:GPU:N`` processes, ``Stream #N`` lines): kernels count for the section
  of their ``long_name`` / ``tf_op`` scope and their step group. ``kernel_ms`` = summed
  kernel durations, ``kernel_span_ms`` = first kernel start to last kernel end,
  ``device_busy_ms`` = time at least one of the section's own kernels ran (for the host
  sections, as in kineto: time inside the event covered by any kernel). The derived lines
  (``TensorFlow Name Scope``, ``Framework Name Scope``, ``TensorFlow Ops``, ``XLA Ops``,
  ``Steps``, ...) repeat the streams' time and are not read. Kernels are joined by scope, not
  by launch correlation, so ``kernels_without_launch`` is 0.
* With XLA (``jit_compile=True``) the step runs as one compiled function and its ops carry
  no name scopes on CPU: only the host sections exist, and the summary's ``notes`` say so.
"""

from __future__ import annotations

import numpy as np

from accelpipe.traces.intervals import busy_and_span, covered
from accelpipe.traces.join import Instances
from accelpipe.traces.tf_collect import KERNEL, MEMCPY, MEMSET, SECTION_NAMES, TFEvents

HOST_NAMES = ("loader_first", "loader_next", "step")  # name ids 0..2; op sections follow


class TFFile:
    """One TF file's figures in the form ``stats.Totals`` pools."""

    def __init__(self, tfe: TFEvents) -> None:
        self.tfe = tfe
        pids = [key[0] for key in tfe.row_keys]
        device = np.array([_is_device(tfe.process_names.get(p)) for p in pids], bool)
        stream = np.array(
            [str(tfe.thread_names.get(k, "")).startswith("Stream #") for k in tfe.row_keys], bool
        )
        self.kernel_rows = device & stream if len(pids) else np.zeros(0, bool)
        self.host_rows = ~device if len(pids) else np.zeros(0, bool)
        self.pid = np.array([hash(p) for p in pids], np.int64)  # compared for equality only
        self.gpu = any(
            "GPU" in name for name in tfe.process_names.values() if _is_device(name)
        ) and bool(self.kernel_rows.any())
        self.names = [*HOST_NAMES, *SECTION_NAMES]
        self.markers = self._markers()
        self.instances = self._instances()

    def steps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """pid, ts, dur of the steps (outermost step markers on host rows)."""
        t, keep = self.tfe, self.markers
        row = np.frombuffer(t.step_row, np.int32)[keep]
        ts = np.frombuffer(t.step_ts, np.float64)[keep]
        return self.pid[row], ts, np.frombuffer(t.step_dur, np.float64)[keep]

    def section_intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Name id, pid, start, end of every host interval of a section (the Trace events
        and the scoped ops): what the step breakdown splits each step among."""
        t = self.tfe
        h_row, h_keep, h_ids = self._host_events()
        h_ts = np.frombuffer(t.host_ts, np.float64)[h_keep]
        h_end = h_ts + np.frombuffer(t.host_dur, np.float64)[h_keep]
        o_row = np.frombuffer(t.op_row, np.int32)
        o_keep = self.host_rows[o_row] if len(o_row) else np.zeros(0, bool)
        o_ids = np.frombuffer(t.op_sec, np.int8)[o_keep].astype(np.int64) + len(HOST_NAMES)
        o_ts = np.frombuffer(t.op_ts, np.float64)[o_keep]
        o_end = o_ts + np.frombuffer(t.op_dur, np.float64)[o_keep]
        return (
            np.concatenate((h_ids, o_ids)).astype(np.int64),
            np.concatenate((self.pid[h_row[h_keep]], self.pid[o_row[o_keep]])),
            np.concatenate((h_ts, o_ts)),
            np.concatenate((h_end, o_end)),
        )

    def activity(self) -> dict[str, list]:
        """Count and total µs of kernels, memcpys and memsets on the stream lines."""
        t = self.tfe
        row = np.frombuffer(t.dev_row, np.int32)
        on = self.kernel_rows[row] if len(row) else np.zeros(0, bool)
        kind = np.frombuffer(t.dev_kind, np.int8)[on]
        dur = np.frombuffer(t.dev_dur, np.float64)[on]
        keys = {KERNEL: "kernel", MEMCPY: "gpu_memcpy", MEMSET: "gpu_memset"}
        return {
            name: [int((kind == k).sum()), float(dur[kind == k].sum())] for k, name in keys.items()
        }

    def row_labels(self) -> list[str]:
        """Per row: its thread name up to ``(`` (``Stream #7``), else its tid."""
        t = self.tfe
        return [str(t.thread_names.get(k) or k[1]).split("(", 1)[0].strip() for k in t.row_keys]

    def notes(self) -> list[str]:
        t = self.tfe
        if len(t.op_sec) or not self.markers.any():
            return []
        how = "XLA-compiled step (jit_compile)" if t.xla else "no op events with a section scope"
        return [
            f"{how}: no forward/loss/backward/optimizer_step ops in the trace, so only the "
            "host sections (loader_first, loader_next, step) are reported"
        ]

    # -- building the instances ----------------------------------------------------------

    def _markers(self) -> np.ndarray:
        """Which step markers are steps: on a host row and inside no other marker of the
        same process (nested markers, e.g. Keras' inside a user's, would count a step
        twice)."""
        t = self.tfe
        row = np.frombuffer(t.step_row, np.int32)
        keep = self.host_rows[row] if len(row) else np.zeros(0, bool)
        pid = self.pid[row] if len(row) else np.zeros(0, np.int64)
        ts = np.frombuffer(t.step_ts, np.float64)
        end = ts + np.frombuffer(t.step_dur, np.float64)
        reach: dict[int, float] = {}
        for i in np.lexsort((-end, ts, pid)).tolist():  # by pid, start; outer first
            if not keep[i]:
                continue
            p = int(pid[i])
            if end[i] <= reach.get(p, -np.inf):
                keep[i] = False
            else:
                reach[p] = max(reach.get(p, -np.inf), float(end[i]))
        return keep

    def _host_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows of the host section events, which of them are on host rows, and the name ids
        of those."""
        t = self.tfe
        row = np.frombuffer(t.host_row, np.int32)
        keep = self.host_rows[row] if len(row) else np.zeros(0, bool)
        ids = np.array([HOST_NAMES.index(n) for n in t.host_name], np.int64)[keep]
        return row, keep, ids

    def _instances(self) -> Instances:
        t = self.tfe
        kern_ts, kern_end = self._all_kernels()
        # Host sections: one instance per Trace event, one interval each.
        h_row, h_keep, h_ids = self._host_events()
        h_ts = np.frombuffer(t.host_ts, np.float64)[h_keep]
        h_end = h_ts + np.frombuffer(t.host_dur, np.float64)[h_keep]
        one = busy_and_span(np.arange(len(h_ts)), h_ts, h_end)
        zero = np.zeros(len(h_ts))
        cols: list[tuple[np.ndarray, ...]] = [
            (h_ids, self.pid[h_row[h_keep]], h_ts, one.busy, one.last - one.first, zero, zero,
             covered(kern_ts, kern_end, h_ts, h_end), np.zeros(len(h_ts), bool)),
        ]  # fmt: skip
        cols.append(self._op_instances())
        fields = [np.concatenate(c) for c in zip(*cols, strict=True)]
        fields[0] = fields[0].astype(np.int32)
        fields[1] = fields[1].astype(np.int64)
        return Instances(*fields)

    def _all_kernels(self) -> tuple[np.ndarray, np.ndarray]:
        t = self.tfe
        row = np.frombuffer(t.dev_row, np.int32)
        on = self.kernel_rows[row] if len(row) else np.zeros(0, bool)
        on &= np.frombuffer(t.dev_kind, np.int8) == KERNEL
        ts = np.frombuffer(t.dev_ts, np.float64)[on]
        return ts, ts + np.frombuffer(t.dev_dur, np.float64)[on]

    def _op_instances(self) -> tuple[np.ndarray, ...]:
        """Per (section, step group): its host ops' busy time and span, and its kernels'
        summed time, span and busy time; the columns of ``Instances``."""
        t = self.tfe
        row = np.frombuffer(t.op_row, np.int32)
        sec = np.frombuffer(t.op_sec, np.int8).astype(np.int64)
        ts = np.frombuffer(t.op_ts, np.float64)
        end = ts + np.frombuffer(t.op_dur, np.float64)
        group = self._groups(np.frombuffer(t.op_group, np.int64), ts)
        is_kern = self.kernel_rows[row] if len(row) else np.zeros(0, bool)
        is_host = self.host_rows[row] if len(row) else np.zeros(0, bool)
        key = (group + 1) * len(SECTION_NAMES) + sec  # group >= -1: one key per (sec, group)
        host = busy_and_span(key[is_host], ts[is_host], end[is_host])
        kern = busy_and_span(key[is_kern], ts[is_kern], end[is_kern])
        keys = np.union1d(host.key, kern.key)
        n = len(keys)
        h_at, k_at = np.searchsorted(keys, host.key), np.searchsorted(keys, kern.key)
        # Host figures; a kernel-only instance (its host ops carry no scope) has none. Its
        # start and process: those of its first host op, else of its first kernel.
        start, busy, span, pid = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, np.int64)
        start[k_at], pid[k_at] = kern.first, self.pid[row[is_kern][kern.head]]
        start[h_at], pid[h_at] = host.first, self.pid[row[is_host][host.head]]
        busy[h_at], span[h_at] = host.busy, host.last - host.first
        k_sum, k_span, k_busy, has = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, bool)
        k_sum[k_at], k_span[k_at], k_busy[k_at] = kern.total, kern.last - kern.first, kern.busy
        has[k_at] = True
        ids = keys % len(SECTION_NAMES) + len(HOST_NAMES)
        return ids, pid, start, busy, span, k_sum, k_span, k_busy, has

    def _groups(self, group: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Step group per op: its group_id, else that of the step marker containing it
        (else -1: one instance for all such ops)."""
        missing = group < 0
        if not missing.any() or not self.markers.any():
            return group
        keep = self.markers
        s_ts = np.frombuffer(self.tfe.step_ts, np.float64)[keep]
        s_end = s_ts + np.frombuffer(self.tfe.step_dur, np.float64)[keep]
        s_group = np.frombuffer(self.tfe.step_group, np.int64)[keep]
        order = np.argsort(s_ts)
        i = np.searchsorted(s_ts[order], ts[missing], side="right") - 1
        ok = (i >= 0) & (ts[missing] <= s_end[order][np.maximum(i, 0)])
        found = np.where(ok, s_group[order][np.maximum(i, 0)], -1)
        # A step marker without a group_id: key by its index, past any real group id.
        found = np.where(ok & (found < 0), (1 << 40) + order[np.maximum(i, 0)], found)
        group = group.copy()
        group[missing] = found
        return group


def _is_device(name: str | None) -> bool:
    return bool(name) and name.startswith("/device:")  # type: ignore[union-attr]
