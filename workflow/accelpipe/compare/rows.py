"""One row per finished run, read from the run's files, and the per-workload marks.

Every number comes from a file of the run as it is there (metrics.json, performance.json,
trace_summary.json, provenance.json) or is computed from those alone: the step parts
(`traces.plot.step_parts`) and the cost (`cost`). A run published before performance.json
existed has no throughput or reference ratio: its row says so instead.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from accelpipe.compare.runs import METRICS, PERFORMANCE, PROVENANCE, TRACE_SUMMARY, run_of
from accelpipe.config import registry
from accelpipe.core.errors import DataError
from accelpipe.core.io import read_json
from accelpipe.core.provenance import SHORT_HASH
from accelpipe.performance.compute import COMPUTE_COLUMNS
from accelpipe.traces.plot import PART_NAMES, step_parts

PART_COLUMNS = tuple(f"{part}_ms" for part in PART_NAMES)
COLUMNS = (
    "workload",
    "run",
    "backend",
    "device",
    "precision",
    "world_size",
    "global_batch",
    "nodes",
    "system",
    "metric",
    "metric_value",
    "samples_per_s",
    "stage_samples_per_s",
    "per_step_samples_per_s_p10",
    "per_step_samples_per_s_p90",
    "time_to_train_s",
    "time_to_target_s",
    "flops_per_sample",
    "model_tflops",
    "mfu",
    "gemm_fraction",
    "reference_ratio",
    "reference_comparable",
    "reference_note",
    "profiled_step_ms",
    *PART_COLUMNS,
    "step_note",
    "profiled_step_agrees",
    "profiled_step_note",
    "host_oversubscribed",
    "host_note",
    "compute_note",
    "cost_per_run",
    "cost_per_1000_samples",
    "cost_note",
    "joules_per_run",
    "joules_per_1000_samples",
    "energy_note",
    "fastest",
    "most_accurate",
    "cheapest",
    "comparable_group",
    "comparable_runs",
    "config_hash",
    "config_stale",
    "config_note",
    "notes",
)
# (mark, the column that earns it, whether the highest (True) or the lowest value wins)
MARKS = (
    ("fastest", "samples_per_s", True),
    ("most_accurate", "metric_value", True),
    ("cheapest", "cost_per_1000_samples", False),
)
# Marks of speed and price: only among runs of one model and input (`comparable_group`), as a
# tiny model's samples/s says nothing against a full one's. Quality is compared per workload.
SAME_MODEL_MARKS = ("fastest", "cheapest")


def _optional_json(path: Path) -> dict[str, Any] | None:
    return read_json(path) if path.exists() else None


def _finite(value: Any) -> float | None:
    """A metric as a number, or None where it is missing, not a number, or NaN/inf."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _significant(value: float) -> float:
    return float(f"{value:.4g}")


def cost(
    rate: float | None, nodes: int, seconds: float | None, samples_per_s: float | None
) -> tuple[float | None, float | None, str]:
    """Cost of the run and of 1,000 samples at `rate` per node-hour (4 significant digits),
    and what they count; no rate: no numbers."""
    if rate is None:
        return None, None, "no price: the config has no cost.per_hour for this backend"
    per_run = _significant(seconds / 3600 * rate * nodes) if seconds is not None else None
    per_1000 = _significant(1000 / samples_per_s / 3600 * rate * nodes) if samples_per_s else None
    counted = f"{rate:g} per node-hour x {nodes} node{'s' if nodes > 1 else ''}: per run, the "
    counted += "train stage's seconds, every attempt of a resumed run together (not data "
    counted += "preparation, evaluation or queueing)"
    counted += "; per 1,000 samples, at the measured steps' samples/s" if per_1000 else ""
    return per_run, per_1000, counted


def _throughput(performance: dict[str, Any] | None) -> dict[str, Any]:
    """performance.json's throughputs (its one definition) and the per-step spread."""
    facts = performance or {}
    spread = (facts.get("per_step") or {}).get("samples_per_s") or {}
    profiled = facts.get("profiled_step") or {}
    return {
        "samples_per_s": (facts.get("throughput") or {}).get("samples_per_s"),
        "stage_samples_per_s": (facts.get("stage_throughput") or {}).get("samples_per_s"),
        **{f"per_step_samples_per_s_{q}": spread.get(q) for q in ("p10", "p90")},
        "profiled_step_agrees": profiled.get("agrees"),
        "profiled_step_note": profiled.get("note"),
        **_host(facts.get("host")),
        **{k: (facts.get("compute") or {}).get(k) for k in COMPUTE_COLUMNS},
        "compute_note": _compute_note(facts.get("compute")),
    }


def _host(host: dict[str, Any] | None) -> dict[str, Any]:
    """Whether the host was oversubscribed while the run trained (performance.host_load),
    and the warning or what was measured."""
    if not host:
        note = "no host facts in performance.json (published before they were recorded)"
        return {"host_oversubscribed": None, "host_note": note}
    return {"host_oversubscribed": host["oversubscribed"], "host_note": host["note"]}


