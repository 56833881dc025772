"""scripts/test_durations.py and the scheduler that reads its table (tests/conftest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.conftest import longest

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("test_durations", REPO / "scripts/test_durations.py")
assert SPEC is not None and SPEC.loader is not None
durations = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(durations)

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.workflow.test_ssd" name="test_a" time="3.5"/>
<testcase classname="tests.workflow.test_ssd" name="test_b[x]" time="1.0"/>
<testcase classname="tests.integration.test_slurm" name="test_c" time="10"/>
<testcase classname="tests.integration.test_tf_slurm" name="test_d" time="2"/>
<testcase classname="tests.scripts.test_test_durations.TestClass" name="test_e" time="0.25"/>
<testcase classname="tests.gone.test_removed" name="test_f" time="99"/>
</testsuite></testsuites>
"""


def test_a_report_sums_to_seconds_per_work_unit(tmp_path: Path) -> None:
    (tmp_path / "main.xml").write_text(REPORT)
    assert durations.unit_seconds([tmp_path / "main.xml"]) == {
        "slurm": 12.0,  # the two Slurm files are one unit
        "tests/scripts/test_test_durations.py": 0.2,  # a class's test counts for its file
        "tests/workflow/test_ssd.py": 4.5,
    }  # a file no longer in the tree is left out


@pytest.mark.parametrize(
    ("pending", "expected"),
    [
        (["a.py", "b.py", "c.py"], "b.py"),
        (["a.py", "new.py", "b.py"], "new.py"),  # unknown: taken as the longest
        (["c.py"], "c.py"),
    ],
)
def test_the_longest_pending_unit_starts_next(pending: list[str], expected: str) -> None:
    assert longest(pending, {"a.py": 5.0, "b.py": 40.0, "c.py": 0.1}) == expected
