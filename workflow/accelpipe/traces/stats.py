"""Pooling the files of one summary and turning per-instance µs into the summary's
millisecond statistics."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from accelpipe.traces import classify, steps, structure
from accelpipe.traces.collect import FileEvents
from accelpipe.traces.device import (
    SHORT_KERNEL_US,
    RankDevice,
    add_file,
    from_kineto,
    from_tf,
    rank_summary,
)
from accelpipe.traces.intervals import FIRST, step_breakdown
from accelpipe.traces.join import Instances, join_file
from accelpipe.traces.memory import MemoryPool
from accelpipe.traces.tf_collect import TFEvents
from accelpipe.traces.tf_sections import TFFile


def stats_ms(values_us: Sequence[float] | np.ndarray) -> dict[str, float]:
    """min / mean / median / max / total in ms, rounded to 1 ns."""
    v = np.asarray(values_us, dtype=np.float64) / 1000.0
    return {
        "min": round(float(v.min()), 6),
        "mean": round(float(v.mean()), 6),
        "median": round(float(np.median(v)), 6),
        "max": round(float(v.max()), 6),
        "total": round(float(v.sum()), 6),
    }


class SectionPool:
    """Per-instance µs per section name, accumulated across files."""

    def __init__(self) -> None:
        self.columns: dict[str, dict[str, array]] = {}
        self.with_kernels: set[str] = set()
        self.with_busy: set[str] = set()

    def extend(self, names: list[str], inst: Instances) -> None:
        order = np.argsort(inst.name, kind="stable")
        ids = inst.name[order]
        cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
        for rows in np.split(order, cuts) if len(order) else []:
            name = names[int(inst.name[rows[0]])]
            cols = self.columns.setdefault(name, {k: array("d") for k in _COLUMNS})
            for key in _COLUMNS:
                cols[key].extend(getattr(inst, key)[rows].tolist())
            if inst.has_kernels[rows].any():
                self.with_kernels.add(name)
            if (inst.device_busy[rows] > 0).any():
                self.with_busy.add(name)

    def summary(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        # Most expensive sections first: the order readers scan the table and plot in.
        for name in sorted(self.columns, key=lambda k: (-sum(self.columns[k]["host_busy"]), k)):
            cols = self.columns[name]
            kernels = name in self.with_kernels
            out[name] = {
                "count": len(cols["host_busy"]),
                "host_busy_ms": stats_ms(cols["host_busy"]),
                "host_span_ms": stats_ms(cols["host_span"]),
                "kernel_ms": stats_ms(cols["kernel"]) if kernels else None,
                "kernel_span_ms": stats_ms(cols["kernel_span"]) if kernels else None,
                "device_busy_ms": (
                    stats_ms(cols["device_busy"]) if name in self.with_busy else None
                ),
            }
        return out


_COLUMNS = ("host_busy", "host_span", "kernel", "kernel_span", "device_busy")


class Totals:
    """Everything pooled across the trace files of one summary."""

    def __init__(self, short_kernel_us: float = SHORT_KERNEL_US) -> None:
        self.short_kernel_us = short_kernel_us
        self.ranks: dict[int, RankDevice] = {}  # the device side, per rank (traces.device)
        self.sections = SectionPool()
        self.memory = MemoryPool()
        self.steps: list[steps.Step] = []
        self.hints: set[str] = set()
        self.activity = {k: [0, 0.0] for k in classify.ACTIVITY_KINDS}
        self.formats: list[str] = []
        self.bytes = self.events = self.orphans = self.nonfinite = 0
        self.notes: list[str] = []

    def add(self, fe: FileEvents, nbytes: int, fmt: str, ops: structure.Ops | None = None) -> None:
        """One file; ``ops`` (its second read, ``structure.read_ops``) for a file whose
        steps are split by their structure (``structure.wanted``)."""
        self.bytes += nbytes
        self.events += fe.events
        self.nonfinite += fe.nonfinite + fe.memory.nonfinite
        self.hints |= fe.hints
        self.formats.append(fmt)
        if fmt == "tf-trace-viewer":
            self._add_tf(fe.tf or TFEvents())
            return
        for kind, (count, dur) in fe.activity().items():
            self.activity[kind][0] += count
            self.activity[kind][1] += dur
        if len(fe.kern_ts) or len(fe.copy_ts):
            rank = self.ranks.setdefault(fe.rank, RankDevice())
            add_file(rank, from_kineto(fe), self.short_kernel_us)
        inst, orphans = join_file(fe)
        self.orphans += orphans
        names = list(fe.names)  # ids are insertion order
        self.sections.extend(names, inst)
        self.memory.extend(names, inst, fe.memory, fe.pid_of)
        # A record_function is one interval: the breakdown splits steps among them.
        intervals = (inst.name, inst.pid, inst.start, inst.start + inst.host_span)
        self._add_steps(
            (
                fe.pid_of(fe.step_thread),
                np.frombuffer(fe.step_ts, np.float64),
                np.frombuffer(fe.step_dur, np.float64),
            ),
            inst,
            names,
            intervals,
            structure.layout(fe, ops, intervals, names) if ops is not None else None,
        )

    def _add_steps(
        self,
        step_cols: tuple[np.ndarray, np.ndarray, np.ndarray],
        inst: Instances,
        names: list[str],
        intervals: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        layout: structure.Layout | None = None,
    ) -> None:
        """One file's steps, each with the sections inside it and its breakdown: among
        the sections, or by the steps' structure (``layout``)."""
        pid, ts, dur = step_cols
        if layout is None:
            parts, _no_section = step_breakdown(pid, ts, ts + dur, *intervals, names)
            basis = steps.SECTIONS
        else:
            split = (layout.name, layout.pid, layout.start, layout.end, layout.names)
            parts, _no_section = step_breakdown(
                pid, ts, ts + dur, *split, structure.PRECEDENCE, layout.fill
            )
            basis = steps.STRUCTURE
        contents = [names[i] for i in inst.name.tolist()]
        self.steps += steps.file_steps(pid, ts, dur, inst.pid, inst.start, contents, parts, basis)

    def _add_tf(self, tfe: TFEvents) -> None:
        """A TensorFlow trace viewer file: sections and steps by ``tf_sections``' rule."""
        tf = TFFile(tfe)
        self.nonfinite += tfe.nonfinite
        self.hints.add("tf-gpu" if tf.gpu else "tf-cpu")
        for kind, (count, dur) in tf.activity().items():
            self.activity[kind][0] += count
            self.activity[kind][1] += dur
        for note in [TF_NOTE, *tf.notes()]:
            if note not in self.notes:
                self.notes.append(note)
        if tf.gpu:  # rank 0: a TF trace viewer file says no rank
            cols = from_tf(tfe, tf.kernel_rows, tf.row_labels())
            add_file(self.ranks.setdefault(0, RankDevice()), cols, self.short_kernel_us)
        inst = tf.instances
        self.sections.extend(tf.names, inst)
        self._add_steps(tf.steps(), inst, tf.names, tf.section_intervals())

    def _complete(self) -> list[steps.Step]:
        return [s for s, k in zip(self.steps, steps.complete(self.steps), strict=True) if k]

    def step_summary(self) -> dict | None:
        if not self.steps:
            return None
        durations = [s.dur for s in self._complete()]
        return {
            "count": len(durations),
            "ms": stats_ms(durations) if durations else None,
            "incomplete_left_out": len(self.steps) - len(durations),
        }

    def breakdown_summary(self) -> dict | None:
        """The mean complete step split by ``intervals.step_breakdown``: ms per step given
        to each section (``FIRST`` or the structure's ``PARTS`` in order, then the largest
        first) and to none. The parts and ``no_section_ms`` add up to ``step_ms``; ``basis``
        says what the steps were split by (``sections``, ``structure``, or ``mixed`` with
        ``steps_by_basis``); None without a complete step."""
        done = self._complete()
        if not done:
            return None
        n = len(done)
        total: dict[str, float] = {}
        bases: dict[str, int] = {}
        for step in done:
            bases[step.basis] = bases.get(step.basis, 0) + 1
            for name, us in step.parts.items():
                total[name] = total.get(name, 0.0) + us
        order = [name for name in (*FIRST, *structure.PARTS) if name in total]
        order += sorted(set(total) - set(order), key=lambda k: (-total[k], k))
        parts = {name: round(total[name] / n / 1e3, 6) for name in order}
        step_ms = stats_ms([s.dur for s in done])["mean"]  # the same figure as steps.ms.mean
        return {
            "steps": n,
            "step_ms": step_ms,
            "sections_ms": parts,
            # The rest of the step, so that the parts add up to it after rounding too (this
            # takes up the parts' rounding to 1 ns: a few ns at most).
            "no_section_ms": round(step_ms - sum(parts.values()), 6),
            "basis": next(iter(bases)) if len(bases) == 1 else "mixed",
            "steps_by_basis": dict(sorted(bases.items())),
        }

    def summary(self, paths: Sequence[str | Path]) -> dict:
        activity = {
            k: {"count": c, "total_ms": round(d / 1e3, 6)} for k, (c, d) in self.activity.items()
        }
        sections = self.sections.summary()
        return {
            "traces": [str(p) for p in paths],
            "format": self.formats[0] if len(set(self.formats)) == 1 else sorted(self.formats),
            "bytes": self.bytes,
            "events": self.events,
            "device": _device(self.hints),
            "steps": self.step_summary(),
            "step_breakdown": self.breakdown_summary(),
            "sections": sections,
            "memory": self.memory.summary(list(sections)),
            "device_activity": {**activity, "kernels_without_launch": self.orphans},
            "device_ranks": {
                str(r): rank_summary(self.ranks[r], self.short_kernel_us)
                for r in sorted(self.ranks)
            }
            or None,
            "skipped_events": {"non_finite_time": self.nonfinite},
            "notes": self.notes,
        }


TF_NOTE = (
    "TensorFlow trace: steps are the events with a step_num (e.g. train <n>); "
    "forward/loss/backward/optimizer_step are op name scopes (gradient_tape/ counts as "
    "backward), one instance per step: host busy = the time its ops run (concurrent ops "
    "once), host span = first op start to last op end"
)


def _device(hints: set[str]) -> str:
    """A TF trace: gpu when it has GPU stream rows, else cpu; kineto: from its hints."""
    if "tf-gpu" in hints:
        return "gpu"
    if "tf-cpu" in hints and len(hints) == 1:
        return "cpu"
    return classify.infer_device(hints - {"tf-cpu"})
