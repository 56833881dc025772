"""The public entry points: summarize trace files, and write the summary's three outputs."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path, write_text
from accelpipe.core.xspace import xspace_to_trace_json
from accelpipe.traces import formats, locate, reader, structure
from accelpipe.traces.collect import FileEvents
from accelpipe.traces.device import SHORT_KERNEL_US
from accelpipe.traces.markdown import render_markdown
from accelpipe.traces.plot import plot_step_breakdown
from accelpipe.traces.problems import Malformed, Unsupported
from accelpipe.traces.stats import Totals

XPLANE_SUFFIX = ".xplane.pb"  # TF's profiler output: plugins/profile/<run>/<host>.xplane.pb


def summarize_traces(
    paths: Sequence[str | Path] | str | Path, short_kernel_us: float = SHORT_KERNEL_US
) -> dict:
    """Summarize one or more chrome traces (e.g. successive profiler cycles) together.

    A TensorFlow profiler XSpace (``<host>.xplane.pb``) is converted to trace viewer JSON
    first, by the TF engine's own xprof conversion (``XPLANE_SUFFIX``).

    Returns a JSON-serializable dict: ``traces``, ``format`` (``kineto`` or
    ``tf-trace-viewer``), ``bytes`` (uncompressed), ``events``, ``device`` (cpu/cuda/rocm/hpu,
    inferred; a TF trace: cpu, or gpu with ``/device:GPU`` stream rows), ``steps``
    (``ProfilerStep#N`` or TF step marker durations of complete steps,
    ``incomplete_left_out``: see ``traces.steps``; None without steps),
    ``step_breakdown`` (the mean complete step split so that each instant counts once:
    ``steps``, ``step_ms``, ``sections_ms`` per section and ``no_section_ms``, which add up
    to ``step_ms``; see ``traces.intervals``; ``basis``: ``sections``, or ``structure`` for
    steps without the engines' sections, split as ``traces.structure`` says, or ``mixed``,
    with ``steps_by_basis``; None without a complete step), ``sections``
    (per section name: ``count`` and, over instances, ``host_busy_ms`` (the time it runs on
    the host: a ``record_function``'s duration, a TF name scope's ops' union),
    ``host_span_ms`` (first start to last end), ``kernel_ms``, ``kernel_span_ms`` and
    ``device_busy_ms``; the kernel stats are None for a section that never launched a
    kernel, ``device_busy_ms`` None for one that never overlapped a kernel; otherwise
    instances without count as 0), ``device_activity`` (count and total ms of kernels,
    memcpys and memsets; ``kernels_without_launch``: kernels with no runtime event of the
    same correlation, e.g. all kernels of a Gaudi trace) and ``skipped_events``
    (``non_finite_time``: events left out for a NaN or infinite ``ts``/``dur``) and
    ``notes`` (lines on how to read a TF summary: see ``traces.tf_sections``; empty for
    kineto). Stats are ``{"min", "mean", "median", "max", "total"}`` in milliseconds.
    ``memory`` (see ``traces.memory``) is None without torch ``[memory]`` events
    (``profile_memory`` off, or a TF trace); else ``events``, ``peak_allocated_bytes`` per
    device over the trace and, per section, the peak allocated bytes per device while it
    was open (None for a section with no memory event inside). ``device_ranks`` (None
    without device ops; a kineto trace's, per ``distributedInfo.rank``): the device side as
    HTA reads it, see ``traces.device`` (kernels under ``short_kernel_us`` are short).

    Raises DataError naming the file if a trace is missing, truncated, malformed, neither a
    PyTorch profiler nor a TensorFlow trace viewer trace (nor an XSpace xprof converts), or
    the same trace as another one given (``x.json`` beside ``x.json.gz``).
    """
    paths = _checked(paths)
    totals = Totals(short_kernel_us)
    for path in paths:
        fe, nbytes, fmt = _read(path)
        # No engine sections: the steps are split by their structure, from the ops that
        # only a second read decodes (traces.structure).
        ops = _read_ops(path, fe) if fmt == "kineto" and structure.wanted(fe) else None
        totals.add(fe, nbytes, fmt, ops)
    return totals.summary(paths)


def write_summary(
    paths: Sequence[str | Path], out_dir: str | Path, short_kernel_us: float | None = None
) -> dict:
    """Summarize ``paths`` and write ``summary.json``, ``summary.md`` and ``step_breakdown.png``
    into ``out_dir`` (each atomically); returns the summary. ``short_kernel_us``: None for
    the default (``traces.device.SHORT_KERNEL_US``)."""
    short = SHORT_KERNEL_US if short_kernel_us is None else short_kernel_us
    summary = summarize_traces(paths, short)
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
    xspace = path.name.endswith(XPLANE_SUFFIX)
    with _read_errors(path, xspace):
        if xspace:
            window = reader.ByteWindow(io.BytesIO(_converted(path)))
            reader.parse(window, fe)
            nbytes = window.nbytes
        else:
            nbytes, _bare = reader.read_trace(path, fe)
        fmt = formats.require_supported(fe.evidence)
    return fe, nbytes, fmt


def _read_ops(path: Path, fe: FileEvents) -> structure.Ops:
    """The second read of a file for its steps' structure; a file that changed since the
    first read fails as any unreadable trace does."""
    with _read_errors(path, xspace=False):
        return structure.read_ops(path, fe)


@contextlib.contextmanager
def _read_errors(path: Path, xspace: bool) -> Iterator[None]:
    """A failure reading `path` as one DataError line naming it (and, for malformed JSON,
    where: a converted XSpace's JSON has no place in the file)."""
    try:
        yield
    except FileNotFoundError:
        raise DataError(f"{path}: trace file not found") from None
    except Malformed as err:
        where = " (in xprof's JSON)" if xspace else _where(path, err.offset)
        raise DataError(f"{path}: malformed trace: {err}{where}") from None
    except Unsupported as err:
        raise DataError(f"{path}: {err}") from None
    except (EOFError, zlib.error, zipfile.BadZipFile, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: truncated or corrupt compressed trace ({err})") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read trace ({err})") from None


def _converted(path: Path) -> bytes:
    """An XSpace as trace viewer JSON, by the one xprof conversion (accelpipe.core.xspace)."""
    if not path.is_file():
        raise FileNotFoundError(path)
    try:
        text = xspace_to_trace_json(path)
    except ImportError as err:
        raise DataError(
            f"{path}: converting a TensorFlow profiler XSpace needs xprof ({err}); run "
            "summarize-trace in the TensorFlow image or venv"
        ) from None
    if not text:  # xprof logs why and returns nothing
        raise DataError(f"{path}: xprof could not read this XSpace (corrupt or truncated?)")
    return text.encode() if isinstance(text, str) else text


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
