"""MLPerf's training log, ``mllog.txt``: its keys and a writer that appends to it.

Format (what MLPerf's tools read: mlperf_logging's parser takes the lines that start with
``:::MLLOG `` and json-decodes the rest). One event a line::

    :::MLLOG {"namespace": "", "time_ms": 1700000000123, "event_type": "INTERVAL_START",
    "key": "run_start", "value": null, "metadata": {"file": "train.py", "lineno": 42}}

(one line in the file) with exactly these fields, in this order:

- ``namespace``: a string, ``""`` unless a caller names one;
- ``time_ms``: an integer, milliseconds since the Unix epoch;
- ``event_type``: ``INTERVAL_START`` (``MLLog.start``), ``INTERVAL_END`` (``MLLog.end``) or
  ``POINT_IN_TIME`` (``MLLog.event``);
- ``key``: MLPerf's name of the event (the constants below, MLPerf's own spelling);
- ``value``: any JSON value (null where there is none);
- ``metadata``: an object: the ``file`` and ``lineno`` of the call that logged it, and what the
  key needs (``KEYS``): ``epoch_num`` on epochs, evaluations and ``eval_accuracy``,
  ``first_epoch_num``/``epoch_count`` on blocks (or ``samples_count`` where a benchmark counts
  samples), ``status`` (``success`` or ``aborted``) on ``run_stop``.

``KEYS`` is the one table of the keys we log: each key's event type (which of start/end/event
MLPerf's reference implementations log it with; MLPerf's checker itself does not read the
event type), the metadata it needs and what its value must be (MLPerf's compliance rules,
mlperf_logging/compliance_checker/training_*/common.yaml). A key outside the table is a fact:
``POINT_IN_TIME``, any value (MLPerf's many hyperparameter keys, ``opt_name`` and the like).

Writing (``MLLog``): each call appends one line and flushes it, so a killed run keeps what it
logged. Times come from an injectable clock (integer milliseconds); a time before the log's
last one (a wall clock stepped back) is written as that last time, so the log stays ordered.
Values and metadata are encoded deterministically: keys sorted, ASCII only (MLPerf's parser
reads the file as latin-1), no NaN or infinity (not JSON); numpy scalars and arrays become
plain numbers and lists. The writer refuses a line MLPerf's rules reject on its own: an event
type other than the key's, missing metadata, a value of the wrong kind. Whole logs are checked
by MLCommons' own compliance checker (mlperf-logging, a test dependency only:
tests/helpers/evaluation_checks.py runs it on every log the tests write).

Resuming: opening an existing log appends to it (a resumed run continues its log). Before it
does, ``cut`` drops what the killed attempt logged after its last checkpoint, by either mark:

- ``after_ms``: every line whose time is later than the checkpoint's time goes;
- ``after_epoch=N``: what is kept ends with the last ``epoch_stop`` of epoch N and the lines
  right after it that finish epoch N: a complete evaluation of epoch N (``eval_start`` N …
  ``eval_stop`` N) and a ``block_stop`` whose block ends with epoch N, in either order.
  Anything else ends what is kept: a partial evaluation, the next epoch, an aborted run_stop.

A torn last line (the process killed mid-write) goes in both cases. The resumed run must not
log init_stop or run_start again: MLPerf times a run from its one run_start to its one run_stop.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

FILENAME = "mllog.txt"
PREFIX = ":::MLLOG "
FIELDS = ("namespace", "time_ms", "event_type", "key", "value", "metadata")

INTERVAL_START = "INTERVAL_START"
INTERVAL_END = "INTERVAL_END"
POINT_IN_TIME = "POINT_IN_TIME"
EVENT_TYPES = (INTERVAL_START, INTERVAL_END, POINT_IN_TIME)
DEFAULT_NAMESPACE = ""

# keys (MLPerf's names)
SUBMISSION_BENCHMARK = "submission_benchmark"
SUBMISSION_DIVISION = "submission_division"
SUBMISSION_ORG = "submission_org"
SUBMISSION_PLATFORM = "submission_platform"
SUBMISSION_STATUS = "submission_status"
GLOBAL_BATCH_SIZE = "global_batch_size"
OPT_BASE_LR = "opt_base_learning_rate"
SEED = "seed"
TRAIN_SAMPLES = "train_samples"
EVAL_SAMPLES = "eval_samples"
CACHE_CLEAR = "cache_clear"
INIT_START = "init_start"
INIT_STOP = "init_stop"
RUN_START = "run_start"
RUN_STOP = "run_stop"
BLOCK_START = "block_start"
BLOCK_STOP = "block_stop"
EPOCH_START = "epoch_start"
EPOCH_STOP = "epoch_stop"
EVAL_START = "eval_start"
EVAL_STOP = "eval_stop"
EVAL_ACCURACY = "eval_accuracy"

# metadata names
FILE = "file"
LINENO = "lineno"
EPOCH_NUM = "epoch_num"
EPOCH_COUNT = "epoch_count"
FIRST_EPOCH_NUM = "first_epoch_num"
SAMPLES_COUNT = "samples_count"
STATUS = "status"
COUNTS = (EPOCH_NUM, EPOCH_COUNT, FIRST_EPOCH_NUM, SAMPLES_COUNT)  # integers >= 0 where given

# values
SUCCESS = "success"
ABORTED = "aborted"
CLOSED = "closed"
OPEN = "open"


@dataclass(frozen=True)
class Rule:
    """What a key's line must be.

    metadata: alternatives, one of which must be present in full (none: nothing needed);
    value: "any", "text" (a non-empty string) or "number" (a number >= 0);
    choices: the values the value may take (none: any of its kind);
    status: the values metadata.status may take (run_stop only).
    """

    event_type: str
    metadata: tuple[tuple[str, ...], ...] = ()
    value: str = "any"
    choices: tuple[str, ...] = ()
    status: tuple[str, ...] = ()


_BY_EPOCH = ((EPOCH_NUM,), (SAMPLES_COUNT,))
KEYS: dict[str, Rule] = {
    SUBMISSION_BENCHMARK: Rule(POINT_IN_TIME, value="text"),
    SUBMISSION_DIVISION: Rule(POINT_IN_TIME, value="text", choices=(CLOSED, OPEN)),
    SUBMISSION_ORG: Rule(POINT_IN_TIME, value="text"),
    SUBMISSION_PLATFORM: Rule(POINT_IN_TIME, value="text"),
    SUBMISSION_STATUS: Rule(POINT_IN_TIME, value="text"),
    GLOBAL_BATCH_SIZE: Rule(POINT_IN_TIME, value="number"),
    OPT_BASE_LR: Rule(POINT_IN_TIME, value="number"),
    SEED: Rule(POINT_IN_TIME, value="number"),
    TRAIN_SAMPLES: Rule(POINT_IN_TIME, value="number"),
    EVAL_SAMPLES: Rule(POINT_IN_TIME, value="number"),
    CACHE_CLEAR: Rule(POINT_IN_TIME),
    INIT_START: Rule(INTERVAL_START),
    INIT_STOP: Rule(INTERVAL_END),
    RUN_START: Rule(INTERVAL_START),
    RUN_STOP: Rule(INTERVAL_END, metadata=((STATUS,),), status=(SUCCESS, ABORTED)),
    BLOCK_START: Rule(INTERVAL_START, metadata=((FIRST_EPOCH_NUM, EPOCH_COUNT), (SAMPLES_COUNT,))),
    BLOCK_STOP: Rule(INTERVAL_END, metadata=((FIRST_EPOCH_NUM,), (SAMPLES_COUNT,))),
    EPOCH_START: Rule(INTERVAL_START, metadata=_BY_EPOCH),
    EPOCH_STOP: Rule(INTERVAL_END, metadata=_BY_EPOCH),
    EVAL_START: Rule(INTERVAL_START, metadata=_BY_EPOCH),
    EVAL_STOP: Rule(INTERVAL_END, metadata=_BY_EPOCH),
    EVAL_ACCURACY: Rule(POINT_IN_TIME, metadata=((EPOCH_NUM,),), value="number"),
}
_FACT = Rule(POINT_IN_TIME)  # a key outside the table

_METHOD = {INTERVAL_START: "start", INTERVAL_END: "end", POINT_IN_TIME: "event"}


class MLLogError(ValueError):
    """A line the writer refuses, or a log that cannot be cut as asked."""


@dataclass(frozen=True)
class Entry:
    """One parsed line."""

    line: int
    namespace: str
    time_ms: int
    event_type: str
    key: str
    value: object
    metadata: dict[str, object]


# -- one line ------------------------------------------------------------------------------


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_count(x: object) -> TypeGuard[int]:
    """An integer >= 0 (not a bool)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _is_amount(x: object) -> bool:
    """A finite number >= 0 (not a bool)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    return math.isfinite(x) and x >= 0


def parse(text: str, line: int = 0) -> Entry:
    """The entry a line holds; MLLogError saying everything wrong with its form otherwise."""
    text = text.rstrip("\r\n")
    if not text.startswith(PREFIX):
        raise MLLogError(f"not an MLLOG line (it must start with {PREFIX.strip()!r})")
    try:
        record = json.loads(text[len(PREFIX) :])
    except json.JSONDecodeError as e:
        raise MLLogError(f"not JSON after {PREFIX.strip()}: {e}") from None
    if not isinstance(record, dict):
        raise MLLogError(f"the JSON is a {type(record).__name__}, not an object")
    wrong = []
    missing = [f for f in FIELDS if f not in record]
    extra = sorted(set(record) - set(FIELDS))
    if missing:
        wrong.append("missing " + ", ".join(missing))
    if extra:
        wrong.append("unknown field(s) " + ", ".join(extra))
    types = {
        "namespace": (isinstance(record.get("namespace"), str), "a string"),
        "time_ms": (_is_int(record.get("time_ms")), "an integer"),
        "event_type": (record.get("event_type") in EVENT_TYPES, "one of " + ", ".join(EVENT_TYPES)),
        "key": (isinstance(record.get("key"), str) and record["key"] != "", "a non-empty string"),
        "metadata": (isinstance(record.get("metadata"), dict), "an object"),
    }
    for field, (ok, what) in types.items():
        if field in record and not ok:
            wrong.append(f"{field} {json.dumps(record[field])} is not {what}")
    if wrong:
        raise MLLogError("; ".join(wrong))
    return Entry(
        line=line,
        namespace=record["namespace"],
        time_ms=record["time_ms"],
        event_type=record["event_type"],
        key=record["key"],
        value=record["value"],
        metadata=record["metadata"],
    )


def rule_problems(
    event_type: str, key: str, value: object, metadata: Mapping[str, object]
) -> list[str]:
    """What is wrong with a line's event type, metadata and value for its key (KEYS)."""
    rule = KEYS.get(key, _FACT)
    found = []
    if event_type != rule.event_type:
        how = f"MLLog.{_METHOD[rule.event_type]}"
        found.append(f"{key} is {rule.event_type} ({how}), not {event_type}")
    if rule.metadata and not any(all(m in metadata for m in alt) for alt in rule.metadata):
        need = " or ".join("+".join(alt) for alt in rule.metadata)
        found.append(f"{key} needs metadata {need}")
    for name in COUNTS:
        if name in metadata and not _is_count(metadata[name]):
            found.append(f"{key}: metadata {name} {json.dumps(metadata[name])} is not a count")
    if rule.status and STATUS in metadata and metadata[STATUS] not in rule.status:
        found.append(
            f"{key}: metadata status {json.dumps(metadata[STATUS])} is not "
            + " or ".join(rule.status)
        )
    if rule.value == "text" and not (isinstance(value, str) and value != ""):
        found.append(f"{key}: value {json.dumps(value)} is not a non-empty string")
    if rule.value == "number" and not _is_amount(value):
        found.append(f"{key}: value {json.dumps(value)} is not a number >= 0")
    if rule.choices and value not in rule.choices:
        found.append(f"{key}: value {json.dumps(value)} is not one of " + ", ".join(rule.choices))
    return found


