"""Accelerator leasing (accelpipe.core.leases): exclusive devices across real processes.

The concurrency tests run real processes against one lock directory and check, per
device, that no two holding intervals overlap. Interval ends come from a shared
counter ticked inside the lease, so the order is exact (no clock resolution games).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from accelpipe.core import leases
from accelpipe.core.errors import AccelpipeError, BackendUnavailableError, ConfigError

POOL = ["0", "1", "2", "3"]
# spawn: each worker is a fresh interpreter, sharing nothing with the test but the lock dir.
MP = multiprocessing.get_context("spawn")


class _Waited(Exception):
    """Raised from on_wait: the lease would have had to wait."""


def _no_wait() -> None:
    raise _Waited


def _now(n: int, pool: Sequence[str], lock_dir: str | Path) -> AbstractContextManager[list[str]]:
    """A lease that fails with _Waited instead of waiting (so a bug fails, not hangs)."""
    return leases.lease(n, pool, lock_dir, on_wait=_no_wait)


# --- workers (module level, so that spawn can import them) ------------------------------


def _tick(clock) -> int:
    with clock.get_lock():
        clock.value += 1
        return clock.value


def _lease_worker(
    sizes: Sequence[int], pool: list[str], lock_dir: str, out: str, clock, barrier
) -> None:
    """Lease sizes[i] devices, hold a few ms, record (devices, start, end); write a report."""
    waits = 0

    def count_wait() -> None:
        nonlocal waits
        waits += 1

    records = []
    barrier.wait()  # all workers start together, so they really compete
    for n in sizes:
        with leases.lease(n, pool, lock_dir, poll_s=0.002, on_wait=count_wait) as devices:
            start = _tick(clock)
            stamped = all(
                f"pid={os.getpid()} " in leases.lock_path(lock_dir, d).read_text() for d in devices
            )
            time.sleep(0.004)
            end = _tick(clock)
        records.append({"devices": devices, "start": start, "end": end, "stamped": stamped})
    report = {"pid": os.getpid(), "waits": waits, "records": records}
    Path(out).write_text(json.dumps(report))


def _hold_forever(n: int, pool: list[str], lock_dir: str, ready, job: str = "") -> None:
    with leases.lease(n, pool, lock_dir, job=job):
        ready.set()
        time.sleep(3600)


# --- helpers ----------------------------------------------------------------------------


def _overlaps(records: list[dict]) -> list[tuple[str, dict, dict]]:
    """(device, a, b) for every pair of consecutive holds of a device that overlap."""
    by_device: dict[str, list[dict]] = {}
    for record in records:
        for device in record["devices"]:
            by_device.setdefault(device, []).append(record)
    clashes = []
    for device, holds in by_device.items():
        holds.sort(key=lambda r: r["start"])
        clashes += [(device, a, b) for a, b in itertools.pairwise(holds) if b["start"] < a["end"]]
    return clashes


def _run_workers(tmp_path: Path, plans: list[list[int]]) -> list[dict]:
    """Run one process per plan (lease sizes in order) on POOL; their reports."""
    lock_dir = str(tmp_path / "locks")
    clock = MP.Value("q", 0)
    barrier = MP.Barrier(len(plans))
    outs = [tmp_path / f"worker{i}.json" for i in range(len(plans))]
    procs = [
        MP.Process(target=_lease_worker, args=(plan, POOL, lock_dir, str(out), clock, barrier))
        for plan, out in zip(plans, outs, strict=True)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    assert [p.exitcode for p in procs] == [0] * len(procs)
    return [json.loads(out.read_text()) for out in outs]


def _check_reports(reports: list[dict], plans: list[list[int]]) -> None:
    for report, plan in zip(reports, plans, strict=True):
        got = report["records"]
        assert [len(r["devices"]) for r in got] == plan, "every lease got its size"
        for record in got:
            assert len(set(record["devices"])) == len(record["devices"])
            assert set(record["devices"]) <= set(POOL)
            assert record["stamped"], "the lock files name the holder's pid"
    records = [r for report in reports for r in report["records"]]
    assert _overlaps(records) == []
    # Without contention the overlap check would prove nothing.
    assert sum(report["waits"] for report in reports) > 0


# --- single process ---------------------------------------------------------------------


def test_exception_inside_the_lease_releases_the_devices(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), _now(4, POOL, tmp_path) as devices:
        assert devices == POOL
        raise RuntimeError("boom")
    with _now(4, POOL, tmp_path) as devices:
        assert devices == POOL
    assert all(leases.lock_path(tmp_path, d).read_text() == "" for d in POOL)


def test_leases_in_one_process_exclude_each_other(tmp_path: Path) -> None:
    with _now(3, POOL, tmp_path) as first:
        assert first == ["0", "1", "2"]
        with _now(1, POOL, tmp_path) as second:
            assert second == ["3"]
        with pytest.raises(_Waited), _now(2, POOL, tmp_path):
            pass


def test_a_waiting_lease_holds_nothing(tmp_path: Path) -> None:
    waits = []

    def give_up_on_third_wait() -> None:
        # While this lease waits for "1", "0" and "2" must be free for others.
        with _now(2, ["0", "2"], tmp_path):
            pass
        waits.append(1)
        if len(waits) == 3:
            raise _Waited

    with (
        _now(1, ["1"], tmp_path),
        pytest.raises(_Waited),
        leases.lease(3, ["0", "1", "2"], tmp_path, poll_s=0.001, on_wait=give_up_on_third_wait),
    ):
        pass
    assert len(waits) == 3


def test_zero_devices_touches_no_lock(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    with _now(0, POOL, lock_dir) as devices:
        assert devices == []
    assert not lock_dir.exists()


def test_more_devices_than_the_pool_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"asks for 5 .* only 4"), _now(5, POOL, tmp_path):
        pass
    with pytest.raises(ConfigError, match="negative"), _now(-1, POOL, tmp_path):
        pass
    with pytest.raises(ConfigError, match="twice"), _now(1, ["0", "0"], tmp_path):
        pass
    assert list(tmp_path.iterdir()) == []


def test_device_ids_are_sanitized_into_distinct_lock_files(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    pool = ["a/b", "a_b", "../up", "GPU-1e2f", "a%2Fb"]
    with _now(len(pool), pool, lock_dir) as devices:
        assert devices == pool  # two ids sharing a lock file would make it wait
    files = sorted(p.name for p in lock_dir.iterdir())
    assert len(files) == len(pool)
    assert all(p.parent == lock_dir for p in lock_dir.iterdir())
    assert not (tmp_path / "up.lock").exists()


def test_lock_files_of_another_user_are_locked_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def open_without_write_permission(path, flags, *args, **kwargs):  # another user's 0644 file
        if flags & (os.O_RDWR | os.O_WRONLY) and str(path).endswith(".lock"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    leases.lock_path(tmp_path, "0").touch()
    monkeypatch.setattr(leases.os, "open", open_without_write_permission)
    with _now(1, ["0"], tmp_path) as devices:
        assert devices == ["0"]
        with pytest.raises(_Waited), _now(1, ["0"], tmp_path):
            pass


def test_unwritable_lock_dir_names_the_file_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def deny(path, flags, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(leases.os, "open", deny)
    with (
        pytest.raises(AccelpipeError, match=r"0\.lock.*ACCELPIPE_LOCK_DIR"),
        _now(1, ["0"], tmp_path),
    ):
        pass


def test_default_lock_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ACCELPIPE_LOCK_DIR", str(tmp_path))
    assert leases.default_lock_dir() == tmp_path
    monkeypatch.delenv("ACCELPIPE_LOCK_DIR")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # a per-job TMPDIR must not move the locks
    assert leases.default_lock_dir() == Path(f"/tmp/accelpipe-leases-{os.getuid()}")


# --- a lock directory or lock file another user could turn against the one who leases ------
# The tests run as root: "another user" is a directory chowned to uid 65534 (nobody).

NOBODY = 65534


def _victim(tmp_path: Path) -> tuple[Path, bytes]:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"results the user cares about\n" * 10)
    return victim, victim.read_bytes()


def test_a_missing_lock_dir_is_created_private_in_one_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock_dir = tmp_path / "parent" / "locks"
    old_umask = os.umask(0)  # a permissive umask must not open it up
    try:
        with _now(1, POOL, lock_dir):
            pass
    finally:
        os.umask(old_umask)
    assert lock_dir.stat().st_mode & 0o777 == 0o700


def test_a_lock_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    os.chown(lock_dir, NOBODY, NOBODY)
    with pytest.raises(leases.locks.UnsafeLockError) as err, _now(1, POOL, lock_dir):
        pass
    assert f"{lock_dir} belongs to uid {NOBODY}" in str(err.value)
    assert "ACCELPIPE_LOCK_DIR" in str(err.value) and "\n" not in str(err.value)
    assert list(lock_dir.iterdir()) == []  # nothing created in it


def test_a_sticky_lock_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    lock_dir.chmod(0o1777)  # its owner could still remove and replace our lock files
    os.chown(lock_dir, NOBODY, NOBODY)
    with (
        pytest.raises(leases.locks.UnsafeLockError, match=f"belongs to uid {NOBODY}"),
        _now(1, POOL, lock_dir),
    ):
        pass


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_lock_dir_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    lock_dir.chmod(mode)
    with pytest.raises(leases.locks.UnsafeLockError) as err, _now(1, POOL, lock_dir):
        pass
    assert f"{lock_dir} is writable by others (mode {mode:04o})" in str(err.value)
    assert f"chmod go-w {lock_dir}" in str(err.value)
    assert list(lock_dir.iterdir()) == []


def test_a_root_owned_sticky_lock_dir_is_the_shared_setup_and_accepted(tmp_path: Path) -> None:
    lock_dir = tmp_path / "shared"
    lock_dir.mkdir()
    lock_dir.chmod(0o1777)  # root's (we are root): what the docs tell an admin to make
    with _now(2, POOL, lock_dir) as devices:
        assert devices == ["0", "1"]


def test_a_symlinked_lock_dir_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    lock_dir = tmp_path / "locks"
    lock_dir.symlink_to(elsewhere)
    with (
        pytest.raises(leases.locks.UnsafeLockError, match=r"locks is a symbolic link"),
        _now(1, POOL, lock_dir),
    ):
        pass
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("dangling", [False, True])
def test_a_planted_symlink_lock_file_leaves_its_target_untouched(
    tmp_path: Path, dangling: bool
) -> None:
    victim, before = _victim(tmp_path)
    target = tmp_path / "not-yet" if dangling else victim
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    leases.lock_path(lock_dir, "0").symlink_to(target)
    with pytest.raises(leases.locks.UnsafeLockError) as err, _now(1, ["0"], lock_dir):
        pass
    assert "0.lock is a symbolic link" in str(err.value) and "remove it" in str(err.value)
    assert victim.read_bytes() == before
    assert not (tmp_path / "not-yet").exists()


def test_a_planted_hard_link_lock_file_leaves_the_other_name_untouched(tmp_path: Path) -> None:
    victim, before = _victim(tmp_path)
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    os.link(victim, leases.lock_path(lock_dir, "0"))
    with (
        pytest.raises(leases.locks.UnsafeLockError, match=r"0\.lock has 2 names"),
        _now(1, ["0"], lock_dir),
    ):
        pass
    assert victim.read_bytes() == before


def test_a_planted_fifo_lock_file_is_refused_without_hanging(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    os.mkfifo(leases.lock_path(lock_dir, "0"))
    with (
        pytest.raises(leases.locks.UnsafeLockError, match=r"0\.lock is not a regular file"),
        _now(1, ["0"], lock_dir),
    ):
        pass


def test_the_holder_record_replaces_a_longer_one_without_truncating_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = leases.lock_path(tmp_path, "0")
    lock.write_text("stale record of a crashed holder " * 20)
    flags_seen: list[int] = []
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):
        flags_seen.append(flags)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(leases.locks.os, "open", recording_open)
    with _now(
        1,
        ["0"],
        tmp_path,
    ) as devices:
        text = lock.read_text()
    assert devices == ["0"]
    assert text.startswith(f"pid={os.getpid()} ") and text.count("\n") == 1 and "stale" not in text
    assert flags_seen and not any(flags & os.O_TRUNC for flags in flags_seen)
    assert all(flags & os.O_NOFOLLOW and flags & os.O_CLOEXEC for flags in flags_seen)


def test_a_held_lease_times_out_naming_its_holder(tmp_path: Path) -> None:
    pool, lock_dir = ["0", "1"], tmp_path / "locks"
    ready = MP.Event()
    holder = MP.Process(
        target=_hold_forever, args=(1, pool, str(lock_dir), ready, "train:resnet50/default")
    )
    holder.start()
    try:
        while not ready.wait(0.05):  # no deadline: only fail if the holder died
            assert holder.is_alive(), "the holder process died before leasing"
        with (
            pytest.raises(leases.LeaseTimeoutError) as err,
            leases.lease(2, pool, lock_dir, wait_s=0.0),
        ):
            pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
    message = str(err.value)
    assert (
        f"0 by pid={holder.pid} host={socket.gethostname()} job=train:resnet50/default since="
        in message
    )
    assert "1 by" not in message  # a free device is not named as held
    assert "accelerators.wait_s" in message and "\n" not in message
    assert isinstance(err.value, AccelpipeError)
    with _now(2, pool, lock_dir) as devices:  # the failed wait left nothing behind
        assert devices == pool


def test_a_waiting_lease_logs_its_holders_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    waits = []

    def give_up_on_third_wait() -> None:
        waits.append(1)
        if len(waits) == 3:
            raise _Waited

    caplog.set_level("INFO", logger="accelpipe.core.leases")
    with (
        leases.lease(1, ["0"], tmp_path, job="evaluate:unet2d/fold0"),
        pytest.raises(_Waited),
        leases.lease(1, ["0"], tmp_path, poll_s=0.0, on_wait=give_up_on_third_wait),
    ):
        pass
    (record,) = [r.getMessage() for r in caplog.records if r.name == "accelpipe.core.leases"]
    assert f"0 by pid={os.getpid()} " in record and "job=evaluate:unet2d/fold0" in record


# --- visibility -------------------------------------------------------------------------


def test_visibility_env_per_backend() -> None:
    assert leases.visibility_env("cpu", []) == {}
    assert leases.visibility_env("cuda", ["0", "1"]) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert leases.visibility_env("rocm", ["2", "3"]) == {"HIP_VISIBLE_DEVICES": "2,3"}
    assert leases.visibility_env("gaudi", ["5"]) == {"HABANA_VISIBLE_MODULES": "5"}
    assert leases.visibility_env("cuda", []) == {"CUDA_VISIBLE_DEVICES": ""}
    with pytest.raises(ConfigError, match="tpu"):
        leases.visibility_env("tpu", ["0"])


# --- detection --------------------------------------------------------------------------

ROCM_SMI = """
============================ ROCm System Management Interface ============================
=========================================== ID ===========================================
GPU[0]\t\t: Device Name: \t\tInstinct MI210
GPU[0]\t\t: Device ID: \t\t0x740f
GPU[0]\t\t: Device Rev: \t\t0x02
GPU[1]\t\t: Device Name: \t\tInstinct MI210
GPU[1]\t\t: Device ID: \t\t0x740f

