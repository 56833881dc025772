"""compare.html: one standalone page (no script, no external resource; the plots inlined as
data: URIs) that fits a 1,400 px window: a compact runs table (the numbers a run is judged
by), a detail table (the rest of its figures and where it ran), the step breakdown, the
plots, each run's training curves and the notes.

Each number sits in its own cell with `data-field` naming its column in compare.json and
`data-value` holding the number exactly as read from the run's files (compare.csv and
compare.json keep it too); the cell shows it rounded to what it can mean (`show`, per
column kind, `FORMATS`). An empty cell shows "–" (or "none" for a reference ratio) and the
notes say why. Every heading names its unit, and its definition is the heading's `title`
and the legend under the table: accelpipe.performance.DEFINITIONS where the figure is
defined there, else the column's own below.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelpipe.compare.rows import MARKS
from accelpipe.config.seeds import split_seed_run
from accelpipe.core.provenance import SHORT_HASH
from accelpipe.performance import DEFINITIONS
from accelpipe.results import ttt
from accelpipe.traces.plot import LABELS, PART_NAMES

Row = dict[str, Any]
MARK_TEXT = {"fastest": "⚡ fastest", "most_accurate": "★ most accurate", "cheapest": "$ cheapest"}
VERDICT_TEXT = {True: "comparable", False: "indicative", None: "–"}


# -- rounding -------------------------------------------------------------------------------
def significant(value: float, digits: int) -> str:
    """`value` to `digits` significant digits, in fixed notation (12345.6, 4 -> "12350")."""
    if value == 0:
        return "0"
    rounded = float(f"{value:.{digits - 1}e}")
    decimals = digits - 1 - math.floor(math.log10(abs(rounded)))
    return f"{rounded:.{max(0, decimals)}f}"


def _duration(value: float) -> str:
    """Seconds or ms: 3 significant digits, whole units kept (3725.4 -> "3725")."""
    if value == 0:
        return "0"
    decimals = 2 - math.floor(math.log10(abs(value)))
    return f"{value:.{max(0, decimals)}f}"


def _percent(fraction: float) -> str:
    """A fraction as a percentage with one decimal; below 1 %, 2 significant digits, so that
    a small nonzero fraction never reads 0.0."""
    percent = fraction * 100
    return f"{percent:.1f}" if percent == 0 or abs(percent) >= 1 else significant(percent, 2)


# kind -> how a number of that kind is shown (the exact value is in data-value)
FORMATS: dict[str, Callable[[float], str]] = {
    "metric": lambda v: f"{v:.3f}",  # a fraction 0..1, to three decimals as COCOeval prints
    "rate": lambda v: significant(v, 4),  # samples/s
    "tflops": lambda v: significant(v, 3),
    "fraction": _percent,  # MFU, fraction of the matmul ceiling: in %
    "ratio": lambda v: significant(v, 3),
    "seconds": _duration,
    "ms": _duration,
    "gflop": lambda v: significant(v / 1e9, 3),  # FLOPs shown in GFLOP
    "cost": lambda v: significant(v, 3),
    "joules": lambda v: significant(v, 3),
    "kilojoules": lambda v: significant(v / 1e3, 3),  # joules shown in kJ
    "count": lambda v: str(v),
}


def show(value: Any, kind: str) -> str:
    """A number as the page shows it: rounded for its kind (FORMATS); "–" for none."""
    return "–" if value is None else FORMATS[kind](value)


def exact(value: Any) -> str:
    """The number as read (JSON's, i.e. Python's shortest round-trip form): data-value."""
    return json.dumps(value)


# -- columns --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """A number column: compare.json's `field`, a short heading naming the unit, how it is
    rounded (a FORMATS kind) and its definition."""

    field: str
    heading: str
    kind: str
    definition: str


_RATE = DEFINITIONS["throughput"]
_PER_STEP = DEFINITIONS["per_step"]
METRIC = Column(
    "metric_value",
    "value (0..1)",
    "metric",
    "the workload's quality metric (named beside it) from the run's metrics.json, a fraction "
    "0..1, higher is better",
)
RATIO = Column(
    "reference_ratio",
    "ratio to published (per card)",
    "ratio",
    "this run's samples/s (measured steps) per card over the published figure's per card "
    "(reference_figures.yaml; the notes name the figure)",
)
VERDICT = (
    "reference_comparable",
    "ratio is",
    "comparable where the figure's conditions (device family, precision, batch per card, "
    "cards, how its rate was computed, real data, input pipeline, the recipe's release) match "
    "the run's, else "
    "indicative; the cell's title and the notes list each difference",
)
# The runs table: a run's numbers after its metric's value; the ratio's verdict follows RATIO.
RUNS = (
    Column("samples_per_s", "samples/s (measured steps)", "rate", _RATE),
    Column(
        "time_to_train_s",
        "time to train (s)",
        "seconds",
        "the train stage's wall time (start-up, warm-up, evaluation inside training and "
        "checkpoints included; not data preparation or queueing)",
    ),
    Column(
        "time_to_target_s",
        "time to target (s)",
        "seconds",
        DEFINITIONS["time_to_target_s"] + "; empty: not reached, or no evaluation inside "
        "training (the run's performance.json says which)",
    ),
    Column("mfu", "MFU (%)", "fraction", DEFINITIONS["mfu"]),
    RATIO,
    Column(
        "cost_per_1000_samples",
        "cost per 1,000 samples",
        "cost",
        "1000 / samples/s (measured steps) / 3600 x the backend's price per node-hour x nodes "
        "(cost.per_hour's currency)",
    ),
    Column(
        "joules_per_1000_samples",
        "energy per 1,000 samples (J)",
        "joules",
        DEFINITIONS["energy"],
    ),
)
DETAIL = (
    Column(
        "stage_samples_per_s",
        "samples/s (whole train stage)",
        "rate",
        DEFINITIONS["stage_throughput"],
    ),
    Column("per_step_samples_per_s_p10", "per-step samples/s p10", "rate", _PER_STEP),
    Column("per_step_samples_per_s_p90", "per-step samples/s p90", "rate", _PER_STEP),
    Column(
        "flops_per_sample",
        "GFLOP per sample",
        "gflop",
        "FLOPs of one training sample (forward, backward, optimizer), counted by the framework "
        "over one real step, in 10^9 FLOPs (the notes say what counted them)",
    ),
    Column("model_tflops", "model TFLOP/s", "tflops", DEFINITIONS["model_tflops"]),
    Column(
        "gemm_fraction", "of measured matmul ceiling (%)", "fraction", DEFINITIONS["gemm_fraction"]
    ),
)
# The detail table's text cells after DETAIL, then its counts, cost and energy per run.
TEXT = (
    ("backend", "backend", "cpu, cuda, rocm or gaudi"),
    ("device", "device", "the device the run trained on, as the framework names it"),
    ("precision", "precision", "the run's training precision"),
    (
        "system",
        "system",
        "what the preflight (accelpipe doctor) of the run's image saw before training: its "
        "devices, driver and framework build (provenance.json's system); none on the cpu",
    ),
)
COUNTS = (
    Column("world_size", "world size", "count", "training processes, one per device"),
    Column("global_batch", "global batch", "count", "samples per optimizer step, all devices"),
    Column("nodes", "nodes", "count", "hosts the run trained on (train.nodes)"),
    Column(
        "cost_per_run",
        "cost per run",
        "cost",
        "the train stage's seconds (every attempt of a resumed run) / 3600 x the backend's "
        "price per node-hour x nodes (cost.per_hour's currency; not data preparation, "
        "evaluation or queueing)",
    ),
    Column("joules_per_run", "energy per run (kJ)", "kilojoules", DEFINITIONS["energy"]),
)
_PART = "its share of the mean profiled step (each instant in one part, so the parts add up)"
STEPS = (
    Column(
        "profiled_step_ms",
        "profiled step (ms)",
        "ms",
        "mean step time of the profiled steps (trace_summary.json)",
    ),
    *(Column(f"{part}_ms", f"{LABELS[part]} (ms)", "ms", _PART) for part in PART_NAMES),
)
# every number column, by field (the tests check each cell of the page against its row)
NUMBERS = {c.field: c for c in (METRIC, *RUNS, *DETAIL, *COUNTS, *STEPS)}
# where a cell's title adds the row's note to the exact value: column -> the note's field
NOTES = {
    "reference_ratio": "reference_note",
    "cost_per_run": "cost_note",
    "cost_per_1000_samples": "cost_note",
    "joules_per_run": "energy_note",
    "joules_per_1000_samples": "energy_note",
}
STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: 0.5em 0 0.3em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.4em; vertical-align: top; }
th { background: #f0f0f0; font-weight: 600; overflow-wrap: normal; }
td { white-space: nowrap; overflow-wrap: normal; }
td.wrap { white-space: normal; overflow-wrap: anywhere; min-width: 5em; }
th[title] { text-decoration: underline dotted; cursor: help; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.best { background: #d9f2d9; font-weight: bold; }
td.marks span { white-space: nowrap; }
tr.first td { border-top: 2px solid #888; }
dl.legend { font-size: 0.8em; color: #444; margin: 0 0 1.5em; max-width: 1300px; }
dl.legend dt { font-weight: 600; float: left; clear: left; margin-right: 0.4em; }
dl.legend dt::after { content: ":"; }
dl.legend dd { margin: 0 0 0.15em; }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
.curves { display: flex; flex-wrap: wrap; gap: 0.5em 1.5em; }
.curves figure { margin: 0; }
.curves img { margin: 0.2em 0 0.5em; }
.muted { color: #777; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text))


def _num(row: Row, column: Column, best: bool = False) -> str:
    value = row[column.field]
    text = "none" if value is None and column is RATIO else show(value, column.kind)
    classes = "num best" if best else "num"
    note = row[NOTES[column.field]] if column.field in NOTES else None
    tip = " — ".join(t for t in (exact(value) if value is not None else None, note) if t)
    title = f' title="{_e(tip)}"' if tip else ""
    return (
        f'<td class="{classes}" data-field="{column.field}" data-value="{_e(exact(value))}"'
        f"{title}>{_e(text)}</td>"
    )


def _best(row: Row, column: Column) -> bool:
    return any(row[mark] for mark, earned_by, _ in MARKS if earned_by == column.field)


def _verdict(row: Row) -> str:
    """Whether the reference ratio is comparable or indicative; the note says why."""
    text = VERDICT_TEXT[row["reference_comparable"]]
    return (
        f'<td data-field="reference_comparable" title="{_e(row["reference_note"])}">{_e(text)}</td>'
    )


def _marks(row: Row) -> str:
    marks = [f"<span>{_e(MARK_TEXT[m])}</span>" for m in MARK_TEXT if row[m]]
    return f'<td class="marks">{" · ".join(marks)}</td>'


def _group_text(row: Row) -> str:
    """Which runs the row's speed and price are compared with (rows.comparable_group)."""
    if row["comparable_group"] is None:
        return "none: no FLOPs per sample"
    others = row["comparable_runs"] - 1
    if others < 1:
        return f"{row['comparable_group']}: no other run"
    return f"{row['comparable_group']} ({row['comparable_runs']} runs)"


