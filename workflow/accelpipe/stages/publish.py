"""`publish`, `aggregate`, `grid` and `benchmark`: a run's result folder, the
cross-validation summary, the ranking of a hyperparameter grid and the benchmark table."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from accelpipe import engines
from accelpipe.config import registry
from accelpipe.config.schema import stage_slice
from accelpipe.results import benchmark, ttt
from accelpipe.results.leaderboard import rank_runs
from accelpipe.results.publish import aggregate_folds, publish_run

log = logging.getLogger("accelpipe")


def run_publish(args: argparse.Namespace) -> None:
    stage_dirs = {
        "raw": Path(args.raw),
        "prepare": Path(args.prepared),
        "train": Path(args.model),
        "evaluate": Path(args.eval),
        "trace": Path(args.trace),
    }
    weights = engines.for_workload(args.workload).weights
    preflight = Path(args.preflight) if args.preflight else None
    publish_run(stage_dirs, stage_slice(args), Path(args.out), weights, preflight)


def run_aggregate(args: argparse.Namespace) -> None:
    summary = aggregate_folds([Path(r) for r in args.runs], Path(args.out))
    log.info("cross-validation mean: %s", json.dumps(summary["mean"]))


def run_grid(args: argparse.Namespace) -> None:
    metric = registry.workload(args.workload).metric
    keys = stage_slice(args)["keys"]
    rows = rank_runs([Path(r) for r in args.runs], args.workload, metric, keys, Path(args.out))
    best = rows[0]
    log.info("grid: best of %d runs is %s (%s %s)", len(rows), best["run"], metric, best[metric])


def run_ttt(args: argparse.Namespace) -> None:
    summary = ttt.write([Path(r) for r in args.runs], args.workload, Path(args.out))
    log.info(
        "time to target over %d seed runs: olympic mean %s s%s",
        len(summary["seeds"]),
        summary["olympic_mean_s"],
        f" ({summary['not_scored']})" if summary["not_scored"] else "",
    )


def run_benchmark(args: argparse.Namespace) -> None:
    warmup = stage_slice(args)["warmup_steps"]
    rows = benchmark.write_table(
        [Path(r) for r in args.rows], args.workload, warmup, Path(args.out)
    )
    for row in rows:
        log.info("benchmark %s: %s samples/s", row["row"], row["samples_per_s"])
