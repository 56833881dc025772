"""Every benchmark under benchmarks/ in its smoke mode (benchmarks/smoke.py): it still runs
and prints its JSON. Benchmarks rot where nothing runs them; this runs each in its own
process, as `make bench` does. Nothing here reads a timing: smoke sizes measure nothing."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import run_all, smoke

BENCHMARKS = Path(run_all.__file__).resolve().parent

# script -> (its "bench" name, the headline keys its JSON must hold)
HEADLINES: dict[str, tuple[str, set[str]]] = {
    "bench_prepare.py": ("prepare", {"floor_s", "prepare_s", "ratio_to_floor", "bound"}),
    "bench_loader.py": ("loader_vs_train", {"loader_batches_per_s", "train_batches_per_s"}),
    "bench_trace_summary.py": ("trace_summary", {"mb_per_s", "peak_rss_mb", "events"}),
    "bench_dag.py": ("dag", {"dry_run_cv_s", "noop_rerun_cv_s", "startup_floor_s"}),
    "bench_swinunetr.py": ("swinunetr_step_vs_minimal", {"step_ms", "ratio", "same_init"}),
    "bench_resnet50.py": ("resnet50_train_vs_minimal", {"img_per_s", "ratio", "same_init"}),
    "bench_tfrecord.py": ("tfrecord", {"coco", "ade20k"}),
    "bench_coco_instances.py": ("coco_instances", {"records_s", "stdlib_load_s", "records"}),
    "bench_ssd_input.py": ("ssd_input", {"input_batches_per_s", "step_per_s", "ratio"}),
    "bench_ssd_step.py": ("ssd_step", {"step_ms", "ratio", "same_init"}),
    "bench_segmenter_input.py": ("segmenter_input", {"input_batches_per_s", "step_per_s"}),
    "bench_segmenter_step.py": ("segmenter_step", {"step_ms", "ratio", "same_init"}),
    "bench_grid.py": ("grid", {"parallel_s", "sequential_s", "trials", "jobs"}),
    "bench_scale.py": ("scale", {"full_size", "datasets", "workers"}),
}


def numbers(value: Any) -> Iterator[float]:
    """Every number in a JSON value (booleans are not numbers here)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from numbers(item)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield float(value)


def test_every_benchmark_script_is_run_and_smoke_tested() -> None:
    scripts = {p.name for p in BENCHMARKS.glob("bench_*.py")}
    assert set(run_all.BENCHMARKS) == scripts
    assert set(HEADLINES) == scripts


@pytest.mark.parametrize("script", run_all.BENCHMARKS)
def test_benchmark_runs_in_smoke_mode(script: str, tmp_path: Path) -> None:
    # One thread per process: a smoke run times nothing, and on CI's 2 cores it shares them
    # with the other test process. Scratch files go under tmp_path.
    env = run_all.environment() | {"OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--smoke"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"{script} --smoke failed:\n{proc.stderr[-4000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    bench, headline = HEADLINES[script]
    assert result["bench"] == bench
    assert result["smoke"] is True
    assert headline <= result.keys()
    assert all(math.isfinite(x) for x in numbers(result)), result
    # what the benchmark checks of itself, not a timing: both loops start from one init,
    # the no-op re-run did nothing
    assert result.get("same_init", True) is True
    assert result.get("noop_did_nothing", True) is True


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=8)
    return parser


def test_smoke_mode_replaces_defaults_but_not_given_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(smoke.ENV, raising=False)
    full = smoke.parse_args(_parser(), [], rounds=1, steps=1)
    assert (full.rounds, full.steps, full.smoke) == (20, 8, False)
    small = smoke.parse_args(_parser(), ["--smoke", "--steps", "3"], rounds=1, steps=1)
    assert (small.rounds, small.steps, small.smoke) == (1, 3, True)
    monkeypatch.setenv(smoke.ENV, "1")
    by_env = smoke.parse_args(_parser(), [], rounds=1, steps=1)
    assert (by_env.rounds, by_env.steps, by_env.smoke) == (1, 1, True)


def test_smoke_sizes_for_an_option_the_parser_lacks_are_refused() -> None:
    with pytest.raises(ValueError, match="repeats"):
        smoke.parse_args(_parser(), [], rounds=1, repeats=1)
