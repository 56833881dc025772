"""The host's load over a training window (accelpipe.devices.host) and its verdict
(accelpipe.performance.host_load.host_load): a busy competitor warns, an idle window does not."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from accelpipe.devices import host
from accelpipe.performance.host_load import OTHER_CPU_SHARE_LIMIT, host_load

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads Linux's /proc")

# A fixed amount of work (not a time): about a second of one CPU.
BUSY = "n = 0\nfor i in range(30_000_000):\n    n += i\n"


def _cpu_seconds(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _run_busy(cpu: int | None = None) -> float:
    """Run the busy loop to its end (pinned to `cpu`); its CPU seconds."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    return _cpu_seconds(usage)


def test_a_busy_competitor_during_the_window_makes_the_warning() -> None:
    """The job is an idle `sleep`; a busy loop outside its tree runs on the one CPU the job
    may use, through the whole window: other processes took (nearly) all of that CPU."""
    cpu = min(os.sched_getaffinity(0))
    job = subprocess.Popen(["sleep", "1000"])
    try:
        window = host.HostWindow(root=job.pid, cpus={cpu})
        window.start()
        took = _run_busy(cpu)
        facts = window.stop()
    finally:
        job.kill()
        job.wait()
    assert facts["usable_cpus"] == 1 and facts["job_cpu_s"] == pytest.approx(0, abs=0.05)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert facts["other_cpu_s"] >= took - 2 * tick  # the competitor's time, and any other's
    judged = host_load(facts)
    assert judged["oversubscribed"] is True
    assert judged["other_cpu_share"] > OTHER_CPU_SHARE_LIMIT
    assert judged["warning"].startswith("host oversubscribed: other processes used")


def test_the_jobs_own_processes_are_not_others() -> None:
    """A busy child of the job's root counts as the job's CPU time, not another process's."""
    window = host.HostWindow(root=os.getpid())
    window.start()
    took = _run_busy()
    facts = window.stop()
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert facts["job_cpu_s"] >= took - 2 * tick


def test_a_real_window_has_every_figure_and_they_are_sane() -> None:
    window = host.HostWindow()
    window.start()
    sum(range(2_000_000))
    facts = window.stop()
    cores = os.cpu_count() or 1
    assert facts["not_measured"] is None
    assert facts["cores"] == cores and 1 <= facts["usable_cpus"] <= cores
    assert facts["cpu_model"] is None or facts["cpu_model"].strip()
    for when in ("load_average_start", "load_average_end"):
        assert len(facts[when]) == 3 and all(v >= 0 for v in facts[when])
    assert facts["window_s"] > 0 and facts["job_cpu_s"] >= 0 and facts["other_cpu_s"] >= 0
    capacity = facts["window_s"] * facts["usable_cpus"]
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert facts["job_cpu_s"] + facts["other_cpu_s"] <= capacity + 2 * tick * facts["usable_cpus"]
    assert host_load(facts)["oversubscribed"] in (True, False)


# measured windows (figures as HostWindow writes them): 2 usable CPUs over 20 s of training
MEASURED = {
    "cpu_model": "x",
    "cores": 2,
    "usable_cpus": 2,
    "load_average_start": [1.0, 1.0, 1.0],
    "load_average_end": [2.1, 1.5, 1.0],
    "window_s": 20.0,
    "job_cpu_s": 38.0,
    "not_measured": None,
}


@pytest.mark.parametrize(
    ("other_cpu_s", "load", "oversubscribed"),
    [
        (0.4, 2.1, False),  # idle besides the job: 1 % other, load the job's own 1.9 + 0.2
        (3.9, 2.1, False),  # 9.75 %: under the limit
        (4.1, 2.1, True),  # 10.25 %
        (0.4, 4.2, True),  # load 4.2 - the job's 1.9 on 2 cores: others waited for CPUs
    ],
)
def test_the_verdict_is_the_other_processes_share_or_the_others_load(
    other_cpu_s: float, load: float, oversubscribed: bool
) -> None:
    facts = MEASURED | {"other_cpu_s": other_cpu_s, "load_average_end": [load, 1.5, 1.0]}
    judged = host_load(facts)
    assert judged["oversubscribed"] is oversubscribed
    assert (judged["warning"] is not None) is oversubscribed
    assert judged["other_cpu_share"] == pytest.approx(other_cpu_s / 40, abs=1e-4)


def test_a_run_without_host_facts_is_not_judged() -> None:
    assert host_load(None)["oversubscribed"] is None
    unmeasured = MEASURED | {"other_cpu_s": None, "job_cpu_s": None, "load_average_end": None}
    judged = host_load(unmeasured | {"not_measured": "no /proc/stat"})
    assert judged["oversubscribed"] is None and "no /proc/stat" in judged["note"]


def test_a_launched_worker_finds_its_launcher_as_the_jobs_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(host.JOB_ROOT_ENV, str(os.getppid()))
    assert host.job_root() == os.getppid()
    monkeypatch.setenv(host.JOB_ROOT_ENV, "999999999")  # not an ancestor: this process
    assert host.job_root() == os.getpid()