def _config_cell(row: Row) -> str:
    recorded = row["config_hash"]
    text = "–" if recorded is None else recorded[:SHORT_HASH]
    title = _e(row["config_note"])
    return f'<td data-field="config_hash" title="{title}"><code>{_e(text)}</code></td>'


# (warning, whether the row has it, the row's field that says why): shown as text in the
# runs table's warnings cell and counted above the table, never only in a title
WARNINGS: tuple[tuple[str, Callable[[Row], bool], str], ...] = (
    ("stale config", lambda row: row["config_stale"] is True, "config_note"),
    ("host oversubscribed", lambda row: row["host_oversubscribed"] is True, "host_note"),
    (
        "profiled step disagrees",
        lambda row: row["profiled_step_agrees"] is False,
        "profiled_step_note",
    ),
)


def _warnings(row: Row) -> list[tuple[str, str]]:
    """The row's warnings: (short text, why)."""
    return [(text, str(row.get(why) or "")) for text, has, why in WARNINGS if has(row)]


def _warnings_cell(row: Row) -> str:
    found = _warnings(row)
    title = " — ".join(why for _, why in found)
    text = " · ".join(f"⚠ {short}" for short, _ in found) or "none"
    return f'<td class="wrap" data-field="warnings" title="{_e(title)}">{_e(text)}</td>'


