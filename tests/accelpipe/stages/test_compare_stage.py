"""`accelpipe compare` (accelpipe.stages.compare) through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelpipe.cli import main
from tests.helpers.run_folders import write_run


def _compare(runs: list[Path], out: Path, per_hour: dict) -> int:
    cfg = json.dumps({"cost": {"per_hour": per_hour}})
    args = ["compare", "--runs", *map(str, runs), "--config-json", cfg, "--out", str(out)]
    return main(args)


def test_compare_writes_the_folder_at_the_configs_prices(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, "ssd", "fp32"), write_run(tmp_path, "segmenter", "bf16")]
    assert _compare(runs, tmp_path / "compare", {"cpu": 2.0}) == 0
    data = json.loads((tmp_path / "compare/compare.json").read_text())
    assert [(r["workload"], r["run"]) for r in data["runs"]] == [
        ("ssd", "fp32"),
        ("segmenter", "bf16"),
    ]
    assert all(r["cost_per_run"] == pytest.approx(60 / 3600 * 2.0, rel=1e-3) for r in data["runs"])


def test_a_broken_run_is_one_line_naming_its_file_and_leaves_the_old_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path, "ssd", "fp32")
    assert _compare([run], tmp_path / "compare", {}) == 0
    page = (tmp_path / "compare/compare.html").read_text()
    (run / "metrics.json").write_text("{not json")
    assert _compare([run], tmp_path / "compare", {}) == 2
    assert f"{run / 'metrics.json'}: not valid JSON" in capsys.readouterr().err
    assert (tmp_path / "compare/compare.html").read_text() == page
