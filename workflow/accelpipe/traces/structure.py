"""The step breakdown of a PyTorch trace without accelpipe's sections: the structure every
training step has.

A kineto file (one rank) none of whose annotations is an engine section (``ENGINE``) is
split by what torch itself records in each ``ProfilerStep``, in the step's process:

* **data**: ``enumerate(DataLoader)#...`` (the loader's ``__next__``);
* **forward pass**: the ops (``cpu_op``) on the step's thread that no other event of that
  thread holds (the model, the loss; ops inside an ``Optimizer.step`` or a backward node are
  theirs);
* **backward pass**: ``autograd::engine...`` events on any thread (the autograd engine runs
  the nodes on the calling thread on a CPU, on its own worker thread per device on a GPU);
* **optimizer**: ``Optimizer.step#...`` and ``Optimizer.zero_grad#...``;
* **collectives**: ``nccl:``/``gloo:``/``mpi:``/``ucc:`` annotations, ``c10d::`` ops and
  ``record_param_comms``.

The step's events, in start order, form runs of one part; a run lasts from its first event's
start to its last end (the Python between two forward ops is the forward pass's). Runs are
rule 1 of ``intervals.step_breakdown`` (``PRECEDENCE``: collectives inside backward or an
optimizer step are collectives), other annotations rule 2, and the gap before a run (from
the previous run's end, or the step's start) goes to the run's part where no section holds
it: that is the Python calling the part (``model(x)``'s module call before its first op,
``loss.backward()`` before the engine starts, ``opt.step()``'s wrapper before its
annotation). What follows the step's last run (``prof.step()``) is no section's. Python-only
work between two parts (logging, a sleep) thus counts for the part after it unless a
``record_function`` marks it.

Ops are ``cpu_op`` events, the bulk of a trace that the first read never decodes: they are
read in a second pass over the file (``read_ops``) only when the fallback is needed.
"""

from __future__ import annotations

import itertools
import re
from array import array
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson

from accelpipe.traces import reader
from accelpipe.traces.collect import FileEvents
from accelpipe.traces.intervals import FIRST, Fill

DATA, FORWARD, BACKWARD, OPTIMIZER, COLLECTIVES = (
    "data",
    "forward pass",
    "backward pass",
    "optimizer",
    "collectives",
)
PARTS = (DATA, FORWARD, BACKWARD, OPTIMIZER, COLLECTIVES)  # the order a step runs them
PRECEDENCE = (COLLECTIVES, DATA, OPTIMIZER, BACKWARD, FORWARD)
ENGINE = frozenset({*FIRST, "step"})  # the engines' section names (docs/traces.md)

_OP_RE = re.compile(rb'"cat"\s*:\s*"(?:cpu_op|Operator)"')  # Operator: torch < 1.10
_ARGS_RE = re.compile(rb'"args"\s*:')
_KEYS = frozenset({"ph", "name", "pid", "tid", "ts", "dur"})  # what an op is read for
_COLLECTIVE_RE = re.compile(r"(?:nccl|gloo|mpi|ucc):|c10d::|record_param_comms$")
_NUM = (int, float)


def part_of(name: str, op: bool) -> str | None:
    """The part of an op (``op``) or annotation by its name; None: not a part."""
    if _COLLECTIVE_RE.match(name):
        return COLLECTIVES
    if op:
        return BACKWARD if name.startswith("autograd::engine") else FORWARD
    if name.startswith("enumerate(DataLoader)#"):
        return DATA
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return OPTIMIZER
    return None


def wanted(fe: FileEvents) -> bool:
    """A file with steps and none of the engines' sections."""
    return bool(len(fe.step_ts)) and ENGINE.isdisjoint(fe.names)


