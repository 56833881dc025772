"""Streaming summaries of PyTorch profiler (kineto) and TensorFlow trace viewer chrome traces.

Traces written by ``torch.profiler`` (``export_chrome_trace`` or
``tensorboard_trace_handler``) reach gigabytes, so nothing here loads a whole file or its
event list. The modules, in the order data flows through them:

* ``reader``: the byte window over a .json / .json.gz / .zip, the top-level walk, and the
  chunked scan of ``traceEvents``; ``jsonscan`` is its numpy structure finder and ``locate``
  says where a malformed file goes wrong (byte, event, line, excerpt).
* ``collect``: picks the few events worth decoding per block (by ``"cat"``) and keeps compact
  columns per file; ``classify`` gives each category its role and infers the device;
  ``formats`` tells a kineto trace from other profilers' chrome traces: TensorFlow's trace
  viewer JSON is read by ``tf_collect`` (its events have no kineto ``cat``) and turned into
  the same section instances and steps by ``tf_sections`` (whose docstring has the rule);
  Perfetto and other chrome traces are refused.
* ``join``: kernels to launches (correlation) to sections (time window in the same process,
  any thread: backward kernels are launched from the autograd thread), and device busy time.
* ``intervals``: the one definition of busy time (union of a section's intervals) and span
  (first start to last end) for kineto and TF alike, and the step breakdown, which gives
  each instant of a step to one section so that the parts add up to the step.
* ``memory``: torch's ``[memory]`` events (``profile_memory=True``), found by name, and the
  peak allocated bytes per device while each section is open.
* ``steps``: which ``ProfilerStep#N`` (or TF step markers) are complete (the last one of a
  file may not be).
* ``stats``: pooling files, millisecond statistics, the summary dict; ``summary``: the
  public entry points; ``markdown`` and ``plot``: the report and the chart.

A *section* is a CPU ``user_annotation`` ``X`` event (``record_function``) other than
``ProfilerStep#N``, counted once per instance; device mirrors of annotations never are. (A
TF trace's sections: ``tf_sections``.) TensorFlow's own profiler output (``*.xplane.pb``)
is converted to trace viewer JSON first, by the TF engine's xprof conversion.
Timestamps in chrome traces are microseconds; every reported duration is milliseconds.
"""

from __future__ import annotations

from accelpipe.traces.formats import detect_format
from accelpipe.traces.markdown import render_markdown
from accelpipe.traces.plot import plot_step_breakdown
from accelpipe.traces.summary import summarize_traces, write_summary

__all__ = [
    "detect_format",
    "plot_step_breakdown",
    "render_markdown",
    "summarize_traces",
    "write_summary",
]
