"""train_log.csv files written by hand, in the engines' columns."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

from accelpipe.engines.train_log import LOG_FIELDS

# One logged step: (samples/s, data wait ms, step ms, profiled "0" or "1"), optionally with
# (samples, wall ms) since the previous logged step: by default the step's own batch
# (samples/s x step ms) and its step time; and optionally then the joules over that wall
# time (energy_j; by default none measured: empty).
Step = (
    tuple[float, float, float, str]
    | tuple[float, float, float, str, int, float]
    | tuple[float, float, float, str, int, float, float | None]
)


def write_train_log(path: Path, steps: Iterable[Step], attempts: Sequence[int] = ()) -> Path:
    """train_log.csv of epoch 1 with steps 1, 2, ... (loss and lr constant), logged by
    `attempts[i]` (by the first attempt, 0, where not given)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=LOG_FIELDS)
        writer.writeheader()
        for step, (rate, waited, took, profiled, *interval) in enumerate(steps, 1):
            samples, wall, *energy = interval or (round(rate * took / 1e3), took)
            joules = energy[0] if energy else None
            writer.writerow(
                {
                    "epoch": 1,
                    "step": step,
                    "loss": 1.0,
                    "lr": 0.1,
                    "samples_per_s": rate,
                    "data_wait_ms": waited,
                    "step_ms": took,
                    "profiled": profiled,
                    "samples": samples,
                    "wall_ms": wall,
                    "energy_j": "" if joules is None else joules,
                    "attempt": attempts[step - 1] if step <= len(attempts) else 0,
                }
            )
    return path