def _compute_note(compute: dict[str, Any] | None) -> str:
    """How the FLOP figures were had, or why some are missing."""
    if not compute:
        return "no FLOP figures in performance.json (published before they existed)"
    missing = "; ".join(f"{k}: {v}" for k, v in (compute["not_measured"] or {}).items())
    counted = compute["flops_counted_by"] or "not counted"
    return f"FLOPs counted by {counted}; peak: {compute['peak_note']}" + (
        f"; {missing}" if missing else ""
    )


def _energy(performance: dict[str, Any] | None) -> dict[str, Any]:
    """performance.json's energy: the train process's joules, the joules per 1,000 samples at
    the measured steps, and where they come from or why there are none."""
    energy = (performance or {}).get("energy")
    if not energy:
        note = "no energy in performance.json (published before it was measured)"
        return {"joules_per_run": None, "joules_per_1000_samples": None, "energy_note": note}
    note = energy["not_measured"] or (
        f"{energy['source']} ({energy['method']}) on {', '.join(energy['devices'] or [])}: "
        "per run, the train process; per 1,000 samples, the measured steps"
    )
    return {
        "joules_per_run": energy["process_joules"],
        "joules_per_1000_samples": energy["joules_per_1000_samples"],
        "energy_note": note,
    }


def system_text(system: dict[str, Any] | None) -> str | None:
    """What the preflight of the run's image saw (provenance.json's `system`), in one line:
    the devices, the driver and the framework build; None without one (cpu, older runs)."""
    if not system:
        return None
    counts: dict[str, int] = {}
    for name in system.get("devices") or []:
        counts[name or "unnamed"] = counts.get(name or "unnamed", 0) + 1
    devices = ", ".join(f"{n} x {name}" for name, n in counts.items()) or "no device"
    parts = [devices, system.get("driver"), system.get("framework_build")]
    return "; ".join(str(part) for part in parts if part)


def _steps(run_dir: Path) -> dict[str, Any]:
    summary = _optional_json(run_dir / TRACE_SUMMARY)
    parts = step_parts(summary) if summary else None
    if parts is None:
        note = "no trace_summary.json" if summary is None else "no profiler step in the trace"
        return {"profiled_step_ms": None, **dict.fromkeys(PART_COLUMNS), "step_note": note}
    values = {f"{part}_ms": ms for part, ms in parts.parts.items()}
    return {"profiled_step_ms": parts.step_ms, **values, "step_note": parts.note}


def _metric(run_dir: Path, metric: str) -> tuple[float | None, list[str]]:
    metrics = read_json(run_dir / METRICS)
    value = _finite(metrics.get(metric))
    if metric not in metrics:
        return None, [f"metrics.json has no {metric}"]
    if metrics[metric] is None:  # written as null: undefined for this run (its note says why)
        why = f": {metrics['note']}" if isinstance(metrics.get("note"), str) else ""
        return None, [f"metrics.json: {metric} is null (undefined for this run){why}"]
    if value is None:
        return None, [f"metrics.json: {metric} is {metrics[metric]!r}, not a number"]
    return value, []


def read_row(run_dir: Path, per_hour: dict[str, float]) -> dict[str, Any]:
    """The row of one run folder; `per_hour`: the config's cost.per_hour."""
    workload, run = run_of(run_dir)
    if not (run_dir / PROVENANCE).exists():
        # Snakemake found it while planning: a job of the same command is publishing it again.
        raise DataError(
            f"{run_dir}: no {PROVENANCE}, so not a finished run (being published again right "
            "now?); ask for results/compare again once the run is done"
        )
    metric = registry.workload(workload).metric
    provenance = read_json(run_dir / PROVENANCE)
    performance = _optional_json(run_dir / PERFORMANCE)
    value, notes = _metric(run_dir, metric)
    facts = performance or {}
    try:
        nodes = provenance["config"][workload]["train"].get("nodes", 1)
        seconds = facts.get("time_to_train_s", provenance["stages"]["train"]["seconds"])
    except (KeyError, TypeError):
        raise DataError(f"{run_dir / PROVENANCE}: no train settings or train stage") from None
    if performance is None:
        notes.append(
            "no performance.json (published before accelpipe measured throughput): no "
            f"throughput or reference ratio; time to train from provenance.json; run "
            f"`snakemake {run_dir}` to publish it again"
        )
    throughput = _throughput(performance)
    backend = facts.get("backend", provenance["backend"])
    per_run, per_1000, cost_note = cost(
        per_hour.get(backend), nodes, seconds, throughput["samples_per_s"]
    )
    reference = facts.get("reference") or {}
    return {
        "workload": workload,
        "run": run,
        "backend": backend,
        "device": facts.get("device", provenance["device"]),
        "precision": facts.get("precision", provenance["precision"]),
        "world_size": facts.get("world_size"),
        "global_batch": facts.get("global_batch"),
        "nodes": nodes,
        "system": system_text(provenance.get("system")),
        "metric": metric,
        "metric_value": value,
        **throughput,
        "time_to_train_s": seconds,
        # null: not reached, or no evaluation inside training (performance.json says which)
        "time_to_target_s": facts.get("time_to_target_s"),
        "reference_ratio": reference.get("ratio"),
        # True: the figure's conditions match the run's; False: indicative (the note lists
        # the differences); None: no figure, or a performance.json from before conditions.
        "reference_comparable": reference.get("comparable"),
        "reference_note": facts.get("reference_note", "no performance.json"),
        **_steps(run_dir),
        "cost_per_run": per_run,
        "cost_per_1000_samples": per_1000,
        "cost_note": cost_note,
        **_energy(performance),
        **dict.fromkeys(mark for mark, _, _ in MARKS),
        "comparable_group": comparable_group(throughput["flops_per_sample"]),
        "comparable_runs": None,  # mark_best counts them
        "config_hash": provenance.get("config_hash"),
        # build_rows checks the hash against the current config's
        "config_stale": None,
        "config_note": "not checked against a config",
        "notes": notes,
    }