def _warnings_summary(rows: list[Row]) -> str:
    """One line per kind of warning the page's runs have: how many runs, which, what to read."""
    lines = []
    for text, has, why in WARNINGS:
        flagged = [row for row in rows if has(row)]
        if flagged:
            names = ", ".join(f"{row['workload']}/{row['run']}" for row in flagged)
            lines.append(
                f"<li>⚠ {_e(text)}: {len(flagged)} of {len(rows)} runs ({_e(names)}); "
                f"e.g. {_e(flagged[0][why])}</li>"
            )
    if not lines:
        return (
            '<p class="muted" id="warnings">No warnings: no run is stale under the config, none '
            "was measured on an oversubscribed host, no profiled step disagrees.</p>"
        )
    return f'<ul id="warnings">{"".join(lines)}</ul>'


def _row_tag(row: Row, previous: Row | None) -> str:
    first = previous is None or previous["workload"] != row["workload"]
    return (
        f'<tr data-workload="{_e(row["workload"])}" data-run="{_e(row["run"])}"'
        f"{' class=first' if first else ''}>"
    )


def _names(row: Row) -> list[str]:
    """The workload and the run (a grid's run names are long: that cell wraps)."""
    return [f"<td>{_e(row['workload'])}</td>", f'<td class="wrap">{_e(row["run"])}</td>']


