"""The step-breakdown chart (step_breakdown.png): the mean step as one bar made of its parts,
and the trace's other sections below it.

The engines record `loader_next` (waiting for the next batch) and `step` in every profiler
step, and `forward`, `loss`, `backward`, `optimizer_step` inside `step`. A step's parts come
from the summary's `step_breakdown` (`intervals.step_breakdown`: each instant of a step
counted once): `data_wait` is `loader_first` + `loader_next`, then `forward`, `loss`,
`backward`, `optimizer_step`, and `other` the rest of the step (`step` outside its parts:
logging, `zero_grad`, the profiler's own work; other sections; no section), so the parts
add up to the step. The same parts make the per-run bars of results/compare
(`step_parts`, `draw_step_bars`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# (part, the section whose share of the step it is), in the order a step runs them.
PARTS = (
    ("data_wait", "loader_first"),
    ("data_wait", "loader_next"),
    ("forward", "forward"),
    ("loss", "loss"),
    ("backward", "backward"),
    ("optimizer_step", "optimizer_step"),
)
# A trace without the engines' sections is split by the structure of a PyTorch step
# (traces.structure): its parts in the same bars (the loss is in the forward pass).
STRUCTURE_PARTS = (
    ("data_wait", "data"),
    ("forward", "forward pass"),
    ("backward", "backward pass"),
    ("optimizer_step", "optimizer"),
)
OTHER = "other"
PART_NAMES = (*dict.fromkeys(part for part, _ in PARTS), OTHER)
LABELS = {
    "data_wait": "data wait (loader_first, loader_next)",
    "forward": "forward",
    "loss": "loss",
    "backward": "backward",
    "optimizer_step": "optimizer step",
    OTHER: "other (rest of the step)",
}
COLORS = {
    "data_wait": "tab:red",
    "forward": "tab:blue",
    "loss": "tab:purple",
    "backward": "tab:orange",
    "optimizer_step": "tab:green",
    OTHER: "tab:gray",
}
STEP_SECTION = "step"  # the engines' section around forward .. optimizer_step


@dataclass(frozen=True)
class StepParts:
    """The mean step (ms) and its parts (ms, PART_NAMES order), which add up to it."""

    step_ms: float
    parts: dict[str, float]
    note: str  # what the step is measured as, and what the trace lacked


def _mean_ms(sections: dict[str, Any], name: str, key: str) -> float | None:
    stats = (sections.get(name) or {}).get(key)
    return stats["mean"] if stats else None


def step_parts(summary: dict[str, Any]) -> StepParts | None:
    """The mean complete step of a trace summary split into its parts (from its
    `step_breakdown`, whose parts add up to the step); None without a complete step.

    A summary written before the step breakdown existed (no `step_breakdown` key) is split
    by `_legacy_parts`."""
    if "step_breakdown" not in summary:
        return _legacy_parts(summary)
    breakdown = summary["step_breakdown"]
    if not breakdown:
        return None
    shares = breakdown["sections_ms"]
    basis = breakdown.get("basis", "sections")  # a summary from before the structure
    mapping = {"sections": PARTS, "structure": STRUCTURE_PARTS}.get(basis, PARTS + STRUCTURE_PARTS)
    parts = dict.fromkeys(PART_NAMES, 0.0)
    for part, name in mapping:
        parts[part] += shares.get(name, 0.0)
    step = breakdown["step_ms"]
    parts[OTHER] = round(step - sum(parts.values()), 6)  # `step` alone, other sections, none
    missing = [name for _, name in mapping[1:] if name not in shares]
    notes = [f"the mean of {breakdown['steps']} complete profiler steps, each instant once"]
    if basis != "sections":
        notes.append("split by the structure of a PyTorch step (loss in forward pass)")
    if missing:
        notes.append(f"no {', '.join(missing)} time in the steps: in other if it ran")
    return StepParts(step_ms=step, parts=parts, note="; ".join(notes))


def _legacy_parts(summary: dict[str, Any]) -> StepParts | None:
    """Parts from the section means of a summary without `step_breakdown` (`cpu_ms`, the
    sections' durations, which may overlap): `other` is the step minus them, 0 where they
    add up to more (then the step shown is their sum); the note says so."""
    sections = summary["sections"]
    means = {part: _mean_ms(sections, name, "cpu_ms") for part, name in PARTS[1:]}
    steps = summary.get("steps") or {}
    notes = ["from section means (a trace summary without step_breakdown: parts may overlap)"]
    if steps.get("ms"):
        step = steps["ms"]["mean"]
    elif STEP_SECTION in sections:
        step = (means["data_wait"] or 0.0) + sections[STEP_SECTION]["cpu_ms"]["mean"]
        notes.append("step = loader_next + the mean `step` section (no complete profiler step)")
    else:
        return None
    known = {part: value or 0.0 for part, value in means.items()}
    children = sum(known.values())
    if children > step:
        notes.append(f"the parts add up to {children:.3f} ms, more than the step's {step:.3f}")
        step = children
    return StepParts(round(step, 6), {**known, OTHER: round(step - children, 6)}, "; ".join(notes))


def draw_step_bars(ax: Any, names: list[str], runs: list[StepParts | None]) -> None:
    """One horizontal stacked bar per name (first on top): its step's parts, in ms. A name
    without parts gets an empty row saying so."""
    y = np.arange(len(names))
    left = np.zeros(len(names))
    for part in PART_NAMES:
        widths = np.array([r.parts[part] if r else 0.0 for r in runs])
        ax.barh(y, widths, left=left, height=0.6, color=COLORS[part], label=LABELS[part])
        left += widths
    for i, run in enumerate(runs):
        if run is None:
            ax.text(0, y[i], "  no profiler step in the trace", va="center", fontsize="small")
        else:
            ax.text(run.step_ms, y[i], f" {run.step_ms:.4g} ms", va="center", fontsize="small")
    ax.set_yticks(y, [_label(n) for n in names])
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlim(0, max([r.step_ms for r in runs if r] or [1.0]) * 1.2)
    ax.set_xlabel("mean time per step (ms)")


def _label(name: str) -> str:
    """Escape '$' so matplotlib never reads a name as mathtext; shorten long names."""
    return (name if len(name) <= 40 else name[:37] + "...").replace("$", r"\$")


def kernel_parts(summary: dict[str, Any]) -> StepParts | None:
    """The device kernel time of each part (no `other`), when the trace has any."""
    parts = dict.fromkeys(PART_NAMES, 0.0)
    for part, name in PARTS:
        parts[part] += _mean_ms(summary["sections"], name, "kernel_ms") or 0.0
    if not any(parts.values()):
        return None
    return StepParts(sum(parts.values()), parts, "device kernels")


def _other_sections(summary: dict[str, Any], max_sections: int) -> list[tuple[str, dict]]:
    """Sections that are neither `step` nor one of its parts, most expensive first."""
    skipped = {STEP_SECTION, *(name for _, name in PARTS)}
    items = [(n, s) for n, s in summary["sections"].items() if n not in skipped]
    return sorted(items, key=lambda kv: -kv[1]["host_busy_ms"]["mean"])[:max_sections]


def _draw_sections(ax: Any, items: list[tuple[str, dict]]) -> None:
    """Flat bars of mean ms per instance: host busy time, and device kernel and busy time
    where present."""
    y = np.arange(len(items))
    cpu = [sec["host_busy_ms"]["mean"] for _, sec in items]
    kern = [(sec.get("kernel_ms") or {}).get("mean", 0.0) for _, sec in items]
    busy = [(sec.get("device_busy_ms") or {}).get("mean", 0.0) for _, sec in items]
    ax.barh(y, cpu, height=0.7, color="tab:blue", label="host busy (mean ms)")
    if any(kern):
        ax.barh(y, kern, height=0.35, color="tab:orange", label="device kernels (mean ms)")
    if any(busy):
        ax.barh(y, busy, height=0.15, color="tab:green", label="device busy (mean ms)")
    ax.set_yticks(y, [_label(n) for n, _ in items])
    ax.set_ylim(len(items) - 0.5, -0.5)
    ax.set_xlabel("mean time per instance (ms)")
    ax.set_title("other sections (inside the parts above or beside the step)", fontsize="medium")
    ax.legend(loc="lower right", fontsize="small")


def plot_step_breakdown(summary: dict, png_path: str | Path, max_sections: int = 30) -> None:
    """The mean step as one stacked bar of its parts (host time; below it the parts' device
    kernel time where the trace has kernels), then the other sections as flat bars."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    parts = step_parts(summary)
    kernels = kernel_parts(summary)
    others = _other_sections(summary, max_sections)
    # Figure + Agg canvas directly: no pyplot global state or backend switching.
    fig = Figure(figsize=(9, 3.2 + (0.4 * len(others) + 1.2 if others else 0)))
    FigureCanvasAgg(fig)
    heights = [2.0, 0.4 * len(others) + 1.0] if others else [1.0]
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)
    top = axes[0][0]
    if parts is None:
        top.text(0.5, 0.5, "no steps in trace", ha="center", va="center")
        top.set_axis_off()
    else:
        rows = [("step (host time)", parts)] + ([("device kernels", kernels)] if kernels else [])
        draw_step_bars(top, [n for n, _ in rows], [p for _, p in rows])
        top.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize="small")
    if others:
        _draw_sections(axes[1][0], others)
    top.set_title(f"Step breakdown ({summary['device']})")
    fig.tight_layout()
    fig.savefig(png_path, format="png", dpi=100)
