"""The host's CPUs while a run trains: their model, the load average, and the CPU time other
processes took on the CPUs this job may run on, so that figures measured on a loaded host
say so (performance.host_load judges them).

Two samples, at the start and the end of the window (the engines' training loop), keep the
measurement out of the steps it watches. Linux only (/proc); elsewhere the facts say why
there are none. The job is the process tree under the `accelpipe train` process the rule
started (JOB_ROOT_ENV): its workers, their loader processes and what they have reaped.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The pid of the job's first `accelpipe train` process; launched workers inherit it.
JOB_ROOT_ENV = "ACCELPIPE_JOB_PID"
PROC = Path("/proc")
# /proc/stat's per-CPU columns that are busy time: user nice system (idle iowait) irq softirq
# steal; guest time is already in user. Steal is time another virtual machine took.
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


def mark_job_root() -> None:
    """Make this process the job's root unless a launching process already is."""
    os.environ.setdefault(JOB_ROOT_ENV, str(os.getpid()))


def cpu_model(cpuinfo: Path = PROC / "cpuinfo") -> str | None:
    """The CPU's model name as /proc/cpuinfo gives it (x86 `model name`, Arm `Model`)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model") and value.strip():
            return value.strip()
    return None


def busy_ticks(cpus: set[int], stat: Path = PROC / "stat") -> int | None:
    """Clock ticks the CPUs `cpus` have been busy since boot (every process on them)."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    total = 0
    for line in lines:
        name, *columns = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            total += sum(int(columns[i]) for i in _BUSY_COLUMNS if i < len(columns))
    return total


def _stat_fields(stat_text: str) -> tuple[int, int]:
    """(parent pid, own and reaped children's CPU ticks) of one /proc/<pid>/stat."""
    fields = stat_text.rpartition(")")[2].split()  # the command name may hold spaces
    # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), from field 3
    return int(fields[1]), sum(int(fields[i]) for i in (11, 12, 13, 14))


def tree_ticks(root: int, proc: Path = PROC) -> int | None:
    """CPU ticks of `root` and every live descendant, each with the children it reaped;
    None where `root` is gone or /proc cannot be read."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    try:
        entries = [p for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return None
    for entry in entries:
        try:
            parents[int(entry.name)], ticks[int(entry.name)] = _stat_fields(
                (entry / "stat").read_text()
            )
        except (OSError, ValueError, IndexError):
            continue  # ended while we looked
    if root not in ticks:
        return None
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def job_root() -> int:
    """The job's root process: JOB_ROOT_ENV where it is an ancestor of this one (a launched
    worker), else this process (a worker on another node, or run by hand)."""
    value = os.environ.get(JOB_ROOT_ENV, "")
    pid = os.getpid()
    if value.isdigit():
        seen = pid
        while seen > 1:
            if seen == int(value):
                return seen
            try:
                seen = _stat_fields((PROC / str(seen) / "stat").read_text())[0]
            except (OSError, ValueError, IndexError):
                break
    return pid


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    busy: int | None  # the usable CPUs' busy ticks
    job: int | None  # the job tree's ticks
    load: tuple[float, float, float] | None


def _load() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None


def sample(root: int, cpus: set[int]) -> Sample:
    return Sample(time.monotonic(), busy_ticks(cpus), tree_ticks(root), _load())


def usable_cpus() -> set[int]:
    """The CPUs this process may run on (a Slurm job's, a container's), not the machine's."""
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


class HostWindow:
    """The host's load between `start` and `stop` (the job's CPU time and the other
    processes' on the CPUs this process may use)."""

    def __init__(self, root: int | None = None, cpus: set[int] | None = None) -> None:
        self.root = job_root() if root is None else root
        self.cpus = usable_cpus() if cpus is None else cpus
        self.first: Sample | None = None

    def start(self) -> None:
        self.first = sample(self.root, self.cpus)

    def stop(self) -> dict[str, Any]:
        """stage.json's `host`: the CPU, the cores, the load averages at the start and the
        end, the window's seconds, the job's and the other processes' CPU seconds on the
        usable CPUs; `not_measured` says why the CPU times are missing, where they are."""
        last = sample(self.root, self.cpus)
        first = self.first or last
        facts: dict[str, Any] = {
            "cpu_model": cpu_model(),
            "cores": os.cpu_count(),
            "usable_cpus": len(self.cpus),
            "load_average_start": list(first.load) if first.load else None,
            "load_average_end": list(last.load) if last.load else None,
            "window_s": round(last.at - first.at, 3),
            "job_cpu_s": None,
            "other_cpu_s": None,
            "not_measured": None,
        }
        if None in (first.busy, last.busy, first.job, last.job):
            return facts | {"not_measured": "no /proc/stat or /proc/<pid>/stat (not Linux?)"}
        hertz = os.sysconf("SC_CLK_TCK")
        job = (last.job - first.job) / hertz  # type: ignore[operator]
        busy = (last.busy - first.busy) / hertz  # type: ignore[operator]
        # The job's ticks count on every CPU it ran on, which are the usable ones.
        return facts | {"job_cpu_s": round(job, 3), "other_cpu_s": round(max(0.0, busy - job), 3)}