==========================================================================================
================================== End of ROCm SMI Log ===================================
"""

AMD_SMI = """GPU: 0
    BDF: 0000:0c:00.0
    UUID: 6cff74a1-0000-1000-80c8-6bc7b4d3b3f1

GPU: 1
    BDF: 0000:22:00.0
    UUID: 9aff74a1-0000-1000-803c-2de5fa3a0d2b
"""


class FakeTools:
    """A runner that answers for the tools it knows; the others are 'not installed'."""

    def __init__(self, **outputs: str) -> None:
        self.outputs = {tool.replace("_", "-"): out for tool, out in outputs.items()}
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        if argv[0] not in self.outputs:
            raise FileNotFoundError(argv[0])
        return self.outputs[argv[0]]


def test_detect_cuda_parses_nvidia_smi() -> None:
    tools = FakeTools(nvidia_smi="0\n 1 \n\n2\r\n3\n")
    assert leases.detect_devices("cuda", runner=tools) == POOL
    assert tools.calls == [["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"]]


def test_detect_rocm_parses_rocm_smi_showid() -> None:
    tools = FakeTools(rocm_smi=ROCM_SMI, amd_smi="GPU: 7\n")
    assert leases.detect_devices("rocm", runner=tools) == ["0", "1"]
    assert tools.calls == [["rocm-smi", "--showid"]]


def test_detect_rocm_falls_back_to_amd_smi() -> None:
    tools = FakeTools(amd_smi=AMD_SMI)
    assert leases.detect_devices("rocm", runner=tools) == ["0", "1"]
    assert [call[0] for call in tools.calls] == ["rocm-smi", "amd-smi"]


def test_detect_gaudi_parses_hl_smi_module_ids_in_numeric_order() -> None:
    tools = FakeTools(hl_smi="module_id\n  3\n\n1 \n10\n2\n0\n")
    assert leases.detect_devices("gaudi", runner=tools) == ["0", "1", "2", "3", "10"]
    assert tools.calls == [["hl-smi", "-Q", "module_id", "-f", "csv,noheader"]]


def test_detect_cpu_has_no_devices_and_runs_nothing() -> None:
    tools = FakeTools()
    assert leases.detect_devices("cpu", runner=tools) == []
    assert tools.calls == []


@pytest.mark.parametrize(
    ("backend", "tools"),
    [("cuda", ["nvidia-smi"]), ("rocm", ["rocm-smi", "amd-smi"]), ("gaudi", ["hl-smi"])],
)
def test_detect_with_the_tool_missing_names_it(backend: str, tools: list[str]) -> None:
    with pytest.raises(BackendUnavailableError) as info:
        leases.detect_devices(backend, runner=FakeTools())
    message = str(info.value)
    assert all(f"`{tool}`" in message for tool in tools)
    assert "accelerators.pool" in message


def _fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)


def test_detect_runs_the_real_tool_from_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    _fake_tool(bin_dir, "nvidia-smi", "printf '0\\n1\\n'")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert leases.detect_devices("cuda") == ["0", "1"]
    with pytest.raises(BackendUnavailableError, match="`hl-smi` not found"):
        leases.detect_devices("gaudi")


def test_detect_reports_a_failing_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    _fake_tool(bin_dir, "nvidia-smi", "echo 'NVIDIA-SMI has failed: no driver' >&2; exit 9")
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(BackendUnavailableError, match=r"exit status 9: NVIDIA-SMI has failed"):
        leases.detect_devices("cuda")


# --- pool -------------------------------------------------------------------------------


def test_resolve_pool_prefers_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leases, "run_tool", FakeTools(nvidia_smi="0\n1\n"))
    assert leases.resolve_pool("cuda", ["3", "1"]) == ["3", "1"]
    assert leases.resolve_pool("cuda", [2, 0]) == ["2", "0"]  # YAML ints
    assert leases.resolve_pool("cuda", None) == ["0", "1"]


@pytest.mark.parametrize(
    ("pool", "match"),
    [(["0", "0"], "more than once"), (["0,1"], "'0,1'"), ([""], "''"), ("0,1", "a list")],
)
def test_resolve_pool_rejects_bad_config(pool: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        leases.resolve_pool("cuda", pool)  # type: ignore[arg-type]


# --- concurrency ------------------------------------------------------------------------


def test_overlap_check_detects_a_shared_device() -> None:
    records = [
        {"devices": ["0", "1"], "start": 1, "end": 4},
        {"devices": ["2"], "start": 2, "end": 3},
        {"devices": ["1", "3"], "start": 3, "end": 6},
        {"devices": ["0"], "start": 5, "end": 7},
    ]
    assert [(d, a["start"], b["start"]) for d, a, b in _overlaps(records)] == [("1", 1, 3)]


def test_processes_leasing_two_devices_never_share_one(tmp_path: Path) -> None:
    plans = [[2] * 8 for _ in range(6)]
    _check_reports(_run_workers(tmp_path, plans), plans)


def test_mixed_one_and_three_device_leases_never_share_one(tmp_path: Path) -> None:
    plans = [[1, 3, 1, 1, 3, 1], [3, 1, 3, 1], [1] * 8, [3] * 4, [1, 1, 3, 1], [3, 1, 1, 3]]
    _check_reports(_run_workers(tmp_path, plans), plans)


def test_sigkilled_holder_releases_its_devices(tmp_path: Path) -> None:
    pool, lock_dir = ["0", "1"], tmp_path / "locks"
    ready = MP.Event()
    holder = MP.Process(target=_hold_forever, args=(2, pool, str(lock_dir), ready))
    holder.start()
    try:
        while not ready.wait(0.05):  # no deadline: only fail if the holder died
            assert holder.is_alive(), "the holder process died before leasing"
        assert f"pid={holder.pid} " in leases.lock_path(lock_dir, "0").read_text()
        with pytest.raises(_Waited), _now(1, pool, lock_dir):
            pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
    assert holder.exitcode == -signal.SIGKILL
    with _now(2, pool, lock_dir) as devices:
        assert devices == pool
