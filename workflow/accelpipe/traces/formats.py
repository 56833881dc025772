"""Which profiler wrote a chrome-trace JSON file.

Several profilers write the chrome trace format, and all of them would stream through the
reader. PyTorch profiler (kineto) traces and TensorFlow's trace viewer JSON (which the TF
engine writes; read by ``tf_collect`` / ``tf_sections``) are summarized; the others are told
apart so that they are refused with a message saying what the file looks like, instead of
giving an empty summary.

Formats (``detect_format``):

* ``kineto``: at least one event category that libkineto writes (``cpu_op``,
  ``user_annotation``, ``kernel``, ``cuda_runtime``, ...), or an empty event list under the
  top-level keys torch writes (``schemaVersion``, ``deviceProperties``, ``distributedInfo``).
* ``tf-trace-viewer``: TensorFlow's trace viewer JSON (xprof / tensorboard-plugin-profile):
  process names like ``/host:CPU`` and ``/device:GPU:0``, events without kineto categories.
* ``perfetto``: JSON exported from Perfetto (``traceconv json``, the trace processor):
  a top-level ``systemTraceEvents`` member, or Perfetto/trace-processor keys in ``metadata``.
* ``chrome``: chrome trace events (they have ``ph``) from some other producer.
* ``not-a-trace``: JSON events that are not trace events (no ``ph``).
* ``empty``: no events at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from accelpipe.traces.problems import Unsupported

SUPPORTED = frozenset({"kineto", "tf-trace-viewer"})
_KINETO_KEYS = frozenset({"schemaVersion", "deviceProperties", "distributedInfo"})
_LIMIT = 8  # names remembered per kind of evidence: enough for a message
SAMPLE_EVENTS = 32  # events of the first block decoded whole to see what they are
# TF's trace viewer names its processes after devices: "/host:CPU", "/device:GPU:0".
TF_PROCESS_RE = re.compile(rb'"(/(?:host|device):[^"]{1,64})"')


@dataclass
class Evidence:
    """What a file showed about its producer, gathered while it streams."""

    kineto_cats: set[str] = field(default_factory=set)
    other_cats: set[str] = field(default_factory=set)
    tf_processes: set[str] = field(default_factory=set)
    top_keys: set[str] = field(default_factory=set)
    perfetto: bool = False
    sample: list = field(default_factory=list)
    events: int = 0

    def category(self, cat: str, kineto: bool) -> None:
        target = self.kineto_cats if kineto else self.other_cats
        if len(target) < _LIMIT:
            target.add(cat)

    def top_level(self, key: str, value: Any) -> None:
        self.top_keys.add(key)
        if key == "systemTraceEvents":
            self.perfetto = True
        elif key == "metadata" and isinstance(value, dict):
            text = " ".join(map(str, value)).lower()
            self.perfetto |= "perfetto" in text or "trace_processor" in text

    def look_for_tf(self, clean: bytes) -> None:
        """TF process names in a block (only searched until the format is clear)."""
        for m in TF_PROCESS_RE.finditer(clean):
            if len(self.tf_processes) >= _LIMIT:
                return
            self.tf_processes.add(m.group(1).decode("latin-1"))


def detect_format(evidence: Evidence) -> str:
    """'kineto' | 'tf-trace-viewer' | 'perfetto' | 'chrome' | 'not-a-trace' | 'empty'."""
    if evidence.kineto_cats:
        return "kineto"
    if evidence.tf_processes:
        return "tf-trace-viewer"
    if evidence.perfetto:
        return "perfetto"
    if not evidence.events:
        return "kineto" if evidence.top_keys & _KINETO_KEYS else "empty"
    if not any(isinstance(ev, dict) and "ph" in ev for ev in evidence.sample):
        return "not-a-trace"
    return "chrome"


def require_supported(evidence: Evidence) -> str:
    """The detected format, or Unsupported saying what the file looks like."""
    fmt = detect_format(evidence)
    if fmt in SUPPORTED:
        return fmt
    refuse = "not a PyTorch profiler (kineto) trace, which is all this summarizer reads"
    if fmt == "tf-trace-viewer":
        procs = ", ".join(sorted(evidence.tf_processes))
        raise Unsupported(
            f"looks like a TensorFlow trace viewer JSON (xprof / TensorBoard profile plugin; "
            f"processes {procs}): {refuse}"
        )
    if fmt == "perfetto":
        raise Unsupported(f"looks like a Perfetto JSON export (systemTraceEvents): {refuse}")
    if fmt == "chrome":
        cats = ", ".join(sorted(evidence.other_cats)) or "none"
        raise Unsupported(
            f"a chrome trace without any kineto event category (categories: {cats}): {refuse}"
        )
    if fmt == "not-a-trace":
        raise Unsupported('JSON but not a trace: its events have no "ph" (event type)')
    raise Unsupported("no trace events: the traceEvents array is empty")
