"""compare.html: one standalone page (no script, no external resource; the plots inlined as
data: URIs) with every run's row, its step breakdown, the plots and the notes.

Each number sits in its own cell with `data-field` naming its column in compare.json and is
written as Python writes the number read from the run's files (`str`), so the page shows
exactly the value the file holds; an empty cell shows "–" (or "none" for a reference
ratio) and the notes say why. Beside the reference ratio, a text cell says whether it is
comparable (the published figure's conditions match the run's) or indicative.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from accelpipe.compare.rows import MARKS, PART_COLUMNS
from accelpipe.traces.plot import LABELS, PART_NAMES

Row = dict[str, Any]
MARK_TEXT = {"fastest": "⚡ fastest", "most_accurate": "★ most accurate", "cheapest": "$ cheapest"}
# (heading, column) of the number cells of the runs table after the metric's value
NUMBERS = (
    ("samples/s (measured steps)", "samples_per_s"),
    ("samples/s (whole train stage)", "stage_samples_per_s"),
    ("per-step samples/s p10", "per_step_samples_per_s_p10"),
    ("per-step p90", "per_step_samples_per_s_p90"),
    ("time to train (s)", "time_to_train_s"),
    ("FLOPs per sample", "flops_per_sample"),
    ("model TFLOP/s", "model_tflops"),
    ("MFU", "mfu"),
    ("of measured matmul ceiling", "gemm_fraction"),
    ("reference ratio", "reference_ratio"),
    ("cost per run", "cost_per_run"),
    ("cost per 1,000 samples", "cost_per_1000_samples"),
    ("world size", "world_size"),
    ("global batch", "global_batch"),
    ("nodes", "nodes"),
)
# The cell after the reference ratio: whether the ratio compares like with like.
VERDICT_HEADING = "reference ratio is"
VERDICT_TEXT = {True: "comparable", False: "indicative", None: "–"}
STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.best { background: #d9f2d9; font-weight: bold; }
td.marks { white-space: nowrap; }
tr.first td { border-top: 2px solid #888; }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
.muted { color: #777; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text))


def show(value: Any) -> str:
    """A number as the page writes it: exactly as read (Python's shortest round-trip form)."""
    return "–" if value is None else str(value)


def _num(row: Row, column: str, best: bool = False, title: str = "") -> str:
    value = row[column]
    text = "none" if value is None and column == "reference_ratio" else show(value)
    classes = "num best" if best else "num"
    tip = f' title="{_e(title)}"' if title else ""
    return f'<td class="{classes}" data-field="{column}"{tip}>{_e(text)}</td>'


def _verdict(row: Row) -> str:
    """Whether the reference ratio is comparable or indicative; the note says why."""
    text = VERDICT_TEXT[row["reference_comparable"]]
    return (
        f'<td data-field="reference_comparable" title="{_e(row["reference_note"])}">{_e(text)}</td>'
    )


def _marks(row: Row) -> str:
    marks = [MARK_TEXT[m] for m in MARK_TEXT if row[m]]
    return f'<td class="marks">{_e(" · ".join(marks))}</td>'


def _row_tag(row: Row, previous: Row | None) -> str:
    first = previous is None or previous["workload"] != row["workload"]
    return (
        f'<tr data-workload="{_e(row["workload"])}" data-run="{_e(row["run"])}"'
        f"{' class=first' if first else ''}>"
    )


def _run_cells(row: Row) -> list[str]:
    text = [row["workload"], row["run"]]
    cells = [f"<td>{_e(t)}</td>" for t in text] + [_marks(row)]
    cells.append(f"<td>{_e(row['metric'])}</td>")
    cells.append(_num(row, "metric_value", best=row["most_accurate"]))
    titles = {"reference_ratio": row["reference_note"], "cost_per_run": row["cost_note"]}
    for _, column in NUMBERS:
        best = any(row[mark] for mark, earned_by, _ in MARKS if earned_by == column)
        cells.append(_num(row, column, best=best, title=titles.get(column, "")))
        if column == "reference_ratio":
            cells.append(_verdict(row))
    cells += [f"<td>{_e(row[c])}</td>" for c in ("backend", "device", "precision")]
    return cells


def _table(table_id: str, headings: Sequence[str], rows: list[Row], cells: Any) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headings)
    body = []
    for i, row in enumerate(rows):
        body.append(_row_tag(row, rows[i - 1] if i else None) + "".join(cells(row)) + "</tr>")
    return (
        f'<table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _step_cells(row: Row) -> list[str]:
    cells = [f"<td>{_e(row['workload'])}</td>", f"<td>{_e(row['run'])}</td>"]
    cells += [_num(row, c) for c in ("profiled_step_ms", *PART_COLUMNS)]
    return cells


def _notes(rows: list[Row]) -> str:
    items = []
    for row in rows:
        lines = [*row["notes"], f"reference: {row['reference_note']}"]
        lines += [f"step: {row['step_note']}", f"cost: {row['cost_note']}"]
        lines.append(f"compute: {row['compute_note']}")
        if row["profiled_step_note"]:
            flag = "⚠ " if row["profiled_step_agrees"] is False else ""
            lines.append(f"{flag}profiled step: {row['profiled_step_note']}")
        inner = "".join(f"<li>{_e(line)}</li>" for line in lines)
        items.append(f"<li><b>{_e(row['workload'])}/{_e(row['run'])}</b><ul>{inner}</ul></li>")
    return f'<ul id="notes">{"".join(items)}</ul>'


def _image(png: Path, alt: str) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _cost_text(per_hour: dict[str, float]) -> str:
    if not per_hour:
        return (
            "No cost: the config has no <code>cost.per_hour</code> (e.g. "
            "<code>cost: {per_hour: {cuda: 4.1}}</code>, the price of one node-hour)."
        )
    rates = ", ".join(f"{_e(b)} {rate:g}" for b, rate in sorted(per_hour.items()))
    return (
        f"Cost per node-hour: {rates}. A run costs its train stage's hours x price x nodes; "
        "1,000 samples cost 1000 / samples/s (measured steps) / 3600 x price x nodes."
    )


def render(rows: list[Row], per_hour: dict[str, float], plots: list[tuple[Path, str]]) -> str:
    """The page for `rows` (marked), with the PNGs in `plots` ((path, alt text)) inlined."""
    workloads = sorted({row["workload"] for row in rows})
    headings = ["workload", "run", "marks", "metric", "value"]
    for heading, column in NUMBERS:
        headings += [heading, VERDICT_HEADING] if column == "reference_ratio" else [heading]
    headings += ["backend", "device", "precision"]
    step_headings = ["workload", "run", "profiled step (ms)", *(LABELS[p] for p in PART_NAMES)]
    return "\n".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            f"<title>accelpipe: {len(rows)} runs compared</title><style>{STYLE}</style></head>",
            "<body><h1>accelpipe: every finished run</h1>",
            f"<p>{len(rows)} runs of {len(workloads)} workloads ({_e(', '.join(workloads))}). "
            "Samples/s (measured steps): the samples of the steps after the warm-up that the "
            "profiler left alone over their wall time, data wait included (the whole job, all "
            "cards); whole train stage: every sample over the stage's wall time; per-step "
            "p10/p90: the spread of single steps, not a throughput. Among the runs of one "
            "workload (where two or more have the number), ⚡ <b>fastest</b> marks the highest "
            "samples/s (measured steps), ★ <b>most accurate</b> the highest quality metric and "
            "$ <b>cheapest</b> the lowest cost per 1,000 samples; marked cells are green. "
            "Reference ratio: "
            "this run's samples/s per card over the published figure's (see the notes); "
            "<b>comparable</b> where the figure's conditions (device, precision, batch per "
            "card, cards, how its rate was computed, real data, input pipeline) match the "
            "run's, else <b>indicative</b>, the notes listing each difference.</p>",
            f"<p>{_cost_text(per_hour)}</p>",
            "<h2>Runs</h2>",
            _table("runs", headings, rows, _run_cells),
            "<h2>Step breakdown</h2><p>Mean step time of the profiled steps (trace_summary."
            "json) and its parts in ms, each instant in one part (the trace's step breakdown), so "
            "they sum to the step; other = the step's own work outside them, or no section.</p>",
            _table("steps", step_headings, rows, _step_cells),
            "<h2>Plots</h2>",
            *(_image(png, alt) for png, alt in plots),
            "<h2>Notes</h2>",
            _notes(rows),
            "</body></html>\n",
        ]
    )
