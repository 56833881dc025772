"""Write results/compare: compare.csv, compare.json, the plots and compare.html (which also
inlines each run's training_curves.png from its folder)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from accelpipe.compare import page, plots
from accelpipe.compare.rows import COLUMNS, build_rows
from accelpipe.compare.runs import run_of
from accelpipe.core.io import atomic_path, write_csv, write_json, write_text
from accelpipe.results.curves import CURVES_FILE
from accelpipe.results.diff import DIFF_MD, diffs_of

ALT_TEXT = {
    plots.QUALITY: "quality metric per run, one panel per workload",
    plots.THROUGHPUT: "samples/s (measured steps) per run with the per-step p10 to p90",
    plots.STEPS: "mean step per run, stacked from its parts",
}


def _csv_value(value: Any) -> Any:
    """CSV cells: empty for none, the notes joined on one line."""
    if value is None:
        return ""
    return " | ".join(value) if isinstance(value, list) else value


def _diff_links(run_dirs: list[Path], out: Path) -> list[str]:
    """Each diff.md built under the runs' workloads (results/<workload>/diff/), as a path
    from `out`."""
    # results/ and the workload of each run (a named run's fold is one folder deeper)
    homes = {(d.parents[run_of(d)[1].count("/") + 1], run_of(d)[0]) for d in run_dirs}
    found = [f for results, workload in sorted(homes) for f in diffs_of(results, workload)]
    return [os.path.relpath(f / DIFF_MD, out) for f in found]


def write_compare(
    run_dirs: list[Path],
    per_hour: dict[str, float],
    out: Path,
    current_hashes: dict[str, str | None] | None = None,
) -> list[dict[str, Any]]:
    """Write `out` (atomically) for the finished runs `run_dirs` at the config's
    cost.per_hour, each run's config checked against `current_hashes` (rows.check_configs);
    return the rows."""
    rows = build_rows(run_dirs, per_hour, current_hashes)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        csv_rows = ({k: _csv_value(v) for k, v in row.items()} for row in rows)
        write_csv(tmp / "compare.csv", csv_rows, COLUMNS)
        write_json(tmp / "compare.json", {"cost": {"per_hour": per_hour}, "runs": rows})
        plots.write_plots(rows, tmp)
        images = [(tmp / name, ALT_TEXT[name]) for name in plots.PLOTS]
        curves = {run_of(d): d / CURVES_FILE for d in run_dirs}
        diffs = _diff_links(run_dirs, out)
        write_text(tmp / "compare.html", page.render(rows, per_hour, images, curves, diffs))
    return rows
