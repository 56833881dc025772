"""The shared writers in accelpipe.core.io."""

from __future__ import annotations

import csv
import gzip
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accelpipe.core import io
from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path, read_json, remove_stale_temporaries, write_csv


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


# ------------------------------------------------------------- temporaries of killed stages
_KILLED_STAGE = """
import sys, time
from pathlib import Path
from accelpipe.core.io import atomic_path
with atomic_path(Path(sys.argv[1])) as tmp:
    tmp.mkdir()
    (tmp / "part-0.npy").write_bytes(b"half of the prepared data")
    print("writing", flush=True)
    time.sleep(600)
"""


def _temporaries(final: Path) -> list[str]:
    return sorted(p.name for p in final.parent.glob(f".{final.name}.*.tmp"))


def test_a_killed_stages_temporary_is_removed_by_its_next_run(tmp_path: Path) -> None:
    """SIGKILL leaves `.2d.<host>-<pid>.*.tmp` with partial data; the next run removes it."""
    final = tmp_path / "prepared" / "2d"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "workflow")}
    stage = subprocess.Popen(
        [sys.executable, "-c", _KILLED_STAGE, str(final)], stdout=subprocess.PIPE, env=env
    )
    assert stage.stdout is not None and stage.stdout.readline() == b"writing\n"
    stage.kill()
    stage.wait()
    (left,) = _temporaries(final)
    assert f".2d.{socket.gethostname()}-{stage.pid}." in left
    with atomic_path(final) as tmp:
        tmp.write_text("done")
    assert _temporaries(final) == [] and final.read_text() == "done"


def test_only_temporaries_provably_stale_are_removed(tmp_path: Path) -> None:
    final = tmp_path / "2d"
    host = socket.gethostname()
    dead = _dead_pid()
    kept = [
        f".2d.{host}-{os.getpid()}.abcd1234.tmp",  # a live process (this one) is writing it
        f".2d.other-node-{dead}.abcd1234.tmp",  # another host's: its pid means nothing here
        ".2d.k3j4h5g6.tmp",  # an older name without its maker: cannot tell
        f".2d.x.{host}-{dead}.abcd1234.tmp",  # the temporary of another output, 2d.x
    ]
    for name in [*kept, f".2d.{host}-{dead}.abcd1234.tmp"]:
        (tmp_path / name).mkdir()
    assert remove_stale_temporaries(final) == [tmp_path / f".2d.{host}-{dead}.abcd1234.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_read_yaml_reads_the_safe_subset_and_builds_no_python_object(tmp_path: Path) -> None:
    from accelpipe.core.io import read_yaml

    (tmp_path / "ok.yaml").write_text("a: [1, 2.5, true, null]\nb: {c: text}\n")
    assert read_yaml(tmp_path / "ok.yaml") == {"a": [1, 2.5, True, None], "b": {"c": "text"}}
    (tmp_path / "bad.yaml").write_text("x: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(yaml.constructor.ConstructorError):
        read_yaml(tmp_path / "bad.yaml")


def test_gzipped_writes_round_trip_and_leave_no_temporary(tmp_path: Path) -> None:
    text = "".join(f'{{"name": "op{i}", "ts": {i}}}\n' for i in range(20_000))
    source = tmp_path / "trace.json"
    source.write_text(text)
    io.gzip_file(source, tmp_path / "copied.json.gz")
    io.write_gzip_text(tmp_path / "written.json.gz", text)
    for name in ("copied.json.gz", "written.json.gz"):
        assert gzip.decompress((tmp_path / name).read_bytes()).decode() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "copied.json.gz",
        "trace.json",
        "written.json.gz",
    ]