def comparable_group(flops_per_sample: float | None) -> str | None:
    """The runs of one workload whose speed and price compare: the same FLOPs per training
    sample (model and input size), to 3 significant digits as the page shows them; None
    without a count (such a run is compared with none)."""
    if not flops_per_sample:
        return None
    return f"{flops_per_sample / 1e9:.3g} GFLOP per sample"


def config_state(recorded: str | None, current: str | None, known: bool) -> tuple[bool | None, str]:
    """Whether a run is stale under the current config (its recorded config hash differs from
    the one the config gives it now, or the config has no such run), and why; None where it
    cannot be told: no recorded hash, or no config to check against (`known` False)."""
    if recorded is None:
        return None, "no config hash in provenance.json (published before accelpipe recorded it)"
    if not known:
        return None, f"config {recorded[:SHORT_HASH]}; not checked against a config"
    if current is None:
        return True, f"config {recorded[:SHORT_HASH]}: the current config has no such run"
    if current != recorded:
        return True, (
            f"stale: made with config {recorded[:SHORT_HASH]}, the current config gives "
            f"{current[:SHORT_HASH]} (its data, training or evaluation settings changed): "
            "publishing it again re-runs what changed"
        )
    return False, f"config {recorded[:SHORT_HASH]}: the current config's"


def check_configs(rows: list[dict[str, Any]], current: dict[str, str | None] | None) -> None:
    """Set each row's `config_stale` and `config_note` against `current` (`<workload>/<run>`
    -> its hash under the current config, stage_config.current_hashes; None: no config)."""
    for row in rows:
        key = f"{row['workload']}/{row['run']}"
        known = current is not None and key in current
        hash_now = current.get(key) if current is not None else None
        row["config_stale"], row["config_note"] = config_state(row["config_hash"], hash_now, known)


def mark_best(rows: list[dict[str, Any]]) -> None:
    """Among the runs compared, mark the highest quality metric (most accurate: the runs of
    one workload), the highest samples/s (fastest) and the lowest cost per 1,000 samples
    (cheapest: the runs of one workload and one `comparable_group`, a run without a group
    compared with none); only where two or more runs have the number (one run is no
    comparison), ties share the mark, and a row without the number never has it. Never
    across workloads. `comparable_runs`: how many runs share the row's group."""
    for workload in {row["workload"] for row in rows}:
        mine = [row for row in rows if row["workload"] == workload]
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in mine:
            if row.get("comparable_group") is not None:
                groups.setdefault(row["comparable_group"], []).append(row)
        for row in mine:
            group = row.get("comparable_group")
            row["comparable_runs"] = len(groups[group]) if group is not None else 0
        for mark, column, highest in MARKS:
            pools = list(groups.values()) if mark in SAME_MODEL_MARKS else [mine]
            for row in mine:
                row[mark] = False
            for pool in pools:
                values = [row[column] for row in pool if row[column] is not None]
                best = (max if highest else min)(values) if len(values) > 1 else None
                for row in pool:
                    row[mark] = best is not None and row[column] == best


def build_rows(
    run_dirs: list[Path],
    per_hour: dict[str, float],
    current_hashes: dict[str, str | None] | None = None,
) -> list[dict[str, Any]]:
    """The rows of the runs, grouped by workload (each in the given order), marked, each run's
    config checked against `current_hashes` (`check_configs`)."""
    if not run_dirs:
        raise DataError("results/compare: no finished run (no results/<workload>/<run>/)")
    rows = [read_row(run_dir, per_hour) for run_dir in run_dirs]
    check_configs(rows, current_hashes)
    first: dict[str, int] = {}
    for i, row in enumerate(rows):
        first.setdefault(row["workload"], i)
    rows.sort(key=lambda row: first[row["workload"]])  # grouped, otherwise in the given order
    mark_best(rows)
    return rows
