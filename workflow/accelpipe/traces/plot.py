"""The step-breakdown bar chart (step_breakdown.png)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _rows(summary: dict, max_sections: int) -> tuple[list[str], list[float], list, list, bool]:
    """Labels and mean ms (CPU, kernels, busy) per bar; the mean step comes first if known."""
    items = sorted(summary["sections"].items(), key=lambda kv: -kv[1]["cpu_ms"]["mean"])
    items = items[:max_sections]
    # Escape '$' so matplotlib never reads a section name as mathtext.
    labels = [(n if len(n) <= 40 else n[:37] + "...").replace("$", r"\$") for n, _ in items]
    cpu = [sec["cpu_ms"]["mean"] for _, sec in items]
    kern = [(sec["kernel_ms"] or {}).get("mean", 0.0) for _, sec in items]
    busy = [(sec.get("device_busy_ms") or {}).get("mean", 0.0) for _, sec in items]
    steps = summary.get("steps")
    has_step = bool(steps and steps.get("ms"))
    if has_step:
        labels.insert(0, "step (ProfilerStep)")
        cpu.insert(0, steps["ms"]["mean"])
        kern.insert(0, 0.0)
        busy.insert(0, 0.0)
    return labels, cpu, kern, busy, has_step


def plot_step_breakdown(summary: dict, png_path: str | Path, max_sections: int = 30) -> None:
    """Horizontal bars of mean ms per section (CPU, and device kernel and busy time where
    present), with the mean step time as the top bar and a dashed reference line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels, cpu, kern, busy, has_step = _rows(summary, max_sections)
    # Figure + Agg canvas directly: no pyplot global state or backend switching.
    fig = Figure(figsize=(9, 1.6 + 0.4 * max(len(labels), 1)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if not labels:
        ax.text(0.5, 0.5, "no steps or sections in trace", ha="center", va="center")
        ax.set_axis_off()
    else:
        y = np.arange(len(labels))
        first = 1 if has_step else 0
        if has_step:
            ax.barh(y[:1], cpu[:1], height=0.7, color="tab:gray", label="step time (mean ms)")
            ax.axvline(cpu[0], color="tab:gray", linestyle="--", linewidth=1)
        ax.barh(y[first:], cpu[first:], height=0.7, color="tab:blue", label="CPU (mean ms)")
        if any(kern):
            ax.barh(y, kern, height=0.35, color="tab:orange", label="device kernels (mean ms)")
        if any(busy):
            ax.barh(y, busy, height=0.15, color="tab:green", label="device busy (mean ms)")
        ax.set_yticks(y, labels)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # first row on top
        ax.set_xlabel("mean time per instance (ms)")
        ax.legend(loc="lower right", fontsize="small")
    ax.set_title(f"Step breakdown ({summary['device']})")
    fig.tight_layout()
    fig.savefig(png_path, format="png", dpi=100)
