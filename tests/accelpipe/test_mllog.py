"""MLPerf's log (accelpipe.mllog): the writer, the checker and cutting a resumed run's log.

Each broken log below breaks one rule of a log the writer wrote whole, and the checker must
name exactly that line. Where MLPerf's own package (mlperf-logging) is installed, its parser
and compliance checker read the writer's log too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelpipe import mllog
from accelpipe.mllog import MLLog, MLLogError, check, cut

T0 = 1_700_000_000_000
FACTS = {
    mllog.SUBMISSION_BENCHMARK: "unet2d",
    mllog.SUBMISSION_DIVISION: mllog.CLOSED,
    mllog.SUBMISSION_ORG: "accelpipe",
    mllog.SUBMISSION_PLATFORM: "1xcpu",
    mllog.SUBMISSION_STATUS: "research",
    mllog.GLOBAL_BATCH_SIZE: 32,
    mllog.OPT_BASE_LR: 0.001,
    mllog.SEED: 7,
    mllog.TRAIN_SAMPLES: 100,
    mllog.EVAL_SAMPLES: 20,
    "gradient_accumulation_steps": 1,  # a key outside the table: a fact
}


class FakeClock:
    """Milliseconds that step by 10 at each reading, or stand where a test puts them."""

    def __init__(self, start: int = T0) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 10
        return self.now


def _init(log: MLLog) -> None:
    log.event(mllog.CACHE_CLEAR, True)
    log.start(mllog.INIT_START)
    for key, value in FACTS.items():
        log.event(key, value)
    log.end(mllog.INIT_STOP)
    log.start(mllog.RUN_START)


def _epoch(log: MLLog, n: int, accuracy: float = 0.5) -> None:
    """A block of one epoch and its evaluation, as MLPerf's reference implementations log it."""
    block = {mllog.FIRST_EPOCH_NUM: n, mllog.EPOCH_COUNT: 1}
    log.start(mllog.BLOCK_START, metadata=block)
    log.start(mllog.EPOCH_START, metadata={mllog.EPOCH_NUM: n})
    log.end(mllog.EPOCH_STOP, metadata={mllog.EPOCH_NUM: n})
    log.start(mllog.EVAL_START, metadata={mllog.EPOCH_NUM: n})
    log.event(mllog.EVAL_ACCURACY, accuracy, metadata={mllog.EPOCH_NUM: n})
    log.end(mllog.EVAL_STOP, metadata={mllog.EPOCH_NUM: n})
    log.end(mllog.BLOCK_STOP, metadata=block)


def _stop(log: MLLog, status: str = mllog.SUCCESS) -> None:
    log.end(mllog.RUN_STOP, metadata={mllog.STATUS: status})


def write_run(path: Path, epochs: int = 3) -> Path:
    with MLLog(path, clock=FakeClock()) as log:
        _init(log)
        for n in range(1, epochs + 1):
            _epoch(log, n, accuracy=0.2 * n)
        _stop(log)
    return path


@pytest.fixture
def run_log(tmp_path: Path) -> Path:
    return write_run(tmp_path / mllog.FILENAME)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line.removeprefix(mllog.PREFIX)) for line in path.read_text().splitlines()]


def _dump(records: list[dict[str, Any]]) -> list[str]:
    return [mllog.PREFIX + json.dumps(r) for r in records]


def _at(records: list[dict[str, Any]], key: str, **metadata: object) -> int:
    """The index of the first record of key whose metadata holds these items."""
    for i, r in enumerate(records):
        if r["key"] == key and all(r["metadata"].get(k) == v for k, v in metadata.items()):
            return i
    raise AssertionError(f"no {key} {metadata}")