class Ops:
    """A second pass's sink: the ops of the steps' processes inside their steps, as
    columns (thread, start, end, part index into PARTS). Forward ops only on a step's
    thread, and only those no other op of the block holds (nested ones are the outer op's)."""

    def __init__(self, fe: FileEvents) -> None:
        self.events = 0
        self.fe = fe
        self.thread, self.part = array("i"), array("b")
        self.start, self.end = array("d"), array("d")
        self._parts: dict[str, int] = {}
        self._step_threads = np.unique(np.frombuffer(fe.step_thread, np.int32))
        pids = fe.pid_of(fe.step_thread)
        ts = np.frombuffer(fe.step_ts, np.float64)
        end = ts + np.frombuffer(fe.step_dur, np.float64)
        self._window = {  # per process: its steps' first start and last end
            int(p): (float(ts[pids == p].min()), float(end[pids == p].max()))
            for p in np.unique(pids).tolist()
        }

    def top_level(self, key: str, value: Any) -> None:
        pass

    def take_block(
        self, seg: bytes, clean: bytes, starts: np.ndarray, ends: np.ndarray, base: int
    ) -> None:
        events = _ops_without_args(seg, clean, starts, ends, base, self.events)
        thread, start, end, part = array("i"), array("d"), array("d"), array("b")
        threads, parts = self.fe.threads, self._parts
        for ev in events:  # the bulk of the second read: kept lean
            if type(ev) is not dict or ev.get("ph") != "X":
                continue
            ts: Any = ev.get("ts")
            dur: Any = ev.get("dur")
            if type(ts) not in _NUM or type(dur) not in _NUM or ts - ts != 0 or dur - dur != 0:
                continue  # not a finite interval: the first pass counted it
            name: Any = ev.get("name")
            try:
                index = parts[name]
            except (KeyError, TypeError):  # a new name, or not a string
                index = self._part_index(name)
            key = (ev.get("pid"), ev.get("tid"))
            try:
                thread.append(threads[key])
            except (KeyError, TypeError):  # a thread the first read did not see
                thread.append(self.fe.thread(key))
            start.append(ts)
            end.append(ts + dur if dur > 0 else ts)
            part.append(index)
        self._keep(
            np.frombuffer(thread, np.int32),
            np.frombuffer(start, np.float64),
            np.frombuffer(end, np.float64),
            np.frombuffer(part, np.int8),
        )

    def _part_index(self, name: Any) -> int:
        text = name if type(name) is str else str(name)
        index = PARTS.index(part_of(text, op=True) or FORWARD)
        if type(name) is str:
            self._parts[name] = index
        return index

    def _keep(
        self, thread: np.ndarray, start: np.ndarray, end: np.ndarray, part: np.ndarray
    ) -> None:
        """Append the block's ops that can be part of a step's run."""
        if not len(thread):
            return
        pid = self.fe.pid_of(thread)
        keep = np.zeros(len(thread), bool)
        for p, (lo, hi) in self._window.items():
            keep |= (pid == p) & (start >= lo) & (start <= hi)
        forward = part == PARTS.index(FORWARD)
        keep &= ~forward | np.isin(thread, self._step_threads)
        keep[keep] = ~_nested(thread[keep], start[keep], end[keep], forward[keep])
        self.thread.extend(thread[keep].tolist())
        self.start.extend(start[keep].tolist())
        self.end.extend(end[keep].tolist())
        self.part.extend(part[keep].tolist())


def _ops_without_args(
    seg: bytes, clean: bytes, starts: np.ndarray, ends: np.ndarray, base: int, first: int
) -> list:
    """The block's ops decoded without their ``args`` (most of an op's bytes, and of the
    time to decode it): each cut at its ``"args":`` key, which kineto writes last. Ops whose
    cut piece lacks a key the structure reads (args not last) are decoded whole, and so is
    the block when the cut pieces are not JSON."""
    last = int(ends[-1]) + 1
    hits = [m.start() for m in _OP_RE.finditer(clean, 0, last)]
    if not hits:
        return []
    idx = np.unique(np.searchsorted(starts, hits, side="right") - 1)
    idx = idx[idx >= 0]
    lo, hi = starts[idx], ends[idx] + 1
    args = np.array([m.start() for m in _ARGS_RE.finditer(clean, 0, last)], np.int64)
    k = np.searchsorted(args, lo)  # each op's first args key at or after its start
    cut = args[np.minimum(k, len(args) - 1)] if len(args) else hi
    cut = np.where((k < len(args)) & (cut < hi), cut, hi)
    rows = zip(lo.tolist(), cut.tolist(), hi.tolist(), strict=True)
    pieces = [seg[a:c].rstrip(b" \t\r\n,") + b"}" if c < b else seg[a:b] for a, c, b in rows]
    try:
        events = orjson.loads(b"[" + b",".join(pieces) + b"]")
    except orjson.JSONDecodeError:
        return reader.loads_batch(seg, lo.tolist(), hi.tolist(), base, first)
    short = [i for i, ev in enumerate(events) if type(ev) is not dict or not ev.keys() >= _KEYS]
    if short:
        whole = reader.loads_batch(seg, lo[short].tolist(), hi[short].tolist(), base, first)
        for i, ev in zip(short, whole, strict=True):
            events[i] = ev
    return events


def read_ops(path: Path, fe: FileEvents) -> Ops:
    """Read ``path`` (already read once into ``fe``) again for its ops."""
    ops = Ops(fe)
    reader.read_trace(path, ops)
    return ops


def _nested(
    thread: np.ndarray, start: np.ndarray, end: np.ndarray, droppable: np.ndarray
) -> np.ndarray:
    """True for the ``droppable`` intervals that an earlier-starting (or, at an equal start,
    longer) interval of the same thread holds."""
    out = np.zeros(len(thread), bool)
    order = np.lexsort((-end, start, thread))
    t, e = thread[order], end[order]
    for lo, hi in _groups(t):
        reach = np.maximum.accumulate(e[lo:hi])
        inside = np.zeros(hi - lo, bool)
        inside[1:] = e[lo + 1 : hi] <= reach[:-1]
        out[order[lo:hi]] = inside
    return out & droppable