def _run_cells(row: Row) -> list[str]:
    group = f'<td class="wrap" data-field="comparable_group">{_e(_group_text(row))}</td>'
    cells = [*_names(row), _marks(row), group, f"<td>{_e(row['metric'])}</td>"]
    cells.append(_num(row, METRIC, best=_best(row, METRIC)))
    for column in RUNS:
        cells.append(_num(row, column, best=_best(row, column)))
        if column is RATIO:
            cells.append(_verdict(row))
    return [*cells, _config_cell(row), _warnings_cell(row)]


def _detail_cells(row: Row) -> list[str]:
    cells = [*_names(row), *(_num(row, column) for column in DETAIL)]
    cells += [f'<td class="wrap" data-field="{f}">{_e(_text(row[f]))}</td>' for f, _, _ in TEXT]
    return cells + [_num(row, column) for column in COUNTS]


def _text(value: Any) -> str:
    return "–" if value is None else str(value)


def _step_cells(row: Row) -> list[str]:
    return [*_names(row), *(_num(row, column) for column in STEPS)]


# (heading, definition) of the name cells every table starts with
NAMES = (("workload", "the workload (registry.py)"), ("run", "the run's name in config.yaml"))


def _headings(*columns: Column | tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(c if isinstance(c, tuple) else (c.heading, c.definition) for c in columns)


# each table's (heading, definition), in the order of its cells
RUNS_HEADINGS = _headings(
    *NAMES,
    (
        "marks",
        "most accurate among the runs of one workload, fastest and cheapest among those of one "
        "model and input (compared among); only where two or more have the number; ties share "
        "the mark",
    ),
    (
        "compared among",
        "the runs whose speed and price this run's are compared with: those of its workload "
        "with the same FLOPs per training sample (model and input size) to 3 significant "
        "digits; a run without a FLOP count, or alone in its group, is never fastest or "
        "cheapest",
    ),
    ("metric", "the workload's quality metric: its key in metrics.json"),
    METRIC,
    *(c for column in RUNS for c in ((column, VERDICT[1:]) if column is RATIO else (column,))),
    (
        "config",
        "the hash of the config the run was made with (provenance.json's config_hash: its "
        "data, training and evaluation settings), shortened; the title says whether the current "
        "config gives the same",
    ),
    (
        "warnings",
        "stale config: the current config gives the run another hash, or has no such run; "
        "host oversubscribed: other processes took a share of the CPUs during training "
        "(performance.json's host); profiled step disagrees: the trace's step is not the "
        "measured one (performance.json's profiled_step)",
    ),
)
DETAIL_HEADINGS = _headings(
    *NAMES, *DETAIL, *((heading, definition) for _, heading, definition in TEXT), *COUNTS
)
STEPS_HEADINGS = _headings(*NAMES, *STEPS)


def _legend(headings: Sequence[tuple[str, str]]) -> str:
    """The definition of each heading but the names, under the table; headings sharing one
    (p10 and p90, the step's parts) say it once."""
    shared: dict[str, list[str]] = {}
    for heading, definition in headings[len(NAMES) :]:
        shared.setdefault(definition, []).append(heading)
    items = [
        f"<dt>{_e(', '.join(names))}</dt><dd>{_e(definition)}</dd>"
        for definition, names in shared.items()
    ]
    return f'<dl class="legend">{"".join(items)}</dl>'


def _table(table_id: str, headings: Sequence[tuple[str, str]], rows: list[Row], cells: Any) -> str:
    head = "".join(f'<th title="{_e(d)}">{_e(h)}</th>' for h, d in headings)
    body = []
    for i, row in enumerate(rows):
        body.append(_row_tag(row, rows[i - 1] if i else None) + "".join(cells(row)) + "</tr>")
    return (
        f'<table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{_legend(headings)}"
    )


def _notes(rows: list[Row]) -> str:
    items = []
    for row in rows:
        lines = [*row["notes"], f"reference: {row['reference_note']}"]
        lines += [f"step: {row['step_note']}", f"cost: {row['cost_note']}"]
        lines += [f"energy: {row['energy_note']}", f"compute: {row['compute_note']}"]
        host_flag = "⚠ " if row["host_oversubscribed"] else ""
        stale_flag = "⚠ " if row["config_stale"] else ""
        lines += [f"{host_flag}host: {row['host_note']}", f"{stale_flag}{row['config_note']}"]
        if row["profiled_step_note"]:
            flag = "⚠ " if row["profiled_step_agrees"] is False else ""
            lines.append(f"{flag}profiled step: {row['profiled_step_note']}")
        inner = "".join(f"<li>{_e(line)}</li>" for line in lines)
        items.append(f"<li><b>{_e(row['workload'])}/{_e(row['run'])}</b><ul>{inner}</ul></li>")
    return f'<ul id="notes">{"".join(items)}</ul>'


def _data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def _image(png: Path, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="{_data_uri(png)}">'


def _curves(rows: list[Row], curves: dict[tuple[str, str], Path]) -> str:
    """Each run's training_curves.png, small; a run published before publish drew them
    says so."""
    figures = []
    for row in rows:
        name = f"{row['workload']}/{row['run']}"
        png = curves.get((row["workload"], row["run"]))
        if png is not None and png.exists():
            alt = f"{name}: loss and learning rate per step, {row['metric']} where evaluated"
            inner = f'<img alt="{_e(alt)}" src="{_data_uri(png)}">'
        else:
            inner = (
                '<p class="muted">no training_curves.png (published before accelpipe drew '
                f"them): run <code>snakemake results/{_e(name)}</code> to publish it again</p>"
            )
        figures.append(
            f'<figure data-workload="{_e(row["workload"])}" data-run="{_e(row["run"])}">'
            f"<figcaption>{_e(name)}</figcaption>{inner}</figure>"
        )
    return f'<div class="curves" id="curves">{"".join(figures)}</div>'


def _seeds_table(rows: list[Row]) -> str:
    """Per run repeated with seeds (`<workload>.seeds`: runs `<run>-seed<k>`), the seed runs
    on this page combined as results/<workload>/ttt combines them: MLPerf's olympic mean."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        split = split_seed_run(row["run"])
        if split is not None:
            groups.setdefault((row["workload"], split[0]), []).append(row)
    if not groups:
        return (
            '<p class="muted">No seed runs on this page (<code>&lt;workload&gt;.seeds</code>; '
            "<code>results/&lt;workload&gt;/ttt</code> combines them).</p>"
        )
    lines = [
        '<table id="seeds"><tr><th>workload</th><th>run</th><th>seed runs</th>'
        '<th>reached</th><th title="' + _e(ttt.DEFINITION) + '">olympic mean (s)</th>'
        "<th>fastest (s)</th><th>slowest (s)</th></tr>"
    ]
    for (workload, run), seeded in groups.items():
        times = [r["time_to_target_s"] for r in seeded]
        score, reason = ttt.olympic_mean(times)
        reached = sorted(t for t in times if t is not None)
        cells = [
            f"<td>{_e(workload)}</td><td>{_e(run)}</td>",
            f'<td class="num">{len(seeded)}</td><td class="num">{len(reached)}</td>',
            f'<td class="num" title="{_e(reason or exact(score))}">'
            f"{'' if score is None else show(score, 'seconds')}</td>",
            *(
                f'<td class="num">{show(t, "seconds") if t is not None else ""}</td>'
                for t in (reached[0] if reached else None, reached[-1] if reached else None)
            ),
        ]
        lines.append("<tr>" + "".join(cells) + "</tr>")
    lines.append("</table>")
    legend = (
        "<p>Each seed run's time to target is its row above; the olympic mean (MLPerf's score "
        "over runs) drops the fastest and the slowest, a seed that never reached the target "
        "counting as the slowest; <code>results/&lt;workload&gt;/ttt</code> holds it with "
        "every seed.</p>"
    )
    return "\n".join(lines) + legend


def _cost_text(per_hour: dict[str, float]) -> str:
    if not per_hour:
        return (
            "No cost: the config has no <code>cost.per_hour</code> (e.g. "
            "<code>cost: {per_hour: {cuda: 4.1}}</code>, the price of one node-hour)."
        )
    rates = ", ".join(f"{_e(b)} {rate:g}" for b, rate in sorted(per_hour.items()))
    return f"Cost per node-hour: {rates}."


def _diff_links(diffs: list[str]) -> str:
    """The diffs of two runs built when the page was made (results/<workload>/diff/)."""
    if not diffs:
        return ""
    items = "".join(f'<li><a href="{_e(href)}">{_e(href)}</a></li>' for href in diffs)
    return (
        "<h2>Diffs</h2><p>Two runs side by side, each figure with an interval and a verdict "
        f"(`snakemake results/&lt;workload&gt;/diff/&lt;A&gt;_vs_&lt;B&gt;`):</p><ul>{items}</ul>"
    )


def render(
    rows: list[Row],
    per_hour: dict[str, float],
    plots: list[tuple[Path, str]],
    curves: dict[tuple[str, str], Path] | None = None,
    diffs: list[str] | None = None,
) -> str:
    """The page for `rows` (marked), with the PNGs in `plots` ((path, alt text)) and each
    run's training curves (`curves`: (workload, run) -> its training_curves.png) inlined;
    a link to each diff built (`diffs`: diff.md's path from the page's folder)."""
    workloads = sorted({row["workload"] for row in rows})
    return "\n".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>accelpipe: {len(rows)} runs compared</title><style>{STYLE}</style></head>",
            "<body><h1>accelpipe: every finished run</h1>",
            f"<p>{len(rows)} runs of {len(workloads)} workloads ({_e(', '.join(workloads))}). "
            "Where two or more runs have the number (ties share the mark), ★ <b>most "
            "accurate</b> marks the highest quality metric among the runs of one workload; ⚡ "
            "<b>fastest</b> the highest samples/s (measured steps) and $ <b>cheapest</b> the "
            "lowest cost per 1,000 samples among the runs of one model and input only (one "
            "workload, the same FLOPs per sample: <i>compared among</i>); marked cells are "
            "green. Numbers are rounded to what they can mean "
            "(samples/s to 4 significant digits; TFLOP/s, GFLOP, ratios, costs and energy to 3; "
            "MFU and fractions in % to one decimal; times to 3 significant digits, whole "
            "seconds or ms kept; the metric to 3 decimals); a number's title gives its exact "
            "value, as compare.csv and compare.json hold it. Under each table, the definition "
            "of each column.</p>",
            f"<p>{_cost_text(per_hour)}</p>",
            "<h2>Runs</h2>",
            _warnings_summary(rows),
            _table("runs", RUNS_HEADINGS, rows, _run_cells),
            "<h2>Time to target over seeds</h2>",
            _seeds_table(rows),
            "<h2>Detail</h2>",
            _table("detail", DETAIL_HEADINGS, rows, _detail_cells),
            "<h2>Step breakdown</h2>",
            _table("steps", STEPS_HEADINGS, rows, _step_cells),
            "<h2>Plots</h2>",
            *(_image(png, alt) for png, alt in plots),
            "<h2>Training curves</h2><p>Per run: loss per logged step (left, the quality "
            "metric where evaluated on the right-hand axis) and the learning rate (right); "
            "training_curves.png in the run's folder.</p>",
            _curves(rows, curves or {}),
            _diff_links(diffs or []),
            "<h2>Notes</h2>",
            _notes(rows),
            "</body></html>\n",
        ]
    )
