"""`runs`: the run folders under results/ with their headline numbers, for a person to read.

Each run's numbers are its results/compare row (`compare.rows.read_row`): the workload's
quality metric from metrics.json (`registry`), the throughput of the measured steps from
performance.json (its one definition, `performance`), the time to train and the device. A run
is complete when it is published (provenance.json) with both headline numbers; otherwise it is
listed as incomplete with the reason (not published, published before performance.json, no
metric, no measured step, a file that does not read).

Each run shows the short hash of the config it was made with (provenance.json's
`config_hash`) and is flagged stale where the current config (config.yaml here, or
--configfile/--config as Snakemake merges them) gives it another hash or has no such run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from accelpipe.compare.rows import config_state, read_row
from accelpipe.compare.runs import PERFORMANCE, PROVENANCE, is_finished, run_folders, run_of
from accelpipe.config import registry
from accelpipe.core.errors import AccelpipeError
from accelpipe.core.provenance import SHORT_HASH
from accelpipe.plan import stage_config
from accelpipe.stages.targets import DEFAULT_CONFIGFILE, load_config

FIELDS = (
    "workload",
    "run",
    "metric",
    "metric_value",
    "samples_per_s",
    "time_to_train_s",
    "device",
    "backend",
    "precision",
    "config_hash",
    "config_stale",
    "config_note",
)


def _row(run_dir: Path) -> dict[str, Any]:
    """A run's headline numbers, whether it is complete and why not."""
    workload, run = run_of(run_dir)
    empty = dict.fromkeys(FIELDS) | {
        "workload": workload,
        "run": run,
        "metric": registry.workload(workload).metric,
    }
    if not is_finished(run_dir):
        why = f"no {PROVENANCE}: not a published run; `snakemake {run_dir}` publishes it"
        return empty | {"path": str(run_dir), "complete": False, "notes": [why]}
    try:
        row = read_row(run_dir, {})
    except AccelpipeError as err:  # a file missing or not JSON: this run only
        return empty | {"path": str(run_dir), "complete": False, "notes": [str(err)]}
    notes = list(row["notes"])
    if row["samples_per_s"] is None and (run_dir / PERFORMANCE).exists():
        notes.append(f"{PERFORMANCE}: no measured throughput (no step after the warm-up)")
    complete = row["metric_value"] is not None and row["samples_per_s"] is not None
    return {k: row[k] for k in FIELDS} | {
        "path": str(run_dir),
        "complete": complete,
        "notes": notes,
    }


def list_runs(results: Path, current: dict[str, str | None] | None = None) -> list[dict[str, Any]]:
    """Every run folder under `results`, finished or not, in registry order, then by name,
    each published one's config checked against `current` (`<workload>/<run>` -> its hash
    under the current config; None: not checked)."""
    rows = [_row(run_dir) for run_dir in run_folders(results)]
    for row in rows:
        if row["config_note"] is None:  # not published, or a file that does not read
            continue
        key = f"{row['workload']}/{row['run']}"
        known = current is not None and key in current
        now = current.get(key) if current is not None else None
        row["config_stale"], row["config_note"] = config_state(row["config_hash"], now, known)
    return rows


def current_hashes(
    rows: list[dict[str, Any]], configfiles: list[str], overrides: list[str]
) -> tuple[dict[str, str | None] | None, str | None]:
    """Each listed run's config hash under the current config, or None and why not (no
    config.yaml here and none named, or a config that does not load)."""
    if not configfiles and not overrides and not Path(DEFAULT_CONFIGFILE).exists():
        return None, f"no {DEFAULT_CONFIGFILE} here (--configfile names one)"
    try:
        config = load_config(configfiles, overrides)
    except AccelpipeError as err:
        return None, str(err)
    runs = [(row["workload"], row["run"]) for row in rows]
    return stage_config.current_hashes(config, runs), None


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _config(row: dict[str, Any]) -> str:
    recorded = row["config_hash"]
    text = recorded[:SHORT_HASH] if recorded else "-"
    return f"{text} STALE" if row["config_stale"] else text


def _table(rows: list[dict[str, Any]], unchecked: str | None = None) -> str:
    """One line a run, then one line per reason a run is incomplete, per stale run, and why
    staleness was not checked (`unchecked`)."""
    header = (
        "workload",
        "run",
        "quality",
        "samples/s",
        "time to train",
        "device",
        "config",
        "status",
    )
    cells = [
        (
            row["workload"],
            row["run"],
            f"{row['metric']} {_number(row['metric_value'], '.4g')}",
            _number(row["samples_per_s"], ".1f"),
            _duration(row["time_to_train_s"]),
            row["device"] or "-",
            _config(row),
            "complete" if row["complete"] else "INCOMPLETE",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in (header, *cells)) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in (header, *cells)
    ]
    for row in rows:
        lines += [f"incomplete {row['workload']}/{row['run']}: {note}" for note in row["notes"]]
    for row in rows:
        if row["config_stale"]:
            lines.append(f"stale {row['workload']}/{row['run']}: {row['config_note']}")
    if unchecked:
        lines.append(f"staleness not checked: {unchecked}")
    return "\n".join(lines)


def run_runs(args: argparse.Namespace) -> None:
    results = Path(args.results)
    current, unchecked = current_hashes(list_runs(results), args.configfile, args.config)
    rows = list_runs(results, current)
    if args.json:
        listing = {"results": str(results), "runs": rows, "staleness_not_checked": unchecked}
        print(json.dumps(listing, indent=2))
    elif not rows:
        print(
            f"no runs in {results}/ (no {results}/<workload>/<run>/ folder): make one with "
            "`snakemake results/<workload>/<run>`; `accelpipe targets` lists them"
        )
    else:
        print(_table(rows, unchecked))