def _plain(obj: object) -> object:
    """numpy scalars and arrays (anything with tolist) as plain JSON; nothing else."""
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(f"a {type(obj).__name__} is not JSON")


def _dumps(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, allow_nan=False, default=_plain)


def encode(
    time_ms: int,
    event_type: str,
    key: str,
    value: object = None,
    metadata: Mapping[str, object] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
) -> str:
    """The line (without its newline) for one event: fields in MLPerf's order, values sorted."""
    fields = (namespace, time_ms, event_type, key, value, dict(metadata or {}))
    body = ", ".join(
        f"{json.dumps(name)}: {_dumps(v)}" for name, v in zip(FIELDS, fields, strict=True)
    )
    return PREFIX + "{" + body + "}"


# -- writing -------------------------------------------------------------------------------

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch, as MLPerf logs them."""
    return time.time_ns() // 1_000_000


def _lines(path: Path) -> list[str]:
    """A log's lines, with their line ends; none where there is no log."""
    if not path.exists():
        return []
    with path.open(encoding="utf-8", errors="replace", newline="") as f:
        return f.readlines()


def _entries(lines: Sequence[str]) -> list[Entry | None]:
    """Each line parsed, None where it does not parse."""
    out: list[Entry | None] = []
    for i, text in enumerate(lines, 1):
        try:
            out.append(parse(text, i))
        except MLLogError:
            out.append(None)
    return out


