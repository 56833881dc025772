"""Per-file event collection: picks the few events worth decoding out of each block the
reader hands over, decodes them in one batch, and keeps what the join needs in compact
``array`` columns (section intervals, steps, launches, kernels, ``[memory]`` events: see
``memory``), plus device hints and what the file shows about its producer
(``formats.Evidence``).

Events whose ``ts`` or ``dur`` is not a finite number (Python's json writes ``NaN``, and
accepts it back) are skipped and counted: one NaN would otherwise turn every statistic it
touches into NaN.
"""

from __future__ import annotations

import gc
import re
from array import array
from typing import Any

import numpy as np

from accelpipe.traces import classify
from accelpipe.traces.classify import ANNOTATION, INSTANT, KERNEL, MIRROR, OTHER, RUNTIME
from accelpipe.traces.formats import SAMPLE_EVENTS, Evidence
from accelpipe.traces.jsonscan import Scratch, begins_with, byte_words, string_values
from accelpipe.traces.memory import MemoryEvents
from accelpipe.traces.reader import loads_batch, loads_holding
from accelpipe.traces.tf_collect import TFEvents

# Events whose "cat" is anything but a bulk category get decoded. Found on escape-free bytes,
# so a hit is a real key ending in "cat" (possibly nested in args, or a longer key such as
# "concat": the decoded event decides). ``_interesting`` tests the usual separators for all
# keys at once; this pattern, the definition, is matched at the few places it cannot.
_BULK_NAMES = b"|".join(c.encode() for c in classify.BULK_CATS)
_INTEREST_RE = re.compile(rb'cat"\s*:\s*"(?!(?:' + _BULK_NAMES + rb')")')
_BULK_VALUES = tuple(c.encode() + b'"' for c in classify.BULK_CATS)
# A bulk category: proof of a kineto trace when a block holds nothing else.
_BULK_RE = re.compile(rb'"cat"\s*:\s*"(?:' + _BULK_NAMES + rb')"')
_NUM = (int, float)  # compared with type(), so bools are not numbers here


