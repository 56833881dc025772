"""The public entry points: summarize trace files, and write the summary's three outputs."""

from __future__ import annotations

import gzip
import json
import os
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

from accelpipe.errors import DataError
from accelpipe.io import atomic_path, write_text
from accelpipe.traces import formats, locate, reader
from accelpipe.traces.collect import FileEvents
from accelpipe.traces.markdown import render_markdown
from accelpipe.traces.plot import plot_step_breakdown
from accelpipe.traces.problems import Malformed, Unsupported
from accelpipe.traces.stats import Totals


def summarize_traces(paths: Sequence[str | Path] | str | Path) -> dict:
    """Summarize one or more chrome traces (e.g. successive profiler cycles) together.

    Returns a JSON-serializable dict: ``traces``, ``format`` (``kineto`` or
    ``tf-trace-viewer``), ``bytes`` (uncompressed), ``events``, ``device`` (cpu/cuda/rocm/hpu,
    inferred; a TF trace: cpu, or gpu with ``/device:GPU`` stream rows), ``steps``
    (``ProfilerStep#N`` durations of complete steps, ``incomplete_left_out``: see
    ``traces.steps``; None without steps), ``sections`` (per ``record_function`` name:
    ``count``, ``cpu_ms``, ``kernel_ms``, ``kernel_span_ms`` and ``device_busy_ms`` stats over
    instances; the kernel stats are None for a section that never launched a kernel,
    ``device_busy_ms`` None for one that never overlapped a kernel; otherwise instances without
    count as 0), ``device_activity`` (count and total ms of kernels, memcpys and memsets;
    ``kernels_without_launch``: kernels with no runtime event of the same correlation, e.g. all
    kernels of a Gaudi trace) and ``skipped_events`` (``non_finite_time``: events left out
    for a NaN or infinite ``ts``/``dur``) and ``notes`` (lines on how to read a TF summary:
    see ``traces.tf_sections``; empty for kineto). Stats are ``{"min", "mean", "median", "max",
    "total"}`` in milliseconds. ``memory`` (see ``traces.memory``) is None without torch
    ``[memory]`` events (``profile_memory`` off, or a TF trace); else ``events``,
    ``peak_allocated_bytes`` per device over the trace and, per section, the peak allocated
    bytes per device while it was open (None for a section with no memory event inside).

    Raises DataError naming the file if a trace is missing, truncated, malformed, neither a
    PyTorch profiler nor a TensorFlow trace viewer trace, or the same trace as another one
    given (``x.json`` beside ``x.json.gz``).
    """
    paths = _checked(paths)
    totals = Totals()
    for path in paths:
        fe, nbytes, fmt = _read(path)
        totals.add(fe, nbytes, fmt)
    return totals.summary(paths)


def write_summary(paths: Sequence[str | Path], out_dir: str | Path) -> dict:
    """Summarize ``paths`` and write ``summary.json``, ``summary.md`` and ``step_breakdown.png``
    into ``out_dir`` (each atomically); returns the summary."""
    summary = summarize_traces(paths)
    out = Path(out_dir)
    # allow_nan=False: a NaN that slipped through fails here instead of writing non-JSON.
    write_text(out / "summary.json", json.dumps(summary, indent=2, allow_nan=False) + "\n")
    write_text(out / "summary.md", render_markdown(summary))
    with atomic_path(out / "step_breakdown.png") as tmp:
        plot_step_breakdown(summary, tmp)
    return summary


def _trace_stem(name: str) -> str:
    """``x`` for ``x.json``, ``x.json.gz`` and ``x.zip``: one trace in any of its forms."""
    for suffix in (".gz", ".zip"):
        name = name.removesuffix(suffix)
    return name.removesuffix(".json")


def _checked(paths: Sequence[str | Path] | str | Path) -> list[Path]:
    """Paths as a list; refuses one trace given twice (the same path, or ``x.json`` beside
    ``x.json.gz``/``x.zip``), which would count every event twice."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out = [Path(p) for p in paths]
    if not out:
        raise ValueError("summarize_traces needs at least one trace file")
    seen: dict[tuple[str, str], Path] = {}
    for path in out:
        key = (os.path.abspath(path.parent), _trace_stem(path.name))
        if key in seen:
            other = seen[key]
            how = "listed twice" if other == path else f"{other.name} and {path.name}"
            raise DataError(
                f"{other} and {path}: the same trace twice ({how}); keep one of them, "
                "or every event is counted twice"
            )
        seen[key] = path
    return out


def _read(path: Path) -> tuple[FileEvents, int, str]:
    """Stream one file; its events, decompressed size and format. Every failure becomes
    one DataError line naming the file (and, for malformed JSON, where)."""
    fe = FileEvents()
    try:
        nbytes, _bare = reader.read_trace(path, fe)
        fmt = formats.require_supported(fe.evidence)
    except FileNotFoundError:
        raise DataError(f"{path}: trace file not found") from None
    except Malformed as err:
        raise DataError(f"{path}: malformed trace: {err}{_where(path, err.offset)}") from None
    except Unsupported as err:
        raise DataError(f"{path}: {err}") from None
    except (EOFError, zlib.error, zipfile.BadZipFile, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: truncated or corrupt compressed trace ({err})") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read trace ({err})") from None
    return fe, nbytes, fmt


def _where(path: Path, offset: int | None) -> str:
    """`` (at byte N, line L, column C)`` of the decompressed text, or '' if unknown."""
    if offset is None:
        return ""
    try:
        with reader.open_trace(path) as stream:
            line, column = locate.line_and_column(stream, offset)
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, Malformed):
        return f" (at byte {offset})"
    return f" (at byte {offset}, line {line}, column {column})"
