"""The evaluations inside training of a published run, checked against its other files, and
its MLPerf log checked by MLCommons' own tools (mlperf-logging, a test dependency only)."""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelpipe.core import mllog

# The MLPerf training ruleset each benchmark's log is checked under: ResNet-50 under 4.0.0, the
# last ruleset with resnet (4.1.0 dropped it); SSD-ResNet34 under 1.1.0, the last with MLPerf's
# old ssd benchmark (2.0 replaced it by RetinaNet, keeping the name).
MLPERF_RULESETS = {"resnet": "4.0.0", "ssd": "1.1.0"}
# The workloads that are no MLPerf benchmark (unet2d, swinunetr, segmenter): the rules every
# benchmark shares, those of this ruleset's common.yaml, without any benchmark's config.
COMMON_RULESET = "4.0.0"
# MLPerf's time to train has the log's 1 ms resolution at either end
TIME_TOLERANCE = 0.01
RESOLUTION_S = 0.002


@dataclass(frozen=True)
class MLPerfVerdict:
    """What MLCommons' tools make of one mllog.txt."""

    benchmark: str  # submission_benchmark
    ruleset: str  # the training ruleset it was checked under
    problems: list[str]  # the compliance checker's complaints; empty: it passes
    status: str | None  # run_stop's status
    time_to_train_s: float | None  # the result summarizer's time to train (run_start..run_stop)


def mlperf_verdict(path: Path) -> MLPerfVerdict:
    """MLCommons' compliance checker and result summarizer on the log at `path`.

    An MLPerf benchmark's log goes through the checker exactly as its command line runs it
    (`python -m mlperf_logging.compliance_checker --usage training --ruleset <r> <path>`:
    common.yaml, then the division's and the benchmark's configs it queues) with warnings as
    errors, and through the result summarizer's scoring of one result file (which runs the
    checker again and drops a log that fails). Any other workload's log goes through
    common.yaml's rules alone (the checker's `configured_checks` runs one config; the
    division's and benchmark's configs its rules queue are dropped: MLPerf has none for it),
    less the one rule a non-benchmark breaks by definition: submission_benchmark, one of
    MLPerf's names. That key is checked here instead: exactly one, non-empty.
    """
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

    read, _ = mlp_parser.parse_file(str(path), ruleset=COMMON_RULESET)
    benchmarks = [line.value["value"] for line in read if line.key == mllog.SUBMISSION_BENCHMARK]
    benchmark = str(benchmarks[0]) if benchmarks else ""
    ruleset = MLPERF_RULESETS.get(benchmark, COMMON_RULESET)
    common = f"training_{ruleset}/common.yaml"
    checker = mlp_compliance.make_checker("training", ruleset, quiet=False, werror=True)
    lines, errors = mlp_parser.parse_file(str(path), ruleset=ruleset)
    problems = [f"parse error: {error} in {line}" for line, error in errors]
    if benchmark in MLPERF_RULESETS:
        checker.check_file(str(path), common)
    else:
        del mlp_compliance.enqueued_configs[:]
        try:
            checker.configured_checks(lines, str(Path(mlp_compliance.__file__).parent / common))
        finally:
            del mlp_compliance.enqueued_configs[:]  # the division's and benchmark's configs
        checker.overwrite_messages([mllog.SUBMISSION_BENCHMARK])
        if len(benchmarks) != 1 or not benchmark:
            problems.append(f"submission_benchmark: {len(benchmarks)} lines, {benchmark!r}")
    problems += [*checker.overwritable.values(), *checker.not_overwritable]
    stops = [line for line in lines if line.key == mllog.RUN_STOP]
    status = stops[0].value["metadata"].get(mllog.STATUS) if stops else None
    return MLPerfVerdict(
        benchmark, ruleset, problems, status, _time_to_train_s(path, lines, benchmark, ruleset)
    )


def _time_to_train_s(path: Path, lines: list[Any], benchmark: str, ruleset: str) -> float | None:
    """The result summarizer's time to train of the log, in seconds (None: it has none).

    A benchmark's log is scored as the summarizer scores a result folder of one run (its
    `_compute_strong_score_standalone`: compliance, then run_stop - run_start); another
    workload's lines by the scoring function that uses (`_query_mlperf_strong_scaling_score`).
    """
    from mlperf_logging.result_summarizer import result_summarizer

    if benchmark not in MLPERF_RULESETS:
        try:
            return float(result_summarizer._query_mlperf_strong_scaling_score(lines)) * 60
        except ValueError:  # no run_start or run_stop
            return None
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "result_0.txt"
        shutil.copyfile(path, result)
        scores = result_summarizer._compute_strong_score_standalone(
            benchmark, None, False, folder, "training", ruleset, return_full_scores=True
        )[0]
        minutes = scores.get(str(result))
    return None if minutes is None else float(minutes) * 60


