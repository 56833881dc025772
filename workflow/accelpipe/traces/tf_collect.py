"""Per-file collection for TensorFlow trace viewer JSON (xprof's ``trace_viewer`` tool).

TF events carry no kineto ``"cat"``, so the kineto collector picks nothing out of them. This
sink picks, per block, only the events the TF summary needs (found with a regex on the
escape-free bytes, decoded in one batch like the kineto ones) and keeps compact columns:

* ``process_name`` / ``thread_name`` metadata: which rows are device streams.
* step markers: every event with ``args.step_num``, the TraceMe argument xprof groups steps
  by (``Trace("train", step_num=n, _r=1)`` in the TF engine and Keras' ``fit``, any name
  in other code; xprof names the event ``<name> <n>``).
* the host sections: ``tf.profiler.experimental.Trace`` events named ``loader_first``,
  ``loader_next``, ``step`` (without ``step_num``).
* ops (host executor threads) and GPU kernels whose ``args.long_name`` (or ``args.tf_op``)
  starts with a section scope: ``forward/``, ``loss/``, ``backward/``, ``optimizer_step/``,
  ``gradient_tape/`` (gradients: TF names them so whatever scope wraps ``tape.gradient``).
* every event with ``args.correlation_id`` (GPU activity, for the device totals).

``tf_sections`` turns the columns into the summary's section instances and steps.
"""

from __future__ import annotations

import re
from array import array
from typing import Any

import numpy as np

from accelpipe.traces.reader import loads_matching

# Scope (first long_name component) -> section; gradient_tape/ is the backward pass.
SCOPES = {
    "forward": "forward",
    "loss": "loss",
    "backward": "backward",
    "gradient_tape": "backward",
    "optimizer_step": "optimizer_step",
}
SECTION_NAMES = ("forward", "loss", "backward", "optimizer_step")  # ids in op columns
HOST_SECTIONS = frozenset({"loader_first", "loader_next", "step"})  # Trace events
_scopes = b"|".join(s.encode() for s in SCOPES)
_hosts = b"|".join(s.encode() for s in sorted(HOST_SECTIONS))
# Run on escape-free bytes; a hit may sit in args (e.g. args.name): the decoded event decides.
_INTEREST_RE = re.compile(
    rb'"(?:long_name|tf_op)"\s*:\s*"(?:' + _scopes + rb")/"
    rb'|"name"\s*:\s*"(?:' + _hosts + rb'|process_name|thread_name)"'
    rb'|"(?:correlation_id|step_num)"\s*:'
)
_XLA_RE = re.compile(rb'"hlo_op"\s*:|"tf_function_call"\s*:\s*"[^"]*-xla"')
_NUM = (int, float)


