"""Time to target: the run's seconds to the first evaluation that reached its target."""

from __future__ import annotations

from pathlib import Path

from accelpipe.performance.time_to_target import time_to_target


def _eval_log(folder: Path, rows: list[tuple[int, str, str, str]]) -> Path:
    """eval_log.csv of (epoch, value, target, reached) rows, 4 steps of 8 samples an epoch,
    10 s of run time an epoch."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["epoch,step,samples,metric,value,target,reached,eval_s,run_s"]
    lines += [f"{e},{4 * e},{32 * e},top1,{v},{t},{r},0.5,{10.0 * e}" for e, v, t, r in rows]
    (folder / "eval_log.csv").write_text("\n".join(lines) + "\n")
    return folder / "eval_log.csv"


def test_time_to_target_is_the_run_time_of_the_first_evaluation_that_reached_it(
    tmp_path: Path,
) -> None:
    log = _eval_log(
        tmp_path, [(1, "0.2", "0.5", "0"), (2, "0.6", "0.5", "1"), (3, "0.7", "0.5", "1")]
    )
    assert time_to_target(log) == {
        "time_to_target_s": 20.0,
        "time_to_target": {
            "epoch": 2,
            "step": 8,
            "samples": 64,
            "metric": "top1",
            "value": 0.6,
            "target": 0.5,
            "evaluations": 2,
        },
    }


def test_a_target_not_reached_says_how_far_the_run_got(tmp_path: Path) -> None:
    log = _eval_log(tmp_path, [(1, "0.2", "0.5", "0"), (2, "0.3", "0.5", "0")])
    assert time_to_target(log) == {
        "time_to_target_s": None,
        "time_to_target": {
            "not_reached": "not reached in 2 evaluations, the last after epoch 2: top1 0.3 "
            "against 0.5"
        },
    }
    unpublished = _eval_log(tmp_path / "none", [(1, "0.2", "", "")])
    assert (
        "top1 0.2 against no target" in time_to_target(unpublished)["time_to_target"]["not_reached"]
    )
