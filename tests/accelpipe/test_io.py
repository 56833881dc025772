"""The shared writers in accelpipe.io."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from accelpipe.io import write_csv


def test_write_csv_writes_the_header_and_rows(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    write_csv(path, [{"run": "fp32", "rate": 1.5}, {"run": "bf16", "rate": 3}], ["run", "rate"])
    with path.open(newline="") as f:
        assert list(csv.DictReader(f)) == [
            {"run": "fp32", "rate": "1.5"},
            {"run": "bf16", "rate": "3"},
        ]


def test_write_csv_that_fails_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    write_csv(path, [{"run": "old"}], ["run"])
    with pytest.raises(ValueError):  # a key outside the columns
        write_csv(path, [{"run": "new"}, {"other": 1}], ["run"])
    assert path.read_text().splitlines() == ["run", "old"]
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]