def _groups(sorted_keys: np.ndarray) -> list[tuple[int, int]]:
    """``(lo, hi)`` of each run of equal keys in a sorted array."""
    if not len(sorted_keys):
        return []
    cuts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(sorted_keys)]
    return list(itertools.pairwise(bounds))


class Layout(NamedTuple):
    """What ``intervals.step_breakdown`` splits a file's steps among, by the structure:
    the runs and the other sections (name ids into ``names``), and the runs' fill."""

    names: list[str]
    name: np.ndarray
    pid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    fill: Fill


def layout(fe: FileEvents, ops: Ops, sections: tuple[np.ndarray, ...], names: list[str]) -> Layout:
    """The structure of ``fe``'s steps. ``sections``: the file's section instances as
    ``intervals.step_breakdown`` takes them (name ids into ``names``, pid, start, end)."""
    # A user's section named like a part stays apart from it.
    shown = [f"{n} (section)" if n in PARTS else n for n in names]
    all_names = [*PARTS, *shown]
    ann = _annotations(fe, names)
    thread = np.concatenate((ann[0], np.frombuffer(ops.thread, np.int32)))
    start = np.concatenate((ann[1], np.frombuffer(ops.start, np.float64)))
    end = np.concatenate((ann[2], np.frombuffer(ops.end, np.float64)))
    part = np.concatenate((ann[3], np.frombuffer(ops.part, np.int8).astype(np.int64)))
    keep = ~_nested(thread, start, end, part == PARTS.index(FORWARD))
    runs, fill = _runs(fe, fe.pid_of(thread[keep]), start[keep], end[keep], part[keep])
    s_name, s_pid, s_start, s_end = sections
    others = np.array([part_of(n, op=False) is None for n in names], bool)
    rest = others[s_name] if len(s_name) else np.zeros(0, bool)
    return Layout(
        all_names,
        np.concatenate((runs[0], s_name[rest] + len(PARTS))),
        np.concatenate((runs[1], s_pid[rest])),
        np.concatenate((runs[2], s_start[rest])),
        np.concatenate((runs[3], s_end[rest])),
        fill,
    )


def _annotations(fe: FileEvents, names: list[str]) -> tuple[np.ndarray, ...]:
    """The file's annotations that are parts (device mirrors left out): thread, start,
    end, part index."""
    thread = np.frombuffer(fe.sec_thread, np.int32)
    name = np.frombuffer(fe.sec_name, np.int32)
    index = np.array([PARTS.index(p) if (p := part_of(n, op=False)) else -1 for n in names])
    part = index[name] if len(name) else np.zeros(0, np.int64)
    keep = (part >= 0) & ~np.isin(thread, fe.device_rows())
    start = np.frombuffer(fe.sec_ts, np.float64)[keep]
    end = start + np.maximum(np.frombuffer(fe.sec_dur, np.float64)[keep], 0.0)
    return thread[keep], start, end, part[keep]


def _runs(
    fe: FileEvents, pid: np.ndarray, start: np.ndarray, end: np.ndarray, part: np.ndarray
) -> tuple[tuple[np.ndarray, ...], Fill]:
    """Per step, its events' runs of one part (name ids = part indices, pid, start, end)
    and the gap before each run (its fill)."""
    s_pid = fe.pid_of(fe.step_thread)
    s_lo = np.frombuffer(fe.step_ts, np.float64)
    s_hi = s_lo + np.frombuffer(fe.step_dur, np.float64)
    step = np.full(len(start), -1)
    for p in np.unique(s_pid).tolist():  # each event's step: the one its start lies in
        rows = np.flatnonzero(s_pid == p)
        rows = rows[np.argsort(s_lo[rows], kind="stable")]
        mine = np.flatnonzero(pid == p)
        k = np.searchsorted(s_lo[rows], start[mine], side="right") - 1
        inside = (k >= 0) & (start[mine] <= s_hi[rows[np.maximum(k, 0)]])
        step[mine[inside]] = rows[k[inside]]
    sel = step >= 0
    order = np.lexsort((start[sel], step[sel]))
    st, s, e, pt = step[sel][order], start[sel][order], end[sel][order], part[sel][order]
    if not len(st):
        empty = np.zeros(0)
        none = np.zeros(0, np.int64)
        return (none, none, empty, empty), Fill(none, none, empty, empty)
    heads = np.flatnonzero(np.r_[True, (st[1:] != st[:-1]) | (pt[1:] != pt[:-1])])
    r_step, r_part, r_start = st[heads], pt[heads], s[heads]
    r_end = np.maximum.reduceat(e, heads)
    # The gap before a run: from the end of the step's runs so far (its start for the first).
    reach = np.empty(len(heads))
    for lo, hi in _groups(r_step):
        reach[lo] = s_lo[r_step[lo]]
        reach[lo + 1 : hi] = np.maximum.accumulate(r_end[lo : hi - 1])
    r_pid = s_pid[r_step].astype(np.int64)
    gap = r_start > reach
    fill = Fill(r_part[gap], r_pid[gap], reach[gap], r_start[gap])
    return (r_part, r_pid, r_start, r_end), fill
