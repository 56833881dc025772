"""The human-readable report (summary.md)."""

from __future__ import annotations


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:,.3f}"


def _cell(name: str) -> str:
    return name.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _facts(summary: dict) -> list[str]:
    lines = []
    traces = ", ".join(f"`{t}`" for t in summary["traces"])
    lines.append(f"- Traces ({len(summary['traces'])}): {traces}")
    lines.append(f"- Device: {summary['device']}")
    mb = summary["bytes"] / 2**20
    lines.append(f"- Events: {summary['events']:,} ({mb:,.1f} MiB of JSON)")
    skipped = (summary.get("skipped_events") or {}).get("non_finite_time")
    if skipped:
        lines.append(f"- Events skipped for a NaN or infinite ts/dur: {skipped:,}")
    activity = summary.get("device_activity") or {}
    orphans, kernels = activity.get("kernels_without_launch"), activity.get("kernel")
    if orphans and kernels:
        lines.append(
            f"- Kernels not joined to a launch (no correlation): {orphans:,} of "
            f"{kernels['count']:,}; they count in device busy time (overlap), not in kernel time"
        )
    lines.append(_steps_line(summary.get("steps")))
    lines += [f"- Note: {note}" for note in summary.get("notes") or []]
    return lines


def _steps_line(steps: dict | None) -> str:
    if not steps:
        return "- Steps: none (no ProfilerStep#N, nor TensorFlow events with a step_num)"
    left_out = steps.get("incomplete_left_out") or 0
    note = (
        f" ({left_out} incomplete last step{'s' if left_out != 1 else ''} left out)"
        if left_out
        else ""
    )
    ms = steps["ms"]
    if ms is None:
        return f"- Steps: none complete{note}"
    return (
        f"- Steps: {steps['count']}{note}, mean {_fmt(ms['mean'])} ms "
        f"(min {_fmt(ms['min'])}, median {_fmt(ms['median'])}, max {_fmt(ms['max'])})"
    )


SECTION_LEGEND = (
    "Host busy: the time the section runs on the host (a `record_function` or TF `Trace` "
    "event: its duration; a TF name scope: the union of its ops, concurrent ops counted "
    "once). Host span: its first start to its last end. Kernel: summed kernel time; kernel "
    "span: first kernel start to last kernel end; device busy: time a kernel ran while it "
    "was open (a TF name scope: its own kernels). Sections nest and overlap, so none of "
    "these add up to the step; the step breakdown does."
)
BREAKDOWN_LEGEND = (
    "Each instant of a complete step counted once, so the rows add up to the step: it goes "
    "to the first busy one of loader_first, loader_next, forward, loss, backward, "
    "optimizer_step, else to the innermost other section open then (the latest started), "
    "else to no section."
)
STRUCTURE_LEGEND = (
    "No accelpipe sections in these steps: split by the structure of a PyTorch step "
    "(docs/traces.md), each instant counted once: collectives, data (`enumerate(DataLoader)#`), "
    "optimizer (`Optimizer.step#`, `Optimizer.zero_grad#`), backward pass (`autograd::engine` "
    "events, any thread), forward pass (the step thread's ops), each from its first to its "
    "last event in a run; then another section open then; then the part whose run follows "
    "the gap; else no section."
)


def _legend(breakdown: dict) -> str:
    """What the steps were split by (a summary from before the fallback: sections)."""
    basis = breakdown.get("basis", "sections")
    if basis == "sections":
        return BREAKDOWN_LEGEND
    if basis == "structure":
        return STRUCTURE_LEGEND
    counts = breakdown["steps_by_basis"]
    n = counts.get("structure", 0)
    return (
        f"{n} of {sum(counts.values())} steps split by the structure of a PyTorch step, "
        f"the rest by accelpipe's sections. Sections: {BREAKDOWN_LEGEND} Structure: "
        f"{STRUCTURE_LEGEND}"
    )


