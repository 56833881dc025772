"""Run every benchmark in its own process and print their JSON objects as one JSON list.

`--smoke` runs each in its smoke mode (benchmarks/smoke.py: smallest sizes, one repeat): it
checks that they run, and its numbers measure nothing."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = (
    "bench_prepare.py",
    "bench_loader.py",
    "bench_trace_summary.py",
    "bench_dag.py",
    "bench_swinunetr.py",
    "bench_resnet50.py",
    "bench_tfrecord.py",
    "bench_coco_instances.py",
    "bench_ssd_input.py",
    "bench_ssd_step.py",
    "bench_segmenter_input.py",
    "bench_segmenter_step.py",
    "bench_grid.py",
    "bench_scale.py",
)


def environment() -> dict[str, str]:
    """This process's environment with the package and the repository on the import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent / "workflow"), str(HERE.parent)])
    return env


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="each benchmark's smoke mode")
    args = parser.parse_args(argv)
    env = environment()
    results = []
    for name in BENCHMARKS:
        command = [sys.executable, str(HERE / name), *(["--smoke"] if args.smoke else [])]
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), file=sys.stderr)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
