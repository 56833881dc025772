"""Segmenter hyperparameter grid: wall time of the grid's trials in parallel vs one after
another under the same Snakemake; prints one JSON.

Set-up (untimed): a copy of the workflow in a temp dir made as the workflow tests make theirs
(tests.workflow.project.make_project: a git checkout with the tiny config .test/config.yaml),
with `segmenter.grid` set to model.decoder [mask, linear] (2 trials; `--lrs` adds a
train.lr axis: 2 lrs make 4 trials), then `snakemake data/prepared/ade20k/tfrecord`, so the
synthetic ADE20K is made and prepared before any timing.

Timed, each a whole `snakemake --cores N results/segmenter/grid` (every trial's train,
evaluate, summarize_trace and publish_run jobs, then the grid ranking), after deleting the
previous run's work/segmenter, results/segmenter and logs/segmenter:

* parallel: as a user runs it: Snakemake runs whatever fits in N cores at once.
* sequential: the same command with `--default-resources serial=1 --resources serial=1`:
  every job asks one unit of a resource of which there is one, so Snakemake runs the very
  same jobs one after another. Each job keeps its own threads (the rule's `threads` capped
  at N: train 4 -> N, evaluate 2), so a trial runs exactly as it does in the parallel run;
  only the concurrency differs. (`--cores 1` would not be fair: it gives every train job one
  thread instead of N. Running each trial's target in its own snakemake would add a Snakemake
  start-up and DAG build per trial to the baseline.)

The modes alternate over `--repeats` (P S S P ...: other jobs' load hits both alike); wall
seconds are the median per mode; ratio = sequential / parallel (the grid's speed-up; > 1 is
faster in parallel). No target is asserted. `--dry-run` (and `--smoke`) plans the grid in both
modes instead of running it: it checks the set-up, and times Snakemake's planning only.

Parallelism on CPU: the `accel` resource is 0 there (train_accelerators: no devices to
lease), so only `--cores` limits concurrency. A train job asks 4 threads and gets all of N=2
cores, evaluate asks 2, so on 2 cores two trials' train or evaluate jobs never overlap: only
the 1-thread jobs (summarize_trace, publish_run, grid) run beside others, and the speed-up is
small there. `--cores 4` on a bigger machine lets two 2-thread evaluates overlap, and so on.
`max_concurrent_jobs` (from Snakemake's log) says how many jobs each mode ran at once.

    PYTHONPATH=workflow:. python benchmarks/bench_grid.py                  # 2 trials
    PYTHONPATH=workflow:. python benchmarks/bench_grid.py --lrs 0.05 0.01  # 4 trials
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import smoke
from tests.workflow.project import TINY_CONFIG, Project, make_project

WORKLOAD = "segmenter"
PREPARED = "data/prepared/ade20k/tfrecord"
GRID = f"results/{WORKLOAD}/grid"
SERIAL = ("--default-resources", "serial=1", "--resources", "serial=1")
# Snakemake's log: a job starts at "rule <name>:" / "localrule <name>:", ends at "Finished jobid"
_EVENT = re.compile(r"^(?:(local)?rule \w+:|Finished jobid)", re.MULTILINE)


def grid_config(lrs: list[float]) -> dict[str, Any]:
    config = copy.deepcopy(TINY_CONFIG)
    grid: dict[str, list[Any]] = {"model.decoder": ["mask", "linear"]}
    if lrs:
        grid["train.lr"] = lrs
    config[WORKLOAD]["grid"] = grid
    return config


def clear_trials(project: Project) -> None:
    """Delete every output of the trials and the grid (the prepared dataset stays)."""
    for folder in (f"work/{WORKLOAD}", f"results/{WORKLOAD}", f"logs/{WORKLOAD}"):
        shutil.rmtree(project.root / folder, ignore_errors=True)


def max_concurrent(log: str) -> int:
    running = most = 0
    for event in _EVENT.finditer(log):
        running += -1 if event.group(0).startswith("Finished") else 1
        most = max(most, running)
    return most


def run_grid(project: Project, cores: int, serial: bool, dry_run: bool) -> tuple[float, int]:
    """(wall seconds, most jobs at once) of the whole grid from no trial outputs."""
    clear_trials(project)
    # Project.snakemake passes `--cores 2` first; the later `--cores` wins.
    plan = ("--dry-run",) if dry_run else ()
    args = (*(SERIAL if serial else ()), *plan, "--cores", str(cores), GRID)
    started = time.perf_counter()
    proc = project.snakemake(*args)
    wall = time.perf_counter() - started
    return wall, max_concurrent(proc.stdout + proc.stderr)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=2, help="snakemake --cores of both modes")
    ap.add_argument("--lrs", type=float, nargs="*", default=[], help="a train.lr grid axis")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each mode, alternating")
    ap.add_argument("--tmp", default=None, help="scratch folder (default: system temp)")
    ap.add_argument("--dry-run", action="store_true", help="plan the grid, run no job")
    args = smoke.parse_args(ap, argv, dry_run=True)

    config = grid_config(args.lrs)
    scratch = Path(tempfile.mkdtemp(prefix="bench_grid.", dir=args.tmp))
    try:
        (scratch / "project").mkdir()
        project = make_project(scratch / "project", config)
        if not args.dry_run:
            project.snakemake(PREPARED)  # untimed: the dataset is not the grid's cost
        jobs = project.planned_jobs(GRID)
        wall: dict[str, list[float]] = {"parallel": [], "sequential": []}
        most: dict[str, list[int]] = {"parallel": [], "sequential": []}
        names = list(wall)
        for r in range(args.repeats):
            for name in names if r % 2 == 0 else names[::-1]:
                serial = name == "sequential"
                seconds, at_once = run_grid(project, args.cores, serial, args.dry_run)
                wall[name].append(seconds)
                most[name].append(at_once)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    median = {name: statistics.median(v) for name, v in wall.items()}
    result = {
        "bench": "grid",
        "smoke": args.smoke,
        "dry_run": args.dry_run,
        "device": "cpu",
        "workload": WORKLOAD,
        "cores": args.cores,
        "grid": config[WORKLOAD]["grid"],
        "trials": jobs.get("train", 0),
        "jobs": jobs,
        "repeats": args.repeats,
        "parallel_s": round(median["parallel"], 2),
        "sequential_s": round(median["sequential"], 2),
        "ratio": round(median["sequential"] / median["parallel"], 4),
        "wall_s_rounds": {k: [round(t, 2) for t in v] for k, v in wall.items()},
        "max_concurrent_jobs": {k: max(v) for k, v in most.items()},
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
