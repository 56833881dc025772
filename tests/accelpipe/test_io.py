"""The shared writers in accelpipe.io."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from accelpipe.errors import DataError
from accelpipe.io import read_json, write_csv


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


def test_read_json_reads_what_the_stdlib_reads(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"x": [1, 2.5, "\\u00e9"], "big": 123456789012345678901234567890}')
    assert read_json(path) == {"x": [1, 2.5, "é"], "big": 123456789012345678901234567890}
    path.write_text('{"loss": NaN}')  # what torch and numpy write for a diverged run
    assert math.isnan(read_json(path)["loss"])


def test_read_json_names_the_file_and_place_of_a_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "a": 1,\n  "b": }\n')
    with pytest.raises(DataError, match=r"bad\.json: not valid JSON .*line 3 column 8"):
        read_json(path)
    with pytest.raises(DataError, match=r"missing\.json: file not found"):
        read_json(tmp_path / "missing.json")