class TFEvents:
    """What one TF trace file contributes (times in µs as written)."""

    def __init__(self) -> None:
        self.nonfinite = 0
        self.xla = False  # XLA ran (hlo ops, or a tf.function called as -xla)
        self.process_names: dict[Any, str] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.rows: dict[tuple[Any, Any], int] = {}  # (pid, tid) -> small int
        self.row_keys: list[tuple[Any, Any]] = []
        self.step_row, self.step_ts, self.step_dur = array("i"), array("d"), array("d")
        self.step_group = array("q")
        self.host_name: list[str] = []
        self.host_row, self.host_ts, self.host_dur = array("i"), array("d"), array("d")
        # Ops and kernels with a section scope; kernels are told apart by row at the end.
        self.op_sec, self.op_row, self.op_group = array("b"), array("i"), array("q")
        self.op_ts, self.op_dur = array("d"), array("d")
        # All correlated events (device ops, and the host's runtime calls): row, name kind,
        # time, name id (``dev_names``) and correlation (-1 when not an integer).
        self.dev_row, self.dev_kind, self.dev_ts, self.dev_dur = (
            array("i"),
            array("b"),
            array("d"),
            array("d"),
        )
        self.dev_name, self.dev_corr = array("i"), array("q")
        self.dev_names: dict[str, int] = {}

    def take_block(
        self, seg: bytes, clean: bytes, starts: np.ndarray, ends: np.ndarray, base: int, first: int
    ) -> None:
        if not self.xla and _XLA_RE.search(clean) is not None:
            self.xla = True
        self.add_many(loads_matching(_INTEREST_RE, seg, clean, starts, ends, base, first))

    def add_many(self, events: list) -> None:
        for ev in events:
            if type(ev) is not dict:
                continue
            ph, name, args = ev.get("ph"), ev.get("name"), ev.get("args")
            args = args if type(args) is dict else {}
            if ph == "M":
                self._metadata(ev, name, args)
                continue
            if ph != "X":
                continue
            # JSON values, numbers past the exact type() test (which mypy does not narrow on)
            ts: Any = ev.get("ts")
            dur: Any = ev.get("dur")
            if type(ts) not in _NUM or type(dur) not in _NUM:
                continue
            if ts - ts != 0 or dur - dur != 0:  # NaN / inf: would poison every statistic
                self.nonfinite += 1
                continue
            row = self._row(ev)
            if "correlation_id" in args:
                self.dev_row.append(row)
                self.dev_kind.append(_kind(name))
                self.dev_ts.append(ts)
                self.dev_dur.append(dur)
                label = name if type(name) is str else str(name)
                self.dev_name.append(self.dev_names.setdefault(label, len(self.dev_names)))
                self.dev_corr.append(_correlation(args.get("correlation_id")))
            if "step_num" in args:
                self.step_row.append(row)
                self.step_ts.append(ts)
                self.step_dur.append(dur)
                self.step_group.append(_group(args))
            elif name in HOST_SECTIONS:
                self.host_name.append(name)
                self.host_row.append(row)
                self.host_ts.append(ts)
                self.host_dur.append(dur)
            else:
                sec = section_of(args)
                if sec is not None:
                    self.op_sec.append(SECTION_NAMES.index(sec))
                    self.op_row.append(row)
                    self.op_group.append(_group(args))
                    self.op_ts.append(ts)
                    self.op_dur.append(dur)

    def _metadata(self, ev: dict, name: Any, args: dict) -> None:
        label = args.get("name")
        if type(label) is not str:
            return
        try:
            if name == "process_name":
                self.process_names[ev.get("pid")] = label
            elif name == "thread_name":
                self.thread_names[(ev.get("pid"), ev.get("tid"))] = label
        except TypeError:  # an unhashable pid/tid: not a row we can name
            pass

    def _row(self, ev: dict) -> int:
        key = (ev.get("pid"), ev.get("tid"))
        try:
            hash(key)
        except TypeError:
            key = (repr(key[0]), repr(key[1]))
        found = self.rows.get(key)
        if found is None:
            found = self.rows[key] = len(self.row_keys)
            self.row_keys.append(key)
        return found


def section_of(args: dict) -> str | None:
    """The section of an op or kernel from the first component of its scope path."""
    for key in ("long_name", "tf_op"):
        path = args.get(key)
        if type(path) is str and "/" in path:
            return SCOPES.get(path.split("/", 1)[0])
    return None


def _group(args: dict) -> int:
    """``args.group_id`` (xprof's step group, written as a string) or -1."""
    try:
        return int(args.get("group_id"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return -1


def _correlation(value: Any) -> int:
    """xprof writes ``correlation_id`` as a string; -1 when it is no non-negative integer."""
    try:
        corr = int(value)
    except (TypeError, ValueError):
        return -1
    return corr if 0 <= corr < 1 << 63 else -1


KERNEL, MEMCPY, MEMSET = 0, 1, 2


def _kind(name: Any) -> int:
    """Device activity kind from the event name (TF names copies ``MemcpyH2D`` etc.)."""
    low = name.lower() if type(name) is str else ""
    if low.startswith("memcpy"):
        return MEMCPY
    if low.startswith("memset"):
        return MEMSET
    return KERNEL