def _retimed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Times rising line by line again, after lines were moved."""
    for i, r in enumerate(records):
        r["time_ms"] = T0 + 10 * i
    return records


# -- a whole log -------------------------------------------------------------------------------


def test_a_whole_run_passes_and_every_line_round_trips(run_log: Path) -> None:
    assert check(run_log) == []
    lines = run_log.read_text().splitlines()
    assert len(lines) == 2 + len(FACTS) + 2 + 3 * 7 + 1
    for line in lines:
        assert line.startswith(mllog.PREFIX)
        record = json.loads(line.removeprefix(mllog.PREFIX))
        assert tuple(record) == mllog.FIELDS
        assert record["namespace"] == ""
        assert isinstance(record["time_ms"], int)
        # encoding what was read gives the line back: the encoding is deterministic
        assert mllog.encode(**record) == line
        assert record["metadata"][mllog.FILE] == __file__
        assert isinstance(record["metadata"][mllog.LINENO], int)
    records = _records(run_log)
    times = [r["time_ms"] for r in records]
    assert times == sorted(times) and times[0] == T0 + 10
    assert records[-1]["key"] == mllog.RUN_STOP
    assert records[-1]["metadata"][mllog.STATUS] == mllog.SUCCESS
    # the checker reads lines as well as a path
    assert check(lines) == []
    assert check(line + "\n" for line in lines) == []


def test_every_key_of_the_table_has_the_event_type_mlperf_logs_it_with() -> None:
    starts = {
        mllog.INIT_START,
        mllog.RUN_START,
        mllog.BLOCK_START,
        mllog.EPOCH_START,
        mllog.EVAL_START,
    }
    stops = {mllog.INIT_STOP, mllog.RUN_STOP, mllog.BLOCK_STOP, mllog.EPOCH_STOP, mllog.EVAL_STOP}
    for key, rule in mllog.KEYS.items():
        expected = (
            mllog.INTERVAL_START
            if key in starts
            else mllog.INTERVAL_END
            if key in stops
            else mllog.POINT_IN_TIME
        )
        assert rule.event_type == expected, key
    assert set(mllog.REQUIRED) <= set(mllog.KEYS)


def test_the_caller_is_named_relative_to_root_and_through_stacklevel(tmp_path: Path) -> None:
    def helper(log: MLLog) -> str:
        return log.event(mllog.SEED, 1, stacklevel=2)

    with MLLog(tmp_path / "a.txt", clock=FakeClock(), root=Path(__file__).parent) as log:
        line = helper(log)
    here = json.loads(line.removeprefix(mllog.PREFIX))["metadata"]
    assert here[mllog.FILE] == Path(__file__).name
    source = Path(__file__).read_text().splitlines()
    assert source[here[mllog.LINENO] - 1].strip() == "line = helper(log)"


# -- one broken rule, one problem ------------------------------------------------------------


Breaker = Callable[[list[dict[str, Any]]], tuple[list[str], int, str]]


def _not_json(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    lines = _dump(records)
    lines.insert(3, mllog.PREFIX + '{"namespace": "", "time_ms": 17')
    return lines, 4, "not JSON"


def _not_mllog(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    lines = _dump(records)
    lines.insert(5, "epoch 1 loss 0.3")
    return lines, 6, "not an MLLOG line"


def _missing_field(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.SEED)
    del records[i]["namespace"]
    return _dump(records), i + 1, "missing namespace"


def _extra_field(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.SEED)
    records[i]["rank"] = 0
    return _dump(records), i + 1, "unknown field(s) rank"


def _time_not_integer(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.SEED)
    records[i]["time_ms"] = str(records[i]["time_ms"])
    return _dump(records), i + 1, "is not an integer"


def _unknown_event_type(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.SEED)
    records[i]["event_type"] = "INSTANT"
    return _dump(records), i + 1, "event_type"


def _wrong_event_type(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.EVAL_ACCURACY, epoch_num=2)
    records[i]["event_type"] = mllog.INTERVAL_START
    return _dump(records), i + 1, "eval_accuracy is POINT_IN_TIME (MLLog.event), not INTERVAL_START"


def _time_backwards(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.EPOCH_STOP, epoch_num=2)
    records[i]["time_ms"] = records[i - 1]["time_ms"] - 1
    return _dump(records), i + 1, "is before"


def _no_run_stop(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    del records[_at(records, mllog.RUN_STOP)]
    return _dump(records), len(records), "the log has no run_stop"


def _run_stop_without_status(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.RUN_STOP)
    del records[i]["metadata"][mllog.STATUS]
    return _dump(records), i + 1, "run_stop needs metadata status"


def _run_stop_with_another_status(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.RUN_STOP)
    records[i]["metadata"][mllog.STATUS] = "done"
    return _dump(records), i + 1, 'status "done" is not success or aborted'


def _accuracy_without_epoch(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.EVAL_ACCURACY, epoch_num=2)
    del records[i]["metadata"][mllog.EPOCH_NUM]
    return _dump(records), i + 1, "eval_accuracy needs metadata epoch_num"


def _accuracy_outside_eval(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.EVAL_ACCURACY, epoch_num=2)
    records.insert(i + 2, dict(records[i]))  # once more, after its eval_stop
    return _dump(_retimed(records)), i + 3, "outside eval_start/eval_stop"


def _eval_without_accuracy(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.EVAL_ACCURACY, epoch_num=2)
    del records[i]
    return _dump(records), i + 1, "no eval_accuracy between eval_start"


def _epoch_without_stop(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    del records[_at(records, mllog.EPOCH_STOP, epoch_num=2)]
    start = _at(records, mllog.EPOCH_START, epoch_num=2)
    return _dump(records), start + 1, "epoch_start 2 has no epoch_stop 2 after it"


def _last_epoch_without_stop(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    del records[_at(records, mllog.EPOCH_STOP, epoch_num=3)]
    start = _at(records, mllog.EPOCH_START, epoch_num=3)
    return _dump(records), start + 1, "epoch_start 3 has no epoch_stop 3 after it"


def _epoch_after_run_stop(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    extra = dict(records[_at(records, mllog.EPOCH_START, epoch_num=3)])
    extra.update(time_ms=records[-1]["time_ms"] + 10, metadata={mllog.EPOCH_NUM: 4})
    records.append(extra)
    return _dump(records), len(records), "epoch_start after run_stop"


def _accuracy_after_run_stop(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    extra = dict(records[_at(records, mllog.EVAL_ACCURACY, epoch_num=3)])
    extra["time_ms"] = records[-1]["time_ms"] + 10
    records.append(extra)
    return _dump(records), len(records), "eval_accuracy after run_stop"


def _missing_fact(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    del records[_at(records, mllog.SEED)]
    return _dump(records), len(records), "the log has no seed"


def _run_start_before_init_stop(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.INIT_STOP)
    records.insert(i + 1, records.pop(i))  # after run_start
    return _dump(_retimed(records)), i + 1, "run_start comes before init_stop"


def _second_run_start(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.RUN_START)
    records.insert(i + 1, dict(records[i]))
    return _dump(records), i + 2, "a second run_start"


def _value_of_wrong_kind(records: list[dict[str, Any]]) -> tuple[list[str], int, str]:
    i = _at(records, mllog.GLOBAL_BATCH_SIZE)
    records[i]["value"] = "32"
    return _dump(records), i + 1, "is not a number"


BREAKERS: list[Breaker] = [
    _not_json,
    _not_mllog,
    _missing_field,
    _extra_field,
    _time_not_integer,
    _unknown_event_type,
    _wrong_event_type,
    _time_backwards,
    _no_run_stop,
    _run_stop_without_status,
    _run_stop_with_another_status,
    _accuracy_without_epoch,
    _accuracy_outside_eval,
    _eval_without_accuracy,
    _epoch_without_stop,
    _last_epoch_without_stop,
    _epoch_after_run_stop,
    _accuracy_after_run_stop,
    _missing_fact,
    _run_start_before_init_stop,
    _second_run_start,
    _value_of_wrong_kind,
]


@pytest.mark.parametrize("breaker", BREAKERS, ids=[b.__name__.strip("_") for b in BREAKERS])
def test_one_broken_rule_is_one_problem_naming_its_line(run_log: Path, breaker: Breaker) -> None:
    lines, line, message = breaker(_records(run_log))
    problems = check(lines)
    assert [p.line for p in problems] == [line], [str(p) for p in problems]
    assert message in problems[0].message
    assert str(problems[0]).startswith(f"line {line}: ")


def test_an_empty_log_lacks_every_required_key(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    problems = check(empty)
    assert [p.message for p in problems] == [f"the log has no {k}" for k in mllog.REQUIRED]
    assert {p.line for p in problems} == {0}
    assert check([], required=()) == []


def test_required_keys_are_the_callers_choice(run_log: Path) -> None:
    records = _records(run_log)
    del records[_at(records, mllog.SUBMISSION_ORG)]
    assert [p.message for p in check(_dump(records))] == ["the log has no submission_org"]
    assert check(_dump(records), required=[mllog.RUN_START, mllog.RUN_STOP]) == []
    problems = check(run_log, required=[*mllog.REQUIRED, "opt_name"])
    assert [p.message for p in problems] == ["the log has no opt_name"]


def test_an_aborted_run_is_valid(tmp_path: Path) -> None:
    path = tmp_path / mllog.FILENAME
    with MLLog(path, clock=FakeClock()) as log:
        _init(log)
        _epoch(log, 1)
        _stop(log, mllog.ABORTED)
    assert check(path) == []


# -- the writer -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda log: log.event(mllog.RUN_START), "run_start is INTERVAL_START (MLLog.start)"),
        (lambda log: log.start(mllog.RUN_STOP), "run_stop is INTERVAL_END (MLLog.end)"),
        (lambda log: log.start(mllog.SEED, 1), "seed is POINT_IN_TIME (MLLog.event)"),
        (lambda log: log.end("opt_name", "adam"), "opt_name is POINT_IN_TIME"),
        (lambda log: log.log("INSTANT", mllog.SEED, 1), "unknown event type 'INSTANT'"),
        (lambda log: log.end(mllog.RUN_STOP), "run_stop needs metadata status"),
        (
            lambda log: log.end(mllog.RUN_STOP, metadata={mllog.STATUS: "ok"}),
            'status "ok" is not success or aborted',
        ),
        (lambda log: log.event(mllog.EVAL_ACCURACY, 0.5), "needs metadata epoch_num"),
        (
            lambda log: log.start(mllog.EPOCH_START, metadata={mllog.EPOCH_NUM: -1}),
            "epoch_num -1 is not a count",
        ),
        (lambda log: log.event(mllog.SUBMISSION_DIVISION, "closed-ish"), "is not one of"),
        (lambda log: log.event(mllog.SUBMISSION_ORG, ""), "is not a non-empty string"),
        (lambda log: log.event(mllog.GLOBAL_BATCH_SIZE, True), "is not a number"),
        (
            lambda log: log.event(mllog.EVAL_ACCURACY, float("nan"), {mllog.EPOCH_NUM: 1}),
            "not JSON",
        ),
        (lambda log: log.event("opt_name", object()), "not JSON"),
    ],
)
def test_the_writer_refuses_what_the_checker_rejects(
    tmp_path: Path, call: Callable[[MLLog], str], message: str
) -> None:
    path = tmp_path / mllog.FILENAME
    with MLLog(path, clock=FakeClock()) as log:
        log.event(mllog.SEED, 1)
        with pytest.raises(MLLogError) as refused:
            call(log)
    assert message in str(refused.value)
    assert str(path) in str(refused.value)
    assert len(path.read_text().splitlines()) == 1  # nothing written


def test_each_line_is_flushed_as_it_is_logged(tmp_path: Path) -> None:
    path = tmp_path / mllog.FILENAME
    log = MLLog(path, clock=FakeClock())
    try:
        line = log.start(mllog.INIT_START)
        assert path.read_text() == line + "\n"
        log.event(mllog.SEED, 3)
        assert len(path.read_text().splitlines()) == 2
    finally:
        log.close()


def test_values_are_encoded_deterministically(tmp_path: Path) -> None:
    a = mllog.encode(T0, mllog.POINT_IN_TIME, "x", {"b": 1, "a": [1, 2]}, {"z": 1, "y": 2})
    b = mllog.encode(T0, mllog.POINT_IN_TIME, "x", {"a": (1, 2), "b": 1}, {"y": 2, "z": 1})
    assert a == b
    assert a.endswith('"value": {"a": [1, 2], "b": 1}, "metadata": {"y": 2, "z": 1}}')
    assert mllog.encode(T0, mllog.POINT_IN_TIME, "x", "é").isascii()
    # numpy scalars and arrays become plain numbers and lists
    path = tmp_path / mllog.FILENAME
    with MLLog(path, clock=FakeClock()) as log:
        log.event(mllog.EVAL_ACCURACY, np.float32(0.5), {mllog.EPOCH_NUM: np.int64(2)})
        log.event("loss_curve", np.arange(3))
    accuracy, curve = _records(path)
    assert accuracy["value"] == 0.5 and accuracy["metadata"][mllog.EPOCH_NUM] == 2
    assert curve["value"] == [0, 1, 2]
    # two runs with the same clock write the same bytes
    assert write_run(tmp_path / "a").read_bytes() == write_run(tmp_path / "b").read_bytes()


def test_reopening_appends(tmp_path: Path) -> None:
    path = tmp_path / mllog.FILENAME
    clock = FakeClock()
    with MLLog(path, clock=clock) as log:
        _init(log)
        _epoch(log, 1)
    before = path.read_text()
    with MLLog(path, clock=clock) as log:
        _epoch(log, 2)
        _stop(log)
    assert path.read_text().startswith(before)
    assert len(path.read_text().splitlines()) == len(before.splitlines()) + 7 + 1
    assert check(path) == []


def test_a_clock_stepped_back_keeps_the_log_ordered(tmp_path: Path) -> None:
    path = tmp_path / mllog.FILENAME
    with MLLog(path, clock=FakeClock(T0 + 1000)) as log:
        log.start(mllog.INIT_START)
    with MLLog(path, clock=FakeClock(T0)) as log:  # the resumed run's clock is behind
        log.event(mllog.SEED, 1)
    assert [r["time_ms"] for r in _records(path)] == [T0 + 1010, T0 + 1010]

    def seconds() -> Any:
        return 1.5

    with (
        MLLog(tmp_path / "b.txt", clock=seconds) as log,
        pytest.raises(MLLogError, match="not integer milliseconds"),
    ):
        log.event(mllog.SEED, 1)


def test_after_a_torn_line_the_writer_starts_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / mllog.FILENAME
    path.write_text(mllog.PREFIX + '{"namespace": "", "ti')
    with MLLog(path, clock=FakeClock()) as log:
        log.event(mllog.SEED, 1)
    problems = check(path, required=[mllog.SEED])
    assert [p.line for p in problems] == [1]


# -- cutting a resumed run's log ------------------------------------------------------------


def _killed_in_epoch(path: Path, clock: FakeClock, *, evaluated: bool) -> None:
    """Epochs 1 and 2 whole, then killed during epoch 3 (or during epoch 2's evaluation)."""
    with MLLog(path, clock=clock) as log:
        _init(log)
        _epoch(log, 1)
        if evaluated:
            _epoch(log, 2)
            log.start(mllog.BLOCK_START, metadata={mllog.FIRST_EPOCH_NUM: 3, mllog.EPOCH_COUNT: 1})
            log.start(mllog.EPOCH_START, metadata={mllog.EPOCH_NUM: 3})
        else:
            log.start(mllog.BLOCK_START, metadata={mllog.FIRST_EPOCH_NUM: 2, mllog.EPOCH_COUNT: 1})
            log.start(mllog.EPOCH_START, metadata={mllog.EPOCH_NUM: 2})
            log.end(mllog.EPOCH_STOP, metadata={mllog.EPOCH_NUM: 2})
            log.start(mllog.EVAL_START, metadata={mllog.EPOCH_NUM: 2})
    with path.open("a") as f:
        f.write(mllog.PREFIX + '{"namespace": "", "time_')  # killed mid-write


def test_cutting_after_an_epoch_keeps_its_evaluation_and_block(tmp_path: Path) -> None:
    path = tmp_path / mllog.FILENAME
    clock = FakeClock()
    _killed_in_epoch(path, clock, evaluated=True)
    lines = path.read_text().splitlines()
    assert cut(path, after_epoch=2) == 3  # block_start 3, epoch_start 3 and the torn line
    assert path.read_text().splitlines() == lines[:-3]
    assert _records(path)[-1]["key"] == mllog.BLOCK_STOP
    with MLLog(path, clock=clock) as log:  # the resumed run, from epoch 2's checkpoint
        _epoch(log, 3)
        _stop(log)
    assert check(path) == []


def test_cutting_after_an_epoch_drops_a_partial_evaluation(tmp_path: Path) -> None:
    path = tmp_path / mllog.FILENAME
    _killed_in_epoch(path, FakeClock(), evaluated=False)
    assert cut(path, after_epoch=2) == 2  # eval_start 2 and the torn line
    records = _records(path)
    assert records[-1]["key"] == mllog.EPOCH_STOP
    assert records[-1]["metadata"][mllog.EPOCH_NUM] == 2


def test_a_block_of_several_epochs_stays_open_when_cut_inside_it(tmp_path: Path) -> None:
    path = tmp_path / mllog.FILENAME
    with MLLog(path, clock=FakeClock()) as log:
        _init(log)
        log.start(mllog.BLOCK_START, metadata={mllog.FIRST_EPOCH_NUM: 1, mllog.EPOCH_COUNT: 2})
        for n in (1, 2):
            log.start(mllog.EPOCH_START, metadata={mllog.EPOCH_NUM: n})
            log.end(mllog.EPOCH_STOP, metadata={mllog.EPOCH_NUM: n})
        log.end(mllog.BLOCK_STOP, metadata={mllog.FIRST_EPOCH_NUM: 1})
    assert cut(path, after_epoch=2) == 0  # the block's stop ends epoch 2 (its start counts 2)
    assert cut(path, after_epoch=1) == 3
    assert cut(path, after_epoch=1) == 0
    with MLLog(path, clock=FakeClock(T0 + 10_000)) as log:
        log.start(mllog.EPOCH_START, metadata={mllog.EPOCH_NUM: 2})
        log.end(mllog.EPOCH_STOP, metadata={mllog.EPOCH_NUM: 2})
        log.end(mllog.BLOCK_STOP, metadata={mllog.FIRST_EPOCH_NUM: 1})
        _stop(log)
    assert check(path) == []


def test_cutting_after_a_time(tmp_path: Path) -> None:
    path = tmp_path / mllog.FILENAME
    _killed_in_epoch(path, FakeClock(), evaluated=True)
    records = _records_whole(path)
    checkpoint = records[_at(records, mllog.EPOCH_STOP, epoch_num=2)]["time_ms"]
    kept = [r for r in records if r["time_ms"] <= checkpoint]
    assert cut(path, after_ms=checkpoint) == len(records) - len(kept) + 1  # and the torn line
    assert _records(path) == kept
    assert cut(path, after_ms=checkpoint) == 0


def _records_whole(path: Path) -> list[dict[str, Any]]:
    """The records of a log's whole lines (a torn last line left out)."""
    lines = path.read_text().splitlines(keepends=True)
    whole = [line for line in lines if line.endswith("\n")]
    return [json.loads(line.removeprefix(mllog.PREFIX)) for line in whole]


def test_cut_needs_one_mark_and_an_epoch_that_ended(run_log: Path) -> None:
    with pytest.raises(MLLogError, match="one of after_ms and after_epoch"):
        cut(run_log)
    with pytest.raises(MLLogError, match="one of after_ms and after_epoch"):
        cut(run_log, after_ms=T0, after_epoch=1)
    with pytest.raises(MLLogError, match="no epoch_stop with epoch_num 9"):
        cut(run_log, after_epoch=9)
    assert check(run_log) == []  # untouched


# -- MLPerf's own package ------------------------------------------------------------------


@pytest.fixture
def mlperf_logging() -> Any:
    return pytest.importorskip("mlperf_logging.compliance_checker")


def test_mlperf_logging_parses_our_lines(run_log: Path, mlperf_logging: Any) -> None:
    from mlperf_logging.compliance_checker import mlp_parser

    parsed, errors = mlp_parser.parse_file(str(run_log), ruleset="5.1.0")
    assert errors == []
    records = _records(run_log)
    assert [p.key for p in parsed] == [r["key"] for r in records]
    assert [p.timestamp for p in parsed] == [r["time_ms"] for r in records]
    assert [p.value for p in parsed] == [
        {"value": r["value"], "metadata": r["metadata"]} for r in records
    ]


def _mlperf_check(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[set[str], list[str]]:
    """MLPerf's compliance checker (training 5.1.0 rules), keys it complains about.

    Its division config names MLPerf's benchmarks and queues a config of each benchmark's
    hyperparameters; ours are not among them, so those configs are left out: what runs are
    the rules every benchmark shares (common.yaml, closed_common.yaml).
    """
    from mlperf_logging.compliance_checker import mlp_compliance

    queue = mlp_compliance.enqueue_config
    left_out: list[str] = []

    def enqueue(config: str) -> None:
        (queue if config.endswith("common.yaml") else left_out.append)(config)

    monkeypatch.setattr(mlp_compliance, "enqueue_config", enqueue)
    checker = mlp_compliance.make_checker("training", "5.1.0", quiet=True, werror=False)
    logging.disable(logging.WARNING)
    try:
        checker.check_file(str(path), "training_5.1.0/common.yaml")
    finally:
        logging.disable(logging.NOTSET)
    assert checker.not_overwritable == []
    return set(checker.overwritable), left_out


def test_mlperf_compliance_checker_passes_our_log(
    run_log: Path, mlperf_logging: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    complaints, left_out = _mlperf_check(run_log, monkeypatch)
    # the one complaint: unet2d is not one of MLPerf's benchmarks
    assert complaints == {mllog.SUBMISSION_BENCHMARK}
    assert left_out == ["training_5.1.0/closed_unet2d.yaml"]


def test_mlperf_compliance_checker_agrees_on_a_broken_log(
    run_log: Path, mlperf_logging: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lines, line, _ = _run_stop_without_status(_records(run_log))
    broken = tmp_path / "broken.txt"
    broken.write_text("\n".join(lines) + "\n")
    assert [p.line for p in check(broken)] == [line]
    complaints, _ = _mlperf_check(broken, monkeypatch)
    assert complaints == {mllog.SUBMISSION_BENCHMARK, mllog.RUN_STOP}


def test_a_log_mlperfs_own_writer_wrote_passes_our_checker(
    tmp_path: Path, mlperf_logging: Any
) -> None:
    from mlperf_logging.mllog import mllog as theirs

    path = tmp_path / mllog.FILENAME
    logger = logging.getLogger(f"mllog-test-{id(path)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path)
    logger.addHandler(handler)
    try:
        mlperf = theirs.MLLogger(logger=logger)
        mlperf.start(mllog.INIT_START)
        for key, value in FACTS.items():
            mlperf.event(key, value)
        mlperf.end(mllog.INIT_STOP)
        mlperf.start(mllog.RUN_START)
        for n in (1, 2):
            mlperf.start(mllog.EPOCH_START, metadata={mllog.EPOCH_NUM: n})
            mlperf.end(mllog.EPOCH_STOP, metadata={mllog.EPOCH_NUM: n})
            mlperf.start(mllog.EVAL_START, metadata={mllog.EPOCH_NUM: n})
            mlperf.event(mllog.EVAL_ACCURACY, 0.5, metadata={mllog.EPOCH_NUM: n})
            mlperf.end(mllog.EVAL_STOP, metadata={mllog.EPOCH_NUM: n})
        mlperf.end(mllog.RUN_STOP, metadata={mllog.STATUS: mllog.SUCCESS})
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert len(path.read_text().splitlines()) == 3 + len(FACTS) + 2 * 5 + 1
    assert check(path) == []
