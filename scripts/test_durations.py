"""Write tests/durations.json from pytest's JUnit XML reports: the seconds each work unit
(a test file, or the files that share one thing: tests/conftest.py's work_unit) took, which
`make test`'s scheduler reads to start the longest units first.

    python scripts/test_durations.py .test-reports/main.xml [more.xml ...]

`make test` writes .test-reports/<suite>.xml; refresh the table after a full run whose set of
tests or their cost changed much (a stale table only costs balance, never a test).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import DURATIONS, work_unit  # noqa: E402


def unit_seconds(reports: list[Path]) -> dict[str, float]:
    """Seconds per work unit over every test case of `reports` (setup, call and teardown)."""
    seconds: Counter[str] = Counter()
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            module = case.get("classname", "")
            # JUnit names a test by its dotted module (and class); the unit is its file
            parts = module.split(".")
            while parts and not (REPO / Path(*parts)).with_suffix(".py").exists():
                parts.pop()
            if parts:
                path = Path(*parts).with_suffix(".py").as_posix()
                seconds[work_unit(f"{path}::x")] += float(case.get("time", 0))
    return {unit: round(s, 1) for unit, s in sorted(seconds.items())}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    table = unit_seconds([Path(a) for a in argv])
    DURATIONS.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{DURATIONS.relative_to(REPO)}: {len(table)} units, {sum(table.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