class MLLog:
    """Appends events to an MLPerf log, one flushed line per call.

    ``clock`` returns integer milliseconds since the epoch (tests give a fake one);
    ``root``: caller files under it are logged relative to it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock = wall_clock_ms,
        namespace: str = DEFAULT_NAMESPACE,
        root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.namespace = namespace
        self._clock = clock
        self._root = Path(root) if root is not None else None
        lines = _lines(self.path)
        times = [e.time_ms for e in _entries(lines) if e is not None]
        self._last_ms: int | None = max(times) if times else None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8", newline="\n")
        if lines and not lines[-1].endswith("\n"):
            self._write("\n")  # our lines start on a line of their own after a torn one

    def __enter__(self) -> MLLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    @property
    def last_ms(self) -> int | None:
        """The time of the log's last line (None: no line yet)."""
        return self._last_ms

    def start(
        self,
        key: str,
        value: object = None,
        metadata: Mapping[str, object] | None = None,
        *,
        stacklevel: int = 1,
    ) -> str:
        """An INTERVAL_START line (init_start, run_start, epoch_start, ...); returns it."""
        return self.log(INTERVAL_START, key, value, metadata, stacklevel=stacklevel + 1)

    def end(
        self,
        key: str,
        value: object = None,
        metadata: Mapping[str, object] | None = None,
        *,
        stacklevel: int = 1,
    ) -> str:
        """An INTERVAL_END line (init_stop, run_stop, epoch_stop, ...); returns it."""
        return self.log(INTERVAL_END, key, value, metadata, stacklevel=stacklevel + 1)

    def event(
        self,
        key: str,
        value: object = None,
        metadata: Mapping[str, object] | None = None,
        *,
        stacklevel: int = 1,
    ) -> str:
        """A POINT_IN_TIME line (a fact, eval_accuracy, ...); returns it."""
        return self.log(POINT_IN_TIME, key, value, metadata, stacklevel=stacklevel + 1)

    def log(
        self,
        event_type: str,
        key: str,
        value: object = None,
        metadata: Mapping[str, object] | None = None,
        *,
        stacklevel: int = 1,
    ) -> str:
        """One line; ``stacklevel`` as logging's: 1 names the caller's file and line."""
        if event_type not in EVENT_TYPES:
            raise MLLogError(f"{self.path}: {key}: unknown event type {event_type!r}")
        frame = sys._getframe(stacklevel)
        caller: dict[str, object] = {FILE: self._file_name(frame.f_code.co_filename)}
        caller[LINENO] = frame.f_lineno
        try:
            # through JSON and back: what is checked is what the line holds
            plain = json.loads(_dumps({"value": value, "metadata": {**caller, **(metadata or {})}}))
        except (TypeError, ValueError) as e:
            raise MLLogError(f"{self.path}: {key}: not JSON: {e}") from None
        wrong = rule_problems(event_type, key, plain["value"], plain["metadata"])
        if wrong:
            raise MLLogError(f"{self.path}: " + "; ".join(wrong))
        now = self._clock()
        if not _is_int(now):
            raise MLLogError(f"{self.path}: the clock gave {now!r}, not integer milliseconds")
        if self._last_ms is not None and now < self._last_ms:
            now = self._last_ms
        self._last_ms = now
        text = encode(now, event_type, key, plain["value"], plain["metadata"], self.namespace)
        self._write(text + "\n")
        return text

    def _file_name(self, name: str) -> str:
        if self._root is not None:
            try:
                return Path(name).resolve().relative_to(self._root.resolve()).as_posix()
            except ValueError:
                pass
        return name

    def _write(self, text: str) -> None:
        self._file.write(text)
        self._file.flush()


