"""performance.json: a run's throughput, step time, data wait, time to train, compute, energy
and host load, beside the published figure for the same workload, precision and device family.

One home per job, each module pure functions over a run's files, no framework:

- `steps`: the step statistics over train_log.csv (throughput, per-step spread, data wait,
  the stage's throughput and attempts, the profiled step against the measured one);
- `figures`: the catalogue of published figures (each workload's published.yaml) and a run's ratio
  to the one that matches it;
- `compute`: FLOPs per sample, model TFLOP/s, MFU and the fraction of the matmul ceiling;
- `energy`: the measured steps' joules, per 1,000 samples and as mean watts;
- `time_to_target`: the run's seconds to the first evaluation that reached its target;
- `host_load`: whether other processes loaded the host over the training loop;
- `report`: performance.json of a run, put together from the above.

The one definition of each figure, used by performance.json, the benchmark table, the grid
and the compare page (docs/benchmarks.md, "Performance figures"), is DEFINITIONS:

- throughput (the headline): samples over the wall time they took, over the measured steps:
  the logged steps after the first `performance.warmup_steps` of each attempt (tracing,
  compilation, caches filling) that the profiler left alone. A logged step's wall time runs
  from the end of the previous logged step of its epoch (or the epoch's start), so data
  wait, logging and any unlogged steps between are in it (train_log.csv's `samples` and
  `wall_ms`).
- stage throughput: the run's samples (every step of the trained model) over the train
  stage's wall time, every attempt of a resumed run together (start-up, warm-up, profiled
  steps, evaluation, checkpoints and the steps a killed attempt did for nothing included).
- time to train: the train stage's wall time over every attempt (stage.json's `attempts`,
  each listed in performance.json), so never below the time to target, which counts each
  attempt up to its last checkpoint.
- per-step distribution: median, p10 and p90 of single logged steps' rates and times. A
  spread, never a throughput: the median of per-step rates overstates a run whose slow steps
  are few but long.
- energy: the joules of the measured steps (train_log.csv's `energy_j`, over the same rows
  and wall time as the throughput), per 1,000 samples and as mean watts, beside the whole
  train process's joules (stage.json's `power`); null with the reason where no power source
  measured the run's devices.

This module holds only names: Snakemake plans with `figures` (the publish slice carries the
workload's figures) and must not load the rest.
"""

from __future__ import annotations

PERFORMANCE_FILE = "performance.json"
DEFINITIONS = {
    "throughput": (
        "samples over the wall time of the measured steps (logged steps after the warm-up of "
        "each attempt that the profiler left alone), data wait and logging included"
    ),
    "stage_throughput": (
        "the run's samples (its steps x the global batch) over the train stage's wall time, "
        "every attempt of a resumed run together (start-up, warm-up, profiled steps, "
        "evaluation, checkpoints and steps redone after a kill included)"
    ),
    "time_to_train_s": (
        "the train stage's wall time, from its start (the launch) to its output, summed over "
        "every attempt of a killed and resumed run (`attempts`: each one's seconds)"
    ),
    "per_step": "median, p10 and p90 of single measured steps: a spread, not a throughput",
    "model_tflops": (
        "FLOPs per training sample (counted by the framework over one real step) x the "
        "throughput, over every device of the run"
    ),
    "mfu": "model TFLOP/s over the devices' published dense peak at the run's precision",
    "gemm_fraction": (
        "model TFLOP/s over the matmul ceiling measured on the run's device and precision "
        "(gemm.gemm_tflops x devices)"
    ),
    "time_to_target_s": (
        "seconds from the run's start (model, data and probe ready) to the end of the first "
        "evaluation inside training that reached the quality target, training and evaluation "
        "included (MLPerf's time to train); a resumed run counts each attempt up to its last "
        "checkpoint"
    ),
    "energy": (
        "joules the run's devices used over the measured steps (train_log.csv's energy_j: "
        "NVML, amdsmi, hl-smi or RAPL), per 1,000 samples and as mean watts over their wall "
        "time; beside it the whole train process's joules"
    ),
}


def rounded(value: float | None) -> float | None:
    """A figure to 4 significant digits (None stays None)."""
    return float(f"{value:.4g}") if value is not None else None
