"""TensorFlow trace viewer sections and steps, in the kineto summary's terms.

The rule (what each summary field means for a TF trace):

* Steps are the ``train <n>`` events (``Trace("train", step_num=n, _r=1)``): a step's time
  is the event's duration; the incomplete-last-step rule of ``traces.steps`` applies as for
  ``ProfilerStep#N``.
* ``loader_first``, ``loader_next``, ``step`` are ``tf.profiler.experimental.Trace``
  events on the host: one instance per event, ``cpu_ms`` = its duration (as a kineto
  ``record_function``).
* ``forward``, ``loss``, ``backward``, ``optimizer_step`` are name scopes inside the
  ``tf.function`` (a ``Trace`` there records nothing at run time): the host ops whose
  ``args.long_name`` starts with ``forward/``, ``loss/``, ``backward/`` or
  ``gradient_tape/`` (TF's name for the gradient ops: backward), ``optimizer_step/``.
  One instance per section and step (xprof's ``args.group_id``; ops without one go to the
  ``train <n>`` event that contains them, else to one instance of their own), and
  ``cpu_ms`` = its *span*, first op start to last op end: the wall time a
  ``record_function`` around that part of the step would measure, which is what kineto's
  ``cpu_ms`` is. It is not the sum of op durations (ops run on several executor threads at
  once, so that sum can exceed the wall time), and the spans of sections may overlap (the
  executor interleaves gradient and optimizer ops).
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

from accelpipe.traces.join import Instances
from accelpipe.traces.tf_collect import KERNEL, MEMCPY, MEMSET, SECTION_NAMES, TFEvents


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
        self.names = ["loader_first", "loader_next", "step", *SECTION_NAMES]
        self.instances = self._instances()

    def steps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """pid, ts, dur of the ``train <n>`` events on host rows."""
        t = self.tfe
        row = np.frombuffer(t.step_row, np.int32)
        keep = self.host_rows[row] if len(row) else np.zeros(0, bool)
        ts = np.frombuffer(t.step_ts, np.float64)[keep]
        return self.pid[row[keep]], ts, np.frombuffer(t.step_dur, np.float64)[keep]

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

    def notes(self) -> list[str]:
        t = self.tfe
        if len(t.op_sec) or not len(t.step_ts):
            return []
        how = "XLA-compiled step (jit_compile)" if t.xla else "no op events with a section scope"
        return [
            f"{how}: no forward/loss/backward/optimizer_step ops in the trace, so only the "
            "host sections (loader_first, loader_next, step) are reported"
        ]

    # -- building the instances ----------------------------------------------------------

    def _instances(self) -> Instances:
        t = self.tfe
        kern_ts, kern_end = self._all_kernels()
        # Host sections: one instance per Trace event.
        h_row = np.frombuffer(t.host_row, np.int32)
        h_keep = self.host_rows[h_row] if len(h_row) else np.zeros(0, bool)
        h_ids = np.array([self.names.index(n) for n in t.host_name], np.int32)[h_keep]
        h_ts = np.frombuffer(t.host_ts, np.float64)[h_keep]
        h_dur = np.frombuffer(t.host_dur, np.float64)[h_keep]
        h_busy = covered(kern_ts, kern_end, h_ts, h_ts + h_dur)
        cols = [(h_ids, self.pid[h_row[h_keep]], h_ts, h_dur, None, None, h_busy)]
        cols += self._op_instances()
        zero = np.zeros(0)
        name = np.concatenate([c[0] for c in cols]).astype(np.int32)
        pid = np.concatenate([c[1] for c in cols]).astype(np.int64)
        start = np.concatenate([c[2] for c in cols])
        cpu = np.concatenate([c[3] for c in cols])
        kern = np.concatenate([c[4] if c[4] is not None else np.zeros(len(c[0])) for c in cols])
        span = np.concatenate([c[5] if c[5] is not None else np.zeros(len(c[0])) for c in cols])
        busy = np.concatenate([c[6] for c in cols]) if cols else zero
        has = np.concatenate([np.full(len(c[0]), c[4] is not None) for c in cols])
        return Instances(name, pid, start, cpu, kern, span, busy, has)

    def _all_kernels(self) -> tuple[np.ndarray, np.ndarray]:
        t = self.tfe
        row = np.frombuffer(t.dev_row, np.int32)
        on = self.kernel_rows[row] if len(row) else np.zeros(0, bool)
        on &= np.frombuffer(t.dev_kind, np.int8) == KERNEL
        ts = np.frombuffer(t.dev_ts, np.float64)[on]
        return ts, ts + np.frombuffer(t.dev_dur, np.float64)[on]

    def _op_instances(self) -> list[tuple]:
        """Per (section, step group): host op span, and the group's kernels' figures."""
        t = self.tfe
        if not len(t.op_sec):
            return []
        row = np.frombuffer(t.op_row, np.int32)
        sec = np.frombuffer(t.op_sec, np.int8).astype(np.int64)
        ts = np.frombuffer(t.op_ts, np.float64)
        end = ts + np.frombuffer(t.op_dur, np.float64)
        group = self._groups(np.frombuffer(t.op_group, np.int64), ts)
        is_kern, is_host = self.kernel_rows[row], self.host_rows[row]
        both = is_host | is_kern
        keys = sorted(set(zip(sec[both].tolist(), group[both].tolist(), strict=True)))
        out = []
        for s, g in keys:
            mine = (sec == s) & (group == g)
            host, kern = mine & is_host, mine & is_kern
            if host.any():
                first, cpu = ts[host].min(), end[host].max() - ts[host].min()
                pid = self.pid[row[host]][0]
            else:  # kernels whose host ops carry no scope: no CPU window to report
                first, cpu, pid = ts[kern].min(), 0.0, self.pid[row[kern]][0]
            if kern.any():
                k_sum = float((end[kern] - ts[kern]).sum())
                k_span = float(end[kern].max() - ts[kern].min())
                k_busy = union_length(ts[kern], end[kern])
                k = (np.array([k_sum]), np.array([k_span]))
            else:
                k, k_busy = (None, None), 0.0
            ids = np.array([3 + s], np.int32)
            out.append((ids, np.array([pid]), np.array([first]), np.array([cpu]), *k,
                        np.array([k_busy])))  # fmt: skip
        return out

    def _groups(self, group: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Step group per op: its group_id, else that of the ``train`` event containing it
        (else -1: one instance for all such ops)."""
        missing = group < 0
        if not missing.any() or not len(self.tfe.step_ts):
            return group
        s_ts = np.frombuffer(self.tfe.step_ts, np.float64)
        s_end = s_ts + np.frombuffer(self.tfe.step_dur, np.float64)
        s_group = np.frombuffer(self.tfe.step_group, np.int64)
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


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of intervals."""
    if not len(start):
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    opens = np.concatenate(([0], np.flatnonzero(s[1:] > reach[:-1]) + 1))
    return float((np.maximum.reduceat(e, opens) - s[opens]).sum())


def covered(k_start: np.ndarray, k_end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window ``[lo, hi]``: time covered by at least one interval ``[k_start, k_end]``."""
    if not len(k_start) or not len(lo):
        return np.zeros(len(lo))
    order = np.argsort(k_start, kind="stable")
    s, e = k_start[order], k_end[order]
    reach = np.maximum.accumulate(e)
    opens = np.concatenate(([0], np.flatnonzero(s[1:] > reach[:-1]) + 1))
    b_start, b_end = s[opens], np.maximum.reduceat(e, opens)
    before = np.concatenate(([0.0], np.cumsum(b_end - b_start)))

    def upto(t: np.ndarray) -> np.ndarray:  # covered time in (-inf, t]
        k = np.searchsorted(b_start, t, side="right")
        over = np.where(k > 0, b_end[np.maximum(k - 1, 0)] - t, 0.0)
        return before[k] - np.maximum(over, 0.0)

    return np.maximum(upto(hi) - upto(lo), 0.0)
