"""attempts.json: each start of a run's train stage and its wall time, kept across kills."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.engines import attempts
from accelpipe.engines.attempts import ATTEMPTS_FILE, Attempts
from accelpipe.launch import workers


def _recorded(work: Path) -> list[dict]:
    return json.loads((work / ATTEMPTS_FILE).read_text())["attempts"]


def test_an_attempt_is_recorded_from_the_stages_start(tmp_path: Path) -> None:
    with workers.stage_clock():
        record = Attempts(tmp_path, writes=True)
        began = time.time()
        record.begin(None)
        record.close()
    (entry,) = _recorded(tmp_path)
    assert entry["attempt"] == 1 and entry["resumed_from_step"] is None
    assert entry["status"] == "running"  # until the train stage publishes the run
    assert 0 <= entry["seconds"] <= time.time() - record.started_at
    assert record.started_at <= began


def test_the_heartbeat_keeps_the_seconds_of_a_running_attempt_fresh(tmp_path: Path) -> None:
    """A process killed outright writes nothing at its end: the last beat is its time."""
    record = Attempts(tmp_path, writes=True, heartbeat_s=0.01)
    record.begin(None)
    heart = record._heart
    assert heart is not None and heart.is_alive()
    try:
        first = _recorded(tmp_path)[0]["seconds"]
        deadline = time.monotonic() + 60
        while _recorded(tmp_path)[0]["seconds"] <= first:  # no claim on speed, just change
            assert time.monotonic() < deadline, "no heartbeat within 60 s"
            time.sleep(0.01)
    finally:
        record.close()
    assert not heart.is_alive()  # this record's own: other tests' trainers may hold theirs


def test_a_resume_adds_an_attempt_marks_the_killed_one_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    killed = Attempts(tmp_path, writes=True)
    killed.begin(None)
    killed._stop.set()  # killed outright: no close, its heartbeat stops with it
    caplog.set_level(logging.INFO, logger="accelpipe.engines.attempts")
    resumed = Attempts(tmp_path, writes=True)
    resumed.begin(12)
    resumed.close()
    assert [(e["attempt"], e["status"], e["resumed_from_step"]) for e in _recorded(tmp_path)] == [
        (1, "interrupted", None),
        (2, "running", 12),
    ]
    assert "resuming from step 12, attempt 2" in caplog.text


def test_only_the_process_writing_the_logs_records(tmp_path: Path) -> None:
    record = Attempts(tmp_path, writes=False)
    record.begin(3)
    record.beat()
    record.close()
    assert not (tmp_path / ATTEMPTS_FILE).exists()


def test_finishing_gives_the_last_attempt_the_stages_seconds(tmp_path: Path) -> None:
    for step in (None, 6):
        record = Attempts(tmp_path, writes=True)
        record.begin(step)
        record.close()
    entries = attempts.finish(tmp_path, 42.0)
    assert [e["status"] for e in entries] == ["interrupted", "finished"]
    assert entries[-1]["seconds"] == 42.0
    assert attempts.total_seconds(entries) == round(entries[0]["seconds"] + 42.0, 3)
    assert attempts.finish(tmp_path / "none", 1.0) == []  # nothing recorded: nothing to add


def test_a_damaged_record_is_one_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / ATTEMPTS_FILE).write_text("{not json")
    with pytest.raises(DataError, match=ATTEMPTS_FILE):
        attempts.read(tmp_path)