class FileEvents:
    """What one trace file contributes. Threads are small ints (``thread``); each knows its
    process (``thread_pid``), since launches join sections of the same process."""

    def __init__(self) -> None:
        self.events = 0
        self.nonfinite = 0  # decoded events skipped for a NaN/inf ts or dur
        self.evidence = Evidence()
        self.names: dict[str, int] = {}
        self.threads: dict[Any, int] = {}
        self.thread_pid = array("i")
        self._pids: dict[Any, int] = {}
        self.sec_name, self.sec_thread = array("i"), array("i")
        self.sec_ts, self.sec_dur = array("d"), array("d")
        self.step_thread, self.step_ts, self.step_dur = array("i"), array("d"), array("d")
        self.launch_corr, self.launch_thread, self.launch_ts = array("q"), array("i"), array("d")
        self.kern_corr, self.kern_ts, self.kern_dur = array("q"), array("d"), array("d")
        self.copies = {classify.MEMCPY: [0, 0.0], classify.MEMSET: [0, 0.0]}
        # The device side (``traces.device``): each kernel's name id and row, memcpy and
        # memset events, and which launches are kernel launches.
        self.op_names: dict[Any, int] = {}
        self.kern_name, self.kern_thread = array("i"), array("i")
        self.copy_name, self.copy_thread = array("i"), array("i")
        self.copy_corr, self.copy_ts, self.copy_dur = array("q"), array("d"), array("d")
        self.launch_is_kernel = array("b")
        self._kernel_launch: dict[Any, int] = {}
        self.rank = 0  # distributedInfo.rank
        self.hints: set[str] = set()
        self._roles: dict[str, str] = {}
        # TF trace viewer events (no kineto "cat"), collected while the file may be one.
        self.tf: TFEvents | None = None
        self.memory = MemoryEvents()  # torch's [memory] events (profile_memory=True)
        self._scratch = Scratch()

    # -- the reader's Sink interface ----------------------------------------------------

    def top_level(self, key: str, value: Any) -> None:
        self.evidence.top_level(key, value)
        rank = value.get("rank") if key == "distributedInfo" and type(value) is dict else None
        if type(rank) is int:
            self.rank = rank
        if key == "deviceProperties":
            classify.property_hints(value, self.hints)

    def take_block(
        self, seg: bytes, clean: bytes, starts: np.ndarray, ends: np.ndarray, base: int
    ) -> None:
        # The collector would find nothing to free, but thousands of freshly decoded dicts
        # sit in its youngest generation and every collection walks them all: off while
        # the block's events are decoded and recorded.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._take_block(seg, clean, starts, ends, base)
        finally:
            if was_enabled:
                gc.enable()

    def _take_block(
        self, seg: bytes, clean: bytes, starts: np.ndarray, ends: np.ndarray, base: int
    ) -> None:
        evidence = self.evidence
        evidence.events = self.events + len(starts)
        if not self.events:
            n = min(len(starts), SAMPLE_EVENTS)
            head = (starts[:n].tolist(), (ends[:n] + 1).tolist())
            evidence.sample = loads_batch(seg, *head, base, self.events)
        if not evidence.kineto_cats:  # settled in the first block of a kineto trace
            self._look_for_format(clean)
            if not evidence.kineto_cats:  # maybe TensorFlow's: its events have no "cat"
                if self.tf is None:
                    self.tf = TFEvents()
                self.tf.take_block(seg, clean, starts, ends, base, self.events)
        hits = self._interesting(clean, int(ends[-1]) + 1)
        self.add_many(loads_holding(hits, seg, starts, ends, base, self.events))

    def _interesting(self, clean: bytes, end: int) -> np.ndarray:
        """Ascending places before ``end`` where ``_INTEREST_RE`` matches ``clean``."""
        words = byte_words(clean)
        found, values, odd = string_values(
            np.frombuffer(clean, np.uint8), words, b"cat", end, self._scratch
        )
        hits = found[~begins_with(words, values, _BULK_VALUES)]
        more = [at for at in odd.tolist() if _INTEREST_RE.match(clean, at, end)]
        return np.sort(np.concatenate((hits, more))) if more else hits

    def _look_for_format(self, clean: bytes) -> None:
        m = _BULK_RE.search(clean)
        if m is not None:
            cat = m.group().rsplit(b'"', 2)[1].decode()
            self.evidence.category(cat, kineto=True)
        else:
            self.evidence.look_for_tf(clean)

    # -- decoded events -------------------------------------------------------------------

    def add_many(self, events: list) -> None:
        """Record decoded events. Kernels and launches are the bulk of what is decoded, so
        their handling is inline; finite checks are ``x - x == 0`` (False for NaN and inf)."""
        roles, threads = self._roles, self.threads
        kern_corr, kern_ts, kern_dur = self.kern_corr, self.kern_ts, self.kern_dur
        l_corr, l_thread, l_ts = self.launch_corr, self.launch_thread, self.launch_ts
        op_names, kern_name, kern_thread = self.op_names, self.kern_name, self.kern_thread
        kernel_launch, l_kernel = self._kernel_launch, self.launch_is_kernel
        instants: list[dict] = []
        for ev in events:
            if type(ev) is not dict:
                continue
            cat = ev.get("cat")
            role = roles.get(cat)  # type: ignore[arg-type]
            if role is None:
                if type(cat) is not str:
                    continue
                role = self._role(cat)
            # JSON values, numbers past the exact type() tests (which mypy does not narrow on)
            ts: Any = ev.get("ts")
            if role is INSTANT:  # [memory] events among them
                instants.append(ev)
                continue
            if role is RUNTIME or (role is OTHER and classify.looks_like_launch(ev.get("name"))):
                name = ev.get("name")
                is_kernel = kernel_launch.get(name)
                if is_kernel is None:
                    is_kernel = self._launch_name(name)
                corr = _correlation(ev)
                if corr < 0 or type(ts) not in _NUM:
                    continue
                if ts - ts != 0:
                    self.nonfinite += 1
                    continue
                key = (ev.get("pid"), ev.get("tid"))
                try:
                    thread = threads[key]
                except (KeyError, TypeError):  # new, or an unhashable pid/tid
                    thread = self.thread(key)
                l_corr.append(corr)
                l_thread.append(thread)
                l_ts.append(ts)
                l_kernel.append(is_kernel)
                continue
            if role is OTHER or role is MIRROR or ev.get("ph") != "X":
                continue
            dur: Any = ev.get("dur")
            if type(ts) not in _NUM or type(dur) not in _NUM:
                continue
            if ts - ts != 0 or dur - dur != 0:
                self.nonfinite += 1
                continue
            if role is KERNEL:
                corr = _correlation(ev)
                if corr < 0 and "hpu" not in self.hints:
                    self._uncorrelated_kernel(ev)
                kern_corr.append(corr)
                kern_ts.append(ts)
                kern_dur.append(dur)
                key = (ev.get("pid"), ev.get("tid"))
                try:
                    thread = threads[key]
                except (KeyError, TypeError):  # new, or an unhashable pid/tid
                    thread = self.thread(key)
                kern_thread.append(thread)
                name = ev.get("name")
                try:
                    kern_name.append(op_names[name])
                except (KeyError, TypeError):
                    kern_name.append(self._op_name(name))
            elif role is ANNOTATION:
                self._annotation(ev, ts, dur)
            else:
                totals = self.copies[role]
                totals[0] += 1
                totals[1] += dur
                self._copy(ev, role, ts, dur)
        if instants:
            self.memory.add_many(instants, threads, self.thread)

    def _role(self, cat: str) -> str:
        """Classify a category once (a trace has only a handful of them)."""
        role = classify.category_role(cat, self.hints)
        self.evidence.category(cat, classify.is_kineto_category(cat))
        self._roles[cat] = role
        return role

    def thread(self, key: Any) -> int:
        """Small integer id of a (pid, tid) pair, registering its process."""
        try:
            hash(key)
        except TypeError:  # a list or object as pid/tid: key it by its text
            key = repr(key)
        found = self.threads.get(key)
        if found is not None:
            return found
        pid = key[0] if isinstance(key, tuple) else key
        self.thread_pid.append(self._pids.setdefault(pid, len(self._pids)))
        return self.threads.setdefault(key, len(self.threads))

    def _launch_name(self, name: Any) -> int:
        """1 for a runtime call that launches one kernel (its delay is measured), else 0;
        a new name also hints at the device."""
        is_kernel = int(classify.is_kernel_launch(name))
        if type(name) is str:
            classify.name_hint(name, self.hints)
            self._kernel_launch[name] = is_kernel
        return is_kernel

    def _op_name(self, name: Any) -> int:
        """Id of a device op's name (``op_names``: insertion order)."""
        name = name if type(name) is str else str(name)
        return self.op_names.setdefault(name, len(self.op_names))

    def _copy(self, ev: dict, role: str, ts: float, dur: float) -> None:
        """A memcpy or memset (few next to kernels): its row, name, correlation, time."""
        name = ev.get("name")
        if type(name) is not str:
            name = "Memcpy" if role == classify.MEMCPY else "Memset"
        self.copy_name.append(self._op_name(name))
        self.copy_thread.append(self.thread((ev.get("pid"), ev.get("tid"))))
        self.copy_corr.append(max(_correlation(ev), -1))
        self.copy_ts.append(ts)
        self.copy_dur.append(dur)

    def _uncorrelated_kernel(self, ev: dict) -> None:
        """Gaudi's device ops carry recipe metadata and no correlation."""
        args = ev.get("args")
        if type(args) is dict and any(k in args for k in classify.HPU_KERNEL_ARGS):
            self.hints.add("hpu")

    def _annotation(self, ev: dict, ts: float, dur: float) -> None:
        name = ev.get("name")
        name = name if type(name) is str else str(name)
        thread = self.thread((ev.get("pid"), ev.get("tid")))
        if classify.is_step(name):
            self.step_thread.append(thread)
            self.step_ts.append(ts)
            self.step_dur.append(dur)
            return
        self.sec_name.append(self.names.setdefault(name, len(self.names)))
        self.sec_thread.append(thread)
        self.sec_ts.append(ts)
        self.sec_dur.append(dur)

    # -- views for the join ---------------------------------------------------------------

    def device_rows(self) -> np.ndarray:
        """Thread ids of rows with kernels and no runtime events: device rows. (A host row
        that shares a device row's pid/tid, say pid 1 in a container, has launches.)"""
        rows = np.unique(np.frombuffer(self.kern_thread, np.int32))
        return rows[~np.isin(rows, np.frombuffer(self.launch_thread, np.int32))]

    def pid_of(self, threads: array | np.ndarray) -> np.ndarray:
        """Process ids (small ints) of thread ids."""
        table = np.frombuffer(self.thread_pid, np.int32)
        return table[np.asarray(threads, dtype=np.int64)] if len(table) else np.zeros(0, np.int32)

    def activity(self) -> dict[str, list]:
        """Count and total µs of kernels, memcpys and memsets."""
        kernels = [len(self.kern_dur), float(np.frombuffer(self.kern_dur, np.float64).sum())]
        return {KERNEL: kernels, **{k: list(v) for k, v in self.copies.items()}}


def _correlation(ev: dict) -> int:
    """``args.correlation`` as a non-negative int, or -1 when absent."""
    args = ev.get("args")
    corr = args.get("correlation") if type(args) is dict else None
    return corr if type(corr) is int and 0 <= corr < 1 << 63 else -1  # fits array("q")
