"""Time to target: the run's seconds, from its start, to the end of the first evaluation
inside training that reached its quality target (eval_log.csv), MLPerf's time to train."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


def time_to_target(eval_log: Path) -> dict[str, Any]:
    """`time_to_target_s`: the run's seconds at the first evaluation in eval_log.csv that
    reached the target, else None; `time_to_target` says which evaluation, or why none."""
    if not eval_log.exists():
        return {
            "time_to_target_s": None,
            "time_to_target": {"not_reached": "no evaluation inside training (train.eval_every)"},
        }
    with eval_log.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["reached"] == "1":
            at = {k: row[k] for k in ("epoch", "step", "samples")}
            detail = {k: int(v) for k, v in at.items()} | {
                "metric": row["metric"],
                "value": float(row["value"]),
                "target": float(row["target"]),
                "evaluations": rows.index(row) + 1,
            }
            return {"time_to_target_s": float(row["run_s"]), "time_to_target": detail}
    last = rows[-1] if rows else None
    reason = (
        "no evaluation"
        if last is None
        else (
            f"not reached in {len(rows)} evaluations, the last after epoch {last['epoch']}: "
            f"{last['metric']} {last['value'] or 'none'} against {last['target'] or 'no target'}"
        )
    )
    return {"time_to_target_s": None, "time_to_target": {"not_reached": reason}}
