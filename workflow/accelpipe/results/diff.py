"""The diff of two published runs (`accelpipe diff`, results/<workload>/diff/<A>_vs_<B>): their
headline figures and every trace figure side by side, each with its change, an interval
(accelpipe.results.diff_stats) and a verdict; the kernels that appear, vanish or change count;
and whether the headline regressed beyond the gate's threshold.

Each figure keeps its one definition: the headline is performance.json's (the throughput of
the measured steps, performance.steps; the step time, their median), resampled over the same
measured steps of train_log.csv; the trace figures are trace_summary.json's as the summarizer
wrote them (docs/traces.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from accelpipe.compare.runs import PERFORMANCE, PROVENANCE, TRACE_SUMMARY, run_of
from accelpipe.core.errors import AccelpipeError, DataError
from accelpipe.core.io import atomic_path, read_json, write_json, write_text
from accelpipe.engines.train_log import LOG_FILE
from accelpipe.performance.steps import measured_steps, throughput
from accelpipe.results import diff_stats
from accelpipe.results.diff_stats import NOT_COMPARED, SLOWER, Spread

DIFF_FOLDER = "diff"  # results/<workload>/diff/<A>_vs_<B>
PAIR = "_vs_"
DIFF_JSON, DIFF_MD = "diff.json", "diff.md"
REGRESSED_STATUS = 3  # the CLI's exit status for a headline regression (2: bad input)
HEADLINE = ("throughput", "step time")
ONLY_IN_A, ONLY_IN_B = "only in A", "only in B"


class Regressed(AccelpipeError):
    """The headline of run B regressed beyond the threshold: the gate's failure."""

    exit_status = REGRESSED_STATUS


@dataclass(frozen=True)
class Settings:
    """The diff's config block (schema `diff`)."""

    threshold: float
    min_change: float
    confidence: float
    resamples: int


@dataclass(frozen=True)
class Run:
    """What the diff reads of a published run folder."""

    path: Path
    performance: dict[str, Any]
    steps: np.ndarray  # measured steps x (samples, wall_ms, step_ms)
    trace: dict[str, Any] | None  # trace_summary.json, None where the run has none


def pair_name(run_a: Path, run_b: Path) -> str:
    """`<A>_vs_<B>`, the diff folder's name."""
    return f"{run_a.name}{PAIR}{run_b.name}"


def default_out(run_a: Path, run_b: Path) -> Path:
    """results/<workload>/diff/<A>_vs_<B> beside run A."""
    return run_a.parent / DIFF_FOLDER / pair_name(run_a, run_b)


def _warmup_steps(run_dir: Path) -> int:
    """The warm-up its performance.json left out (provenance.json's publish slice)."""
    recorded = read_json(run_dir / PROVENANCE).get("config") or {}
    warmup = (recorded.get("performance") or {}).get("warmup_steps")
    if not isinstance(warmup, int):
        raise DataError(f"{run_dir / PROVENANCE}: no key 'config.performance.warmup_steps'")
    return warmup


def read_run(run_dir: Path) -> Run:
    """A published run's performance.json, measured steps and trace summary; one DataError
    naming the file where one is missing or unreadable."""
    if not run_dir.is_dir():
        raise DataError(f"{run_dir}: no such run folder (make it with `snakemake {run_dir}`)")
    rows = measured_steps(run_dir / LOG_FILE, _warmup_steps(run_dir))
    try:
        steps = np.array(
            [[float(r["samples"]), float(r["wall_ms"]), float(r["step_ms"])] for r in rows],
            dtype=np.float64,
        ).reshape(-1, 3)
    except ValueError as err:
        raise DataError(f"{run_dir / LOG_FILE}: a step that is not a number ({err})") from None
    trace_file = run_dir / TRACE_SUMMARY
    trace = read_json(trace_file) if trace_file.exists() else None
    return Run(run_dir, read_json(run_dir / PERFORMANCE), steps, trace)


def _throughputs(draws: np.ndarray) -> np.ndarray:
    """Each resample's throughput by its one definition (performance.steps.throughput)."""
    return np.array(
        [throughput(d[:, 0].sum(), d[:, 1].sum() / 1e3) or np.nan for d in draws],
        dtype=np.float64,
    )


def _median_step(draws: np.ndarray) -> np.ndarray:
    # the per-step distribution's median (performance.steps: numpy's linear percentile)
    return np.asarray(np.median(draws[:, :, 2], axis=1))


