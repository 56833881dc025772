"""DAG cost: `snakemake -n results/unet2d/cv` on a fresh tree, and a no-op re-run once built.

Runs against a copy of the workflow with a tiny config in a temp dir (the DAG shape is
what matters, not the data size). Prints one JSON object; targets 3 s and 5 s. The
ratio is against `snakemake --version`, the start-up floor measured in the same command.
`--smoke` builds and re-runs `data/raw/brats` (one job) instead of the whole cross-validation
(seconds instead of minutes); `noop_target` says which was re-run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import smoke
from tests.workflow.project import make_project

TARGET = "results/unet2d/cv"


def timed(cmd: list[str], cwd: Path, env: dict[str, str], repeats: int) -> tuple[float, str]:
    """(median seconds of `repeats` runs of `cmd`, the last run's stdout and stderr)."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="median of N runs of each command")
    ap.add_argument("--noop-target", default=TARGET, help="the target built, then re-run")
    args = smoke.parse_args(ap, argv, repeats=1, noop_target="data/raw/brats")
    with tempfile.TemporaryDirectory() as tmp:
        project = make_project(Path(tmp))
        cmd, env = project._command(())
        version = [sys.executable, "-m", "snakemake", "--version"]
        floor, _ = timed(version, project.root, env, args.repeats)
        dry, _ = timed([*cmd, "-n", TARGET], project.root, env, args.repeats)
        project.snakemake(args.noop_target)
        noop_s, noop_out = timed([*cmd, args.noop_target], project.root, env, args.repeats)
    print(
        json.dumps(
            {
                "bench": "dag",
                "smoke": args.smoke,
                "noop_target": args.noop_target,
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
