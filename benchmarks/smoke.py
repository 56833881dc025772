"""Smoke mode, shared by every benchmark: `--smoke` (or ACCELPIPE_BENCH_SMOKE=1 in the
environment) runs it at its smallest sizes with one repeat, so CI can check that it still runs
and prints its JSON (tests/benchmarks/test_smoke.py). Its numbers measure nothing: the JSON
says `"smoke": true`, and nothing reads a timing from it."""

from __future__ import annotations

import argparse
import os
from typing import Any

ENV = "ACCELPIPE_BENCH_SMOKE"
# The step harness's shortest loop: one measured step after one warm-up, once, on one batch
# and one thread (the step benchmarks' shared options).
STEP_LOOP: dict[str, Any] = {
    "steps": 1,
    "warmup_steps": 1,
    "rounds": 1,
    "distinct_batches": 1,
    "threads": 1,
}
HELP = f"smallest sizes, one repeat: checks that the benchmark runs (also {ENV}=1); no timing"


def parse_args(
    parser: argparse.ArgumentParser, argv: list[str] | None, **smallest: Any
) -> argparse.Namespace:
    """`parser`'s arguments plus `smoke`; in smoke mode `smallest` replaces the defaults of
    those options (an option given on the command line still wins)."""
    parser.add_argument("--smoke", action="store_true", help=HELP)
    args = parser.parse_args(argv)
    unknown = smallest.keys() - vars(args).keys()
    if unknown:  # a renamed option would otherwise leave the smoke run at full size
        raise ValueError(f"smoke sizes for options the parser lacks: {sorted(unknown)}")
    if args.smoke or os.environ.get(ENV) == "1":
        parser.set_defaults(**smallest, smoke=True)
        args = parser.parse_args(argv)
    return args


def profile(block: dict[str, Any], smoke: bool) -> dict[str, Any]:
    """A workload's `profile` block, with the shortest schedule (one recorded step) in
    smoke mode."""
    if not smoke:
        return block
    return {**block, "schedule": {"wait": 0, "warmup": 0, "active": 1, "repeat": 1}}
