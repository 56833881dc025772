"""TensorFlow profiler XSpace files (`<host>.xplane.pb`) converted by xprof: the Chrome
trace the summarizer reads and the op table beside it.

No framework: xprof reads an XSpace without TensorFlow, so both the TF engine (its own
cycles) and the trace summarizer (a folder of XSpace files from anywhere) convert here, and
summarizing a trace loads neither TensorFlow nor the engine. xprof is imported when a file
is converted: it is in the TensorFlow images and venvs only (ImportError elsewhere).
"""

from __future__ import annotations

from pathlib import Path


def xspace_to_trace_json(xplane: Path) -> str:
    """A profiler XSpace (`<host>.xplane.pb`) as Chrome trace JSON, converted by xprof.

    `use_saved_result=False` keeps xprof from writing its cache files beside the input.
    """
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [str(xplane)], "trace_viewer", {"use_saved_result": False}
    )
    return data.decode() if isinstance(data, bytes) else data


def xspace_to_op_table(xplane: Path) -> str:
    """The cycle's op table as CSV: xprof's `framework_op_stats` tool (TensorBoard's
    Framework Op Stats: per TensorFlow op and host or device, occurrences, total and self
    time, FLOP rate), IDLE row included, written by xprof's own CSV writer."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [str(xplane)], "framework_op_stats", {"use_saved_result": False}
    )
    if data is None:
        raise RuntimeError(f"{xplane}: xprof could not build its framework_op_stats table")
    return raw_to_tool_data.json_to_csv_string(data)
