"""scripts/timed.sh: `make test` prints each phase's wall time and the total, and a failing
phase still fails it."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from tests.workflow.project import REPO

TIMED = REPO / "scripts" / "timed.sh"
PHASE_TIME = r"== {}: \d+\.\d s{} \(make test so far: \d+\.\d s\)"


def _timed(*args: str) -> subprocess.CompletedProcess[str]:
    start = str(time.time_ns())
    return subprocess.run(["bash", str(TIMED), start, *args], capture_output=True, text=True)


def test_a_phase_prints_its_command_its_output_then_its_time() -> None:
    proc = _timed("lint", "echo", "checked")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["== lint: echo checked", "checked"]
    assert re.fullmatch(PHASE_TIME.format("lint", ""), lines[2]), lines[2]


def test_a_failing_phase_keeps_its_status_and_says_so() -> None:
    proc = _timed("pytest", "sh", "-c", "exit 3")
    assert proc.returncode == 3
    last = proc.stdout.splitlines()[-1]
    assert re.fullmatch(PHASE_TIME.format("pytest", ", failed with status 3"), last), last


def test_without_a_command_it_prints_the_total() -> None:
    proc = _timed("make test")
    assert proc.returncode == 0
    assert re.fullmatch(r"== make test: \d+\.\d s in all\n", proc.stdout), proc.stdout


def test_under_make_a_failing_phase_stops_the_target(tmp_path: Path) -> None:
    """The test target's pattern: later phases and the total do not run, make fails."""
    (tmp_path / "Makefile").write_text(
        "test: START := $(shell date +%s%N)\n"
        f"test: TIMED = bash {TIMED} $(START)\n"
        "test:\n"
        "\t@$(TIMED) first true\n"
        "\t@$(TIMED) second false\n"
        "\t@$(TIMED) third touch third-ran\n"
        '\t@$(TIMED) "make test"\n'
    )
    proc = subprocess.run(["make", "test"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "== second: " in proc.stdout and "failed with status 1" in proc.stdout
    assert "in all" not in proc.stdout and not (tmp_path / "third-ran").exists()


def test_every_phase_of_make_test_is_timed_and_the_total_printed() -> None:
    text = (REPO / "Makefile").read_text()
    recipe = re.search(r"^test: venv\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert recipe is not None
    lines = recipe.group(1).splitlines()
    assert all(line.startswith("\t@$(TIMED) ") for line in lines), lines
    assert lines[-1] == '\t@$(TIMED) "make test"'
    assert re.search(r"^test: TIMED = bash scripts/timed.sh \$\(TEST_START\)$", text, re.M)