def _row(
    group: str,
    name: str,
    unit: str,
    values: tuple[float | None, float | None],
    interval: tuple[float, float] | None,
    method: str,
    settings: Settings,
    higher_is_faster: bool = False,
    counts: tuple[int | None, int | None] = (None, None),
    missing: str | None = None,
) -> dict[str, Any]:
    """One row of the diff: both values, the change, the interval and the verdict (a value
    missing: `missing`, else only in A or only in B)."""
    a, b = values
    if a is None or b is None:
        verdict = missing or (ONLY_IN_A if b is None else ONLY_IN_B)
        change = relative = None
    else:
        verdict = diff_stats.verdict(a, b, interval, higher_is_faster, settings.min_change)
        change, relative = b - a, diff_stats.relative_change(a, b)
    return {
        "group": group,
        "name": name,
        "unit": unit,
        "a": a,
        "b": b,
        "change": _round(change),
        "relative_change": _round(relative),
        "interval": [_round(x) for x in interval] if interval and a is not None else None,
        "method": method,
        "verdict": verdict,
        "count_a": counts[0],
        "count_b": counts[1],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


def headline_rows(a: Run, b: Run, settings: Settings) -> list[dict[str, Any]]:
    """Throughput and step time: performance.json's figures, the interval a bootstrap over
    the measured steps."""
    rows = []
    figures = (
        ("throughput", "samples/s", ("throughput", "samples_per_s"), _throughputs, True),
        ("step time", "ms (median)", ("per_step", "step_ms"), _median_step, False),
    )
    for name, unit, (block, key), statistic, higher in figures:
        values = []
        for run in (a, b):
            figure = (run.performance.get(block) or {}).get(key)
            values.append(figure.get("median") if isinstance(figure, dict) else figure)
        interval = diff_stats.bootstrap_difference(
            a.steps, b.steps, statistic, settings.resamples, settings.confidence
        )
        rows.append(
            _row(
                "headline",
                name,
                unit,
                (values[0], values[1]),
                interval,
                "bootstrap",
                settings,
                higher,
                (len(a.steps), len(b.steps)),
                NOT_COMPARED,  # a run without a measured step
            )
        )
    return rows


def _stats_spread(stats: dict[str, Any] | None, count: int) -> Spread | None:
    """A summary's {min, mean, max} ms over `count` instances."""
    if not stats:
        return None
    return Spread(count, stats["mean"], stats["min"], stats["max"])


def _spread_rows(
    group: str,
    unit: str,
    spreads: tuple[dict[str, Spread], dict[str, Spread]],
    settings: Settings,
) -> list[dict[str, Any]]:
    """A row per name in either run (A's order, then B's new ones), interval from the bound."""
    in_a, in_b = spreads
    rows = []
    for name in [*in_a, *(n for n in in_b if n not in in_a)]:
        sa, sb = in_a.get(name), in_b.get(name)
        interval = diff_stats.bound_difference(sa, sb, settings.confidence) if sa and sb else None
        rows.append(
            _row(
                group,
                name,
                unit,
                (sa.mean if sa else None, sb.mean if sb else None),
                interval,
                "bound",
                settings,
                counts=(sa.count if sa else None, sb.count if sb else None),
            )
        )
    return rows


def _trace_step(trace: dict[str, Any]) -> dict[str, Spread]:
    steps = trace.get("steps") or {}
    spread = _stats_spread(steps.get("ms"), steps.get("count") or 0)
    return {"profiled step": spread} if spread else {}


def _sections(trace: dict[str, Any], key: str) -> dict[str, Spread]:
    """Each section's per-instance `key` (host_busy_ms, kernel_ms) where it has one."""
    found = {}
    for name, section in (trace.get("sections") or {}).items():
        spread = _stats_spread(section.get(key), section["count"])
        if spread:
            found[name] = spread
    return found


NO_SECTION = "(no section)"


def _parts(trace: dict[str, Any]) -> dict[str, Spread]:
    """The step breakdown's parts, ms per complete step. The summary keeps each part's mean
    only: a part named as a section with one instance per step takes that section's spread
    (the part is its busy time inside the step, less what an earlier part took); any other
    part lies between 0 and the longest step, the bound taken."""
    breakdown = trace.get("step_breakdown")
    if not breakdown:
        return {}
    steps, longest = breakdown["steps"], (trace["steps"]["ms"] or {}).get("max", 0.0)
    sections = trace.get("sections") or {}
    parts = {**breakdown["sections_ms"], NO_SECTION: breakdown["no_section_ms"]}
    found = {}
    for name, mean in parts.items():
        section = sections.get(name)
        if section and section["count"] == steps:
            busy = section["host_busy_ms"]
            low, high = mean - (busy["mean"] - busy["min"]), mean + (busy["max"] - busy["mean"])
            found[name] = Spread(steps, mean, low, high)
        else:
            found[name] = Spread(steps, mean, 0.0, max(longest, mean))
    return found


def _ranks(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return trace.get("device_ranks") or {}


def _kinds(trace: dict[str, Any]) -> dict[str, Spread]:
    """Per rank and kind, the ms per device op (kernel_breakdown's total over its count),
    between the shortest and longest op of the kind's top kernels."""
    found = {}
    for rank, figures in _ranks(trace).items():
        for kind, entry in figures["kernel_breakdown"].items():
            top = figures["top_kernels"].get(kind) or []
            if not entry["count"] or not top:
                continue
            low = min(k["min_ms"] for k in top)
            high = max(k["max_ms"] for k in top)
            mean = entry["total_ms"] / entry["count"]
            found[f"rank {rank} {kind}"] = Spread(entry["count"], mean, low, high)
    return found


def _top_kernels(trace: dict[str, Any]) -> dict[str, Spread]:
    """Per rank, kind and kernel name (summary.json's top kernels), the ms per launch."""
    return {
        f"rank {rank} {kind} {k['name']}": Spread(
            k["count"], k["mean_ms"], k["min_ms"], k["max_ms"]
        )
        for rank, figures in _ranks(trace).items()
        for kind, kernels in figures["top_kernels"].items()
        for k in kernels
    }


# (group, unit, the figures of a trace summary by name)
TRACE_GROUPS = (
    ("trace", "ms per profiled step", _trace_step),
    ("step breakdown", "ms per step", _parts),
    ("section", "ms host busy per instance", lambda t: _sections(t, "host_busy_ms")),
    ("section kernels", "ms kernel time per instance", lambda t: _sections(t, "kernel_ms")),
    ("device kind", "ms per device op", _kinds),
    ("top kernel", "ms per launch", _top_kernels),
)


def trace_rows(a: dict[str, Any], b: dict[str, Any], settings: Settings) -> list[dict[str, Any]]:
    """Every trace figure side by side, each with its bound interval."""
    return [
        row
        for group, unit, figures in TRACE_GROUPS
        for row in _spread_rows(group, unit, (figures(a), figures(b)), settings)
    ]


def kernel_changes(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Kernels among a rank's top kernels in one run only (appears, vanishes) or in both
    with another count."""
    counts = [
        {
            (rank, kind, k["name"]): k["count"]
            for rank, figures in _ranks(trace).items()
            for kind, kernels in figures["top_kernels"].items()
            for k in kernels
        }
        for trace in (a, b)
    ]
    changes = []
    for key in [*counts[0], *(k for k in counts[1] if k not in counts[0])]:
        count_a, count_b = counts[0].get(key), counts[1].get(key)
        if count_a == count_b:
            continue
        change = "appears" if count_a is None else "vanishes" if count_b is None else "count"
        rank, kind, name = key
        changes.append(
            {
                "rank": rank,
                "kind": kind,
                "name": name,
                "change": change,
                "count_a": count_a,
                "count_b": count_b,
            }
        )
    return changes


def gate(rows: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """Whether the headline regressed: a headline row slower by more than `threshold` of
    A's value (or one that could not be compared)."""
    regressed, not_compared = [], []
    for row in rows:
        if row["group"] != "headline":
            continue
        if row["verdict"] in (NOT_COMPARED, ONLY_IN_A, ONLY_IN_B):
            not_compared.append(row["name"])
        elif row["verdict"] == SLOWER and abs(row["relative_change"] or 0.0) > threshold:
            regressed.append(row["name"])
    return {
        "threshold": threshold,
        "regressed": regressed,
        "not_compared": not_compared,
        "passed": not regressed and not not_compared,
    }


def _conditions(run: Run) -> dict[str, Any]:
    workload, name = run_of(run.path)
    keys = ("backend", "device", "precision", "world_size", "global_batch")
    return {"path": str(run.path), "workload": workload, "run": name} | {
        k: run.performance.get(k) for k in keys
    }


def diff_runs(run_a: Path, run_b: Path, settings: Settings) -> dict[str, Any]:
    """diff.json of two published runs."""
    a, b = read_run(run_a), read_run(run_b)
    rows = headline_rows(a, b, settings)
    notes = []
    if a.trace is not None and b.trace is not None:
        rows += trace_rows(a.trace, b.trace, settings)
        kernels = kernel_changes(a.trace, b.trace)
    else:
        kernels = []
        missing = " and ".join(str(r.path) for r in (a, b) if r.trace is None)
        notes.append(f"no {TRACE_SUMMARY} in {missing}: the trace figures are not compared")
    return {
        "a": _conditions(a),
        "b": _conditions(b),
        "settings": vars(settings),
        "method": METHOD,
        "rows": rows,
        "kernel_changes": kernels,
        "gate": gate(rows, settings.threshold),
        "notes": notes,
    }


METHOD = (
    "change = B - A. Headline rows: a percentile bootstrap of the difference over each run's "
    "measured steps (train_log.csv; fixed seed). Trace rows: trace_summary.json keeps counts, "
    "means, min and max, not instances: the normal interval of the difference of means with "
    "each run's variance at its bound (max - mean) x (mean - min). A verdict is faster or "
    "slower where the interval leaves out 0 and the change is at least min_change of A's value"
)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _interval(row: dict[str, Any]) -> str:
    if row["interval"] is None:
        return "-"
    low, high = row["interval"]
    return f"[{low:+.4g}, {high:+.4g}]"


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| figure | unit | A | B | change | interval of B - A | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        flagged = row["verdict"] not in (diff_stats.WITHIN_NOISE,)
        verdict = f"**{row['verdict']}**" if flagged else row["verdict"]
        lines.append(
            f"| {row['name']} | {row['unit']} | {_number(row['a'])} | {_number(row['b'])} "
            f"| {_percent(row['relative_change'])} | {_interval(row)} | {verdict} |"
        )
    return lines


def _run_line(label: str, run: dict[str, Any]) -> str:
    facts = ", ".join(f"{k} {run[k]}" for k in ("backend", "device", "precision") if run[k])
    return f"- {label}: `{run['path']}` ({facts})"


def _gate_line(gate: dict[str, Any]) -> str:
    threshold = f"{gate['threshold']:.1%}"
    if gate["regressed"]:
        return f"**REGRESSED** beyond {threshold}: {', '.join(gate['regressed'])}"
    if gate["not_compared"]:
        return f"**NOT COMPARED**: {', '.join(gate['not_compared'])} (no measured step)"
    return f"passed: no headline figure slower by more than {threshold}"


def render_markdown(diff: dict[str, Any]) -> str:
    """diff.md: the runs, the gate, a table per group of rows, the kernel changes."""
    a, b = diff["a"], diff["b"]
    lines = [
        f"# {a['workload']}: {a['run']} (A) vs {b['run']} (B)",
        "",
        _run_line("A", a),
        _run_line("B", b),
        "",
        f"Gate: {_gate_line(diff['gate'])}.",
        "",
        f"How: {diff['method']} ({diff['settings']['min_change']:.0%}); "
        f"confidence {diff['settings']['confidence']:.0%}.",
    ]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in diff["rows"]:
        groups.setdefault(row["group"], []).append(row)
    for group, rows in groups.items():
        lines += ["", f"## {group[0].upper()}{group[1:]}", "", *_table(rows)]
    if diff["kernel_changes"]:
        lines += ["", "## Kernels that appear, vanish or change count (top kernels)", ""]
        lines += [
            f"- rank {k['rank']} {k['kind']} `{k['name']}`: {k['change']} "
            f"({_number(k['count_a'])} -> {_number(k['count_b'])})"
            for k in diff["kernel_changes"]
        ]
    lines += ["", *(f"Note: {note}" for note in diff["notes"])]
    return "\n".join(lines).rstrip() + "\n"


def write_diff(out: Path, diff: dict[str, Any]) -> None:
    """`out`/diff.json and diff.md, the folder replaced atomically."""
    with atomic_path(out) as tmp:
        tmp.mkdir()
        write_json(tmp / DIFF_JSON, diff)
        write_text(tmp / DIFF_MD, render_markdown(diff))


def diffs_of(results: Path, workload: str) -> list[Path]:
    """The diff folders built under results/<workload>/diff/ (each with its diff.md)."""
    return sorted(p.parent for p in (results / workload / DIFF_FOLDER).glob(f"*/{DIFF_MD}"))
