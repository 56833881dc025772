"""DAG cost: `snakemake -n results/unet2d/cv` on a fresh tree, and a no-op re-run once built.

Runs against a copy of the workflow with a tiny config in a temp dir (the DAG shape is
what matters, not the data size). Prints one JSON object; targets 3 s and 5 s. The
ratio is against `snakemake --version`, the start-up floor measured in the same command.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.workflow.project import make_project


def timed(cmd: list[str], cwd: Path, env: dict[str, str], repeats: int = 3) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = make_project(Path(tmp))
        cmd, env = project._command(())
        floor = timed([sys.executable, "-m", "snakemake", "--version"], project.root, env)
        dry = timed([*cmd, "-n", "results/unet2d/cv"], project.root, env)
        project.snakemake("results/unet2d/cv")
        noop_s = timed([*cmd, "results/unet2d/cv"], project.root, env)
        noop = project.snakemake("results/unet2d/cv")
        noop_out = noop.stdout + noop.stderr
    print(
        json.dumps(
            {
                "bench": "dag",
                "dry_run_cv_s": round(dry, 2),
                "noop_rerun_cv_s": round(noop_s, 2),
                "startup_floor_s": round(floor, 2),
                "dry_run_ratio_to_floor": round(dry / floor, 2),
                "noop_ratio_to_floor": round(noop_s / floor, 2),
                "targets_s": {"dry_run": 3, "noop": 5},
                "noop_did_nothing": "Nothing to be done" in noop_out,
            }
        )
    )


if __name__ == "__main__":
    main()