# -- resuming ------------------------------------------------------------------------------


def _block_ends(entries: Sequence[Entry | None], at: int) -> int | None:
    """The last epoch of the block that entries[at], a block_stop, closes."""
    stop = entries[at]
    assert stop is not None
    first = stop.metadata.get(FIRST_EPOCH_NUM)
    count = stop.metadata.get(EPOCH_COUNT)
    if count is None:
        for e in reversed(entries[:at]):
            if e is not None and e.key == BLOCK_START and e.metadata.get(FIRST_EPOCH_NUM) == first:
                count = e.metadata.get(EPOCH_COUNT)
                break
    if not (isinstance(first, int) and isinstance(count, int)):
        return None
    return first + count - 1


def _epoch_end(entries: Sequence[Entry | None], epoch: int) -> int:
    """How many lines to keep: through epoch's last epoch_stop and what finishes the epoch."""
    stops = [
        i
        for i, e in enumerate(entries)
        if e is not None and e.key == EPOCH_STOP and e.metadata.get(EPOCH_NUM) == epoch
    ]
    if not stops:
        raise MLLogError(f"no epoch_stop with epoch_num {epoch}")
    keep = stops[-1] + 1
    while keep < len(entries):
        e = entries[keep]
        if e is None:
            break
        if e.key == EVAL_START and e.metadata.get(EPOCH_NUM) == epoch:
            stop = _eval_stop(entries, keep, epoch)
            if stop is None:
                break
            keep = stop + 1
        elif e.key == BLOCK_STOP and _block_ends(entries, keep) == epoch:
            keep += 1
        else:
            break
    return keep