def render_markdown(summary: dict) -> str:
    """A short report: header facts, step times, the step breakdown and a section table."""
    lines = ["# Profiler trace summary", "", *_facts(summary), ""]
    lines += _breakdown_table(summary.get("step_breakdown"))
    lines += _device_tables(summary.get("device_ranks"))
    if not summary["sections"]:
        lines.append("No `record_function` sections in the trace.")
        return "\n".join(lines) + "\n"
    lines += ["## Sections (per instance)", "", SECTION_LEGEND, ""]
    lines.append(
        "| Section | Count | Host busy mean ms | Host busy total ms | Host span mean ms "
        "| Kernel mean ms | Kernel span mean ms | Device busy mean ms |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, sec in summary["sections"].items():
        kern, span, busy = sec["kernel_ms"], sec["kernel_span_ms"], sec.get("device_busy_ms")
        lines.append(
            f"| {_cell(name)} | {sec['count']} | {_fmt(sec['host_busy_ms']['mean'])} | "
            f"{_fmt(sec['host_busy_ms']['total'])} | {_fmt(sec['host_span_ms']['mean'])} | "
            f"{_fmt(kern and kern['mean'])} | {_fmt(span and span['mean'])} | "
            f"{_fmt(busy and busy['mean'])} |"
        )
    lines += _memory_table(summary.get("memory"))
    return "\n".join(lines) + "\n"


def _breakdown_table(breakdown: dict | None) -> list[str]:
    """The mean step split into parts that add up to it; nothing without complete steps."""
    if not breakdown:
        return []
    step = breakdown["step_ms"]
    rows = [*breakdown["sections_ms"].items(), ("(no section)", breakdown["no_section_ms"])]
    lines = [
        f"## Step breakdown (mean of {breakdown['steps']} complete steps: {_fmt(step)} ms)",
        "",
        _legend(breakdown),
        "",
        "| Part | ms per step | % of step |",
        "|---|---:|---:|",
    ]
    for name, ms in rows:
        share = f"{100 * ms / step:.1f}" if step > 0 else "–"
        lines.append(f"| {_cell(name)} | {_fmt(ms)} | {share} |")
    return [*lines, ""]


DEVICE_LEGEND = (
    "Per rank, as HolisticTraceAnalysis defines them (docs/traces.md): window = first device "
    "op start to last end; idle = no kernel, memcpy or memset running; compute = union of "
    "computation kernels; comm hidden = share of communication kernel time overlapped by "
    "computation; launch delay = kernel start minus its launch call's start."
)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _device_tables(ranks: dict | None) -> list[str]:
    """Per rank: time by kind, temporal breakdown, idle causes, overlap, launches; the top
    kernels of each kind. Nothing for a trace without device ops."""
    if not ranks:
        return []
    lines = [
        "## Device time (per rank)",
        "",
        DEVICE_LEGEND,
        "",
        "| Rank | Window ms | Idle % | Compute % | Non-compute % | Computation ms | "
        "Communication ms | Memory ms | Comm hidden % | Idle by cause, summed over streams: "
        "host / kernel / other ms | "
        "Launch delay p50 / p99 µs | Short kernels (% of kernel time) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rank, r in ranks.items():
        tb, kinds, launch = r["temporal_breakdown"], r["kernel_breakdown"], r["kernel_launches"]
        window = tb["kernel_time_ms"]
        idle = [sum(s[f"{c}_ms"] for s in r["idle_time_breakdown"].values()) for c in _CAUSES]
        delay = launch["launch_delay_us"]
        short = launch["short_kernels"]
        lines.append(
            f"| {rank} | {_fmt(window)} | {_pct(tb['idle_time_share'])} | "
            f"{_pct(tb['compute_time_share'])} | "
            f"{_pct(tb['non_compute_time_ms'] / window if window > 0 else None)} | "
            + " | ".join(_fmt(kinds[k]["total_ms"]) for k in _KINDS)
            + f" | {_pct(r['comp_comm_overlap_ratio'])} | "
            + " / ".join(_fmt(v) for v in idle)
            + " | "
            + (f"{delay['p50']:,.1f} / {delay['p99']:,.1f}" if delay else "–")
            + f" | {short['count']:,} under {short['threshold_us']:g} µs "
            f"({_pct(short['time_share'])}) |"
        )
    lines.append("")
    for rank, r in ranks.items():
        lines += _top_table(rank, r["top_kernels"])
    return lines


_KINDS = ("computation", "communication", "memory")
_CAUSES = ("host_wait", "kernel_wait", "other")
TOP_ROWS = 5


def _top_table(rank: str, top: dict[str, list[dict]]) -> list[str]:
    lines = [
        f"### Top kernels, rank {rank}",
        "",
        "| Kind | Kernel | Count | Total ms | Mean ms | Min ms | Max ms |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind, rows in top.items():
        for row in rows[:TOP_ROWS]:
            name = row["name"] if len(row["name"]) <= 80 else row["name"][:77] + "..."
            lines.append(
                f"| {kind} | {_cell(name)} | {row['count']:,} | {_fmt(row['total_ms'])} | "
                f"{_fmt(row['mean_ms'])} | {_fmt(row['min_ms'])} | {_fmt(row['max_ms'])} |"
            )
    return [*lines, ""]


def _mib(value: int | None) -> str:
    return "–" if value is None else f"{value / 2**20:,.3f}"


def _memory_table(memory: dict | None) -> list[str]:
    """Peak allocated MiB per section and device; nothing for a trace without memory events."""
    if not memory:
        return []
    devices = list(memory["peak_allocated_bytes"])
    peaks = ", ".join(f"{d} {_mib(b)} MiB" for d, b in memory["peak_allocated_bytes"].items())
    lines = [
        "",
        "## Peak allocated memory while each section is open (MiB)",
        "",
        f"From {memory['events']:,} `[memory]` events; peak over the trace: {peaks}. "
        "A section with no memory event while open shows –.",
        "",
        "| Section | " + " | ".join(_cell(d) for d in devices) + " |",
        "|---|" + "---:|" * len(devices),
    ]
    for name, peak in memory["sections"].items():
        cells = " | ".join(_mib((peak or {}).get(d)) for d in devices)
        lines.append(f"| {_cell(name)} | {cells} |")
    return lines