def check_mlperf_log(path: Path, time_to_target_s: float | None, *, timed: bool = True) -> None:
    """MLCommons' compliance checker passes the log; its run_stop says whether the run reached
    its target (`time_to_target_s` not None); and, where `timed`, the result summarizer's time
    to train is `time_to_target_s` within 1% (and the log's millisecond resolution). Not
    `timed`: a run resumed across attempts, whose MLPerf time includes the time between them."""
    verdict = mlperf_verdict(path)
    assert verdict.problems == [], (path, verdict.ruleset, verdict.problems)
    reached = time_to_target_s is not None
    assert verdict.status == (mllog.SUCCESS if reached else mllog.ABORTED), verdict
    if timed and time_to_target_s is not None:
        assert verdict.time_to_train_s is not None, verdict
        gap = abs(verdict.time_to_train_s - time_to_target_s)
        assert gap <= TIME_TOLERANCE * time_to_target_s + RESOLUTION_S, (verdict, time_to_target_s)


def check_evaluations(run: Path, epochs: list[int], reached: bool | None) -> list[dict[str, str]]:
    """eval_log.csv evaluated after `epochs`; the last evaluation scores the final model as the
    evaluate stage does (one scoring function); performance.json's time to target is the first
    reaching row's run time, or null; mllog.txt passes MLCommons' compliance checker, ends
    MLPerf's run with the status that says at the evaluation that decided it, and times it as
    performance.json does. `reached`: whether an evaluation reached the target (None: either).
    Returns eval_log.csv's rows."""
    with (run / "eval_log.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == epochs
    metrics = json.loads((run / "metrics.json").read_text())
    metric = rows[-1]["metric"]
    assert float(rows[-1]["value"]) == metrics[metric], (rows[-1], metrics[metric])
    performance = json.loads((run / "performance.json").read_text())
    first = next((r for r in rows if r["reached"] == "1"), None)
    assert reached is None or (first is not None) is reached
    expected = float(first["run_s"]) if first is not None else None
    assert performance["time_to_target_s"] == expected, performance["time_to_target"]
    check_mlperf_log(run / mllog.FILENAME, performance["time_to_target_s"])
    stopped_after = int((first or rows[-1])["epoch"])
    assert _last_epoch(run / mllog.FILENAME) == stopped_after
    check_epoch_numbers(run)
    return rows


def _last_epoch(path: Path) -> int:
    """The epoch_num of the last line of the log that has one."""
    entries = [mllog.parse(line) for line in path.read_text().splitlines()]
    return int([e for e in entries if mllog.EPOCH_NUM in e.metadata][-1].metadata["epoch_num"])


def check_epoch_numbers(run: Path) -> None:
    """train_log.csv, eval_log.csv and mllog.txt count epochs alike, from 1 (MLPerf's
    epoch_num): a step's epoch is the one it trained in, an evaluation's the one it followed,
    so an evaluation has the epoch of the train_log row of its step. mllog.txt holds the
    epochs and evaluations up to its run_stop: MLPerf's run ends there."""
    with (run / "train_log.csv").open(newline="") as f:
        epoch_of_step = {int(r["step"]): int(r["epoch"]) for r in csv.DictReader(f)}
    with (run / "eval_log.csv").open(newline="") as f:
        evaluations = list(csv.DictReader(f))
    assert min(epoch_of_step.values()) == 1
    assert [epoch_of_step[int(r["step"])] for r in evaluations] == [
        int(r["epoch"]) for r in evaluations
    ]
    entries = [mllog.parse(line) for line in (run / mllog.FILENAME).read_text().splitlines()]
    last = max(
        (int(e.metadata[mllog.EPOCH_NUM]) for e in entries if mllog.EPOCH_NUM in e.metadata),
        default=0,
    )
    started = [int(e.metadata["epoch_num"]) for e in entries if e.key == mllog.EPOCH_START]
    assert started == [e for e in sorted(set(epoch_of_step.values())) if e <= last]
    evaluated = [int(e.metadata["epoch_num"]) for e in entries if e.key == mllog.EVAL_ACCURACY]
    assert evaluated == [
        int(r["epoch"]) for r in evaluations if r["value"] and int(r["epoch"]) <= last
    ]