def _eval_stop(entries: Sequence[Entry | None], start: int, epoch: int) -> int | None:
    """The index of the eval_stop of the evaluation at start, None where it is incomplete."""
    for i in range(start + 1, len(entries)):
        e = entries[i]
        if e is None:
            return None
        if e.key == EVAL_STOP:
            return i if e.metadata.get(EPOCH_NUM) == epoch else None
        if KEYS.get(e.key, _FACT).event_type != POINT_IN_TIME:
            return None
    return None


def converged_epoch(path: str | os.PathLike[str]) -> int | None:
    """The epoch after which a log's run_stop with status success ended MLPerf's run (the
    epoch_num of the last line before it that has one; 0 where none has); None where the log
    has no such run_stop (an aborted one does not end a run that is resumed to train on)."""
    epoch = 0
    for e in _entries(_lines(Path(path))):
        if e is None:
            continue
        if e.key == RUN_STOP and e.metadata.get(STATUS) == SUCCESS:
            return epoch
        number = e.metadata.get(EPOCH_NUM)
        if _is_count(number):
            epoch = number
    return None


def cut(
    path: str | os.PathLike[str], *, after_ms: int | None = None, after_epoch: int | None = None
) -> int:
    """Drops what a killed attempt logged after its last checkpoint; returns how many lines.

    One mark: ``after_ms`` (the checkpoint's time) or ``after_epoch`` (the checkpoint's last
    finished epoch); see the module's doc for what each keeps. The file is replaced whole.
    """
    if (after_ms is None) == (after_epoch is None):
        raise MLLogError("cut takes one of after_ms and after_epoch")
    target = Path(path)
    lines = _lines(target)
    torn = 0
    if lines and not lines[-1].endswith("\n"):
        # a last line without its newline: whole where it parses, torn mid-write otherwise
        if _entries(lines[-1:]) == [None]:
            lines.pop()
            torn = 1
        else:
            lines[-1] += "\n"
    entries = _entries(lines)
    if after_epoch is not None:
        try:
            keep = _epoch_end(entries, after_epoch)
        except MLLogError as e:
            raise MLLogError(f"{target}: {e}") from None
    elif after_ms is not None:
        later = [i for i, e in enumerate(entries) if e is not None and e.time_ms > after_ms]
        keep = later[0] if later else len(lines)
    kept = "".join(lines[:keep])
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(kept)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(lines) - keep + torn
