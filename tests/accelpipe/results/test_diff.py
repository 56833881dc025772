"""The diff of two runs (accelpipe.results.diff and `accelpipe diff`) on published run folders
made from summarized traces (tests/helpers/diff_runs.py): two runs of the same config are
within noise on every row; an injected slowdown in one section is flagged there, in what
holds it, and nowhere else; the gate's exit status; bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accelpipe.cli import main
from accelpipe.results.diff import (
    DIFF_JSON,
    DIFF_MD,
    REGRESSED_STATUS,
    Settings,
    diff_runs,
    kernel_changes,
)
from accelpipe.results.diff_stats import SLOWER, WITHIN_NOISE
from tests.helpers.diff_runs import made_run

SETTINGS = Settings(threshold=0.05, min_change=0.02, confidence=0.95, resamples=2000)
SLOW_MS = 6.0  # added to `backward` in every step: a 2/3 longer backward, a 28% longer step
GROUPS = {
    "headline",
    "trace",
    "step breakdown",
    "section",
    "section kernels",
    "device kind",
    "top kernel",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """results/resnet50/{base,again,slow}: `again` is another run of base's config (other
    step-to-step noise, its steps logged in another order), `slow` base with backward slowed."""
    results = tmp_path_factory.mktemp("results") / "resnet50"
    return {
        "base": made_run(results / "base", phase=0),
        "again": made_run(results / "again", phase=1, order=-1),
        "slow": made_run(results / "slow", phase=0, slow={"backward": SLOW_MS}),
    }


def _flagged(diff: dict) -> dict[tuple[str, str], str]:
    return {
        (r["group"], r["name"]): r["verdict"] for r in diff["rows"] if r["verdict"] != WITHIN_NOISE
    }


def test_two_runs_of_the_same_config_are_within_noise_on_every_row(runs: dict[str, Path]) -> None:
    diff = diff_runs(runs["base"], runs["again"], SETTINGS)
    assert {r["group"] for r in diff["rows"]} == GROUPS  # every kind of figure is compared
    changed = [r for r in diff["rows"] if r["change"]]
    assert len(changed) > len(diff["rows"]) / 2  # the runs differ: noise, not a copy
    assert _flagged(diff) == {}
    assert all(r["interval"][0] <= 0 <= r["interval"][1] for r in diff["rows"])
    assert diff["gate"]["passed"] and diff["kernel_changes"] == []


def test_an_injected_slowdown_is_flagged_in_its_section_and_nowhere_else(
    runs: dict[str, Path],
) -> None:
    """backward slowed: its section and step part, and what holds it (the `step` section,
    the profiled step, the headline) are slower; every other row is within noise."""
    diff = diff_runs(runs["base"], runs["slow"], SETTINGS)
    assert _flagged(diff) == {
        ("headline", "throughput"): SLOWER,
        ("headline", "step time"): SLOWER,
        ("trace", "profiled step"): SLOWER,
        ("step breakdown", "backward"): SLOWER,
        ("section", "backward"): SLOWER,
        ("section", "step"): SLOWER,
    }
    backward = next(r for r in diff["rows"] if (r["group"], r["name"]) == ("section", "backward"))
    low, high = backward["interval"]
    assert backward["change"] == pytest.approx(SLOW_MS, abs=1e-6)
    assert low <= backward["change"] <= high
    assert diff["gate"]["regressed"] == ["throughput", "step time"]


def test_kernels_that_appear_vanish_or_change_count(runs: dict[str, Path]) -> None:
    a = json.loads((runs["base"] / "trace_summary.json").read_text())
    b = json.loads(json.dumps(a))
    kernels = b["device_ranks"]["0"]["top_kernels"]["computation"]
    renamed = next(k for k in kernels if k["name"] == "adam_update")
    renamed["name"] = "fused_adam"
    next(k for k in kernels if k["name"] == "gemm_forward")["count"] += 3
    changes = {(c["name"], c["change"], c["count_a"], c["count_b"]) for c in kernel_changes(a, b)}
    assert changes == {
        ("adam_update", "vanishes", 12, None),
        ("fused_adam", "appears", None, 12),
        ("gemm_forward", "count", 12, 15),
    }


def test_the_command_writes_the_report_and_fails_the_gate_with_its_status(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "slower"
    argv = ["diff", str(runs["base"]), str(runs["slow"]), "--out", str(out)]
    assert main(argv) == REGRESSED_STATUS
    report = json.loads((out / DIFF_JSON).read_text())  # written before the gate failed
    assert report["gate"]["passed"] is False
    assert "**REGRESSED** beyond 5.0%: throughput, step time" in (out / DIFF_MD).read_text()
    assert main([*argv, "--threshold", "0.5"]) == 0  # a 28% slower step is under 50%
    assert main([*argv, "--report-only"]) == 0
    slice_ = json.dumps({"diff": {"threshold": 0.5}})
    assert main([*argv, "--config-json", slice_]) == 0


def test_the_default_folder_is_beside_run_a(runs: dict[str, Path]) -> None:
    assert main(["diff", str(runs["base"]), str(runs["again"])]) == 0
    out = runs["base"].parent / "diff" / "base_vs_again"
    assert json.loads((out / DIFF_JSON).read_text())["gate"]["passed"]


def test_a_bad_run_is_one_line_and_the_earlier_report_stays(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "resnet50" / "broken"
    shutil.copytree(runs["again"], broken)
    out = tmp_path / "report"
    assert main(["diff", str(runs["base"]), str(broken), "--out", str(out)]) == 0
    before = (out / DIFF_JSON).read_text()
    (broken / "train_log.csv").unlink()
    assert main(["diff", str(runs["base"]), str(broken), "--out", str(out)]) == 2
    assert f"{broken / 'train_log.csv'}: file not found" in capsys.readouterr().err
    assert (out / DIFF_JSON).read_text() == before


def test_a_run_without_measured_steps_is_not_compared(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gate cannot pass on a headline it could not compare: exit 2, the report kept."""
    short = tmp_path / "resnet50" / "short"
    shutil.copytree(runs["again"], short)
    log = (short / "train_log.csv").read_text().splitlines()
    (short / "train_log.csv").write_text("\n".join(log[:3]) + "\n")  # one measured step
    out = tmp_path / "report"
    assert main(["diff", str(runs["base"]), str(short), "--out", str(out)]) == 2
    assert "not compared" in capsys.readouterr().err
    gate = json.loads((out / DIFF_JSON).read_text())["gate"]
    assert gate["not_compared"] == ["throughput", "step time"]
