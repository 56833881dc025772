"""The Docker Engine client without an engine: vendor flags, environment, mounts, argv."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from accelpipe.cli import stage_argv
from accelpipe.core import containers, locks
from accelpipe.core.errors import AccelpipeError
from accelpipe.plan import images


def test_gaudi_flags() -> None:
    opts = containers.device_options("gaudi", ["2", "3"])
    assert opts["runtime"] == "habana" and opts["ipc_mode"] == "host"
    assert opts["cap_add"] == ["SYS_NICE"]
    assert opts["environment"] == {"HABANA_VISIBLE_MODULES": "2,3"}


def test_rocm_flags_pass_only_the_leased_render_nodes() -> None:
    opts = containers.device_options("rocm", ["1", "3"])
    nodes = [d.split(":")[0] for d in opts["devices"]]
    assert nodes == ["/dev/kfd", "/dev/dri/renderD129", "/dev/dri/renderD131"]
    assert opts["group_add"] == ["video"] and opts["security_opt"] == ["seccomp=unconfined"]
    assert opts["ipc_mode"] == "host"
    # inside, only the leased GPUs exist, renumbered; HIP_VISIBLE_DEVICES is the only variable
    assert opts["environment"] == {"HIP_VISIBLE_DEVICES": "0,1"}


def test_cuda_flags_request_the_leased_gpus() -> None:
    (request,) = containers.device_options("cuda", ["0", "5"])["device_requests"]
    assert request["DeviceIDs"] == ["0", "5"] and request["Capabilities"] == [["gpu"]]


@pytest.mark.parametrize("backend", ["cpu", "cuda", "rocm", "gaudi"])
def test_never_privileged(backend: str) -> None:
    opts = containers.device_options(backend, ["0"])
    assert "privileged" not in opts and "--privileged" not in repr(opts)
    assert containers.device_options(backend, []) == {}


def test_environment_is_a_whitelist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    monkeypatch.setenv("MY_VAR", "1")
    env = containers.container_env()
    assert env["OMP_NUM_THREADS"] == "3" and env["HOME"] == "/tmp"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "AWS_SECRET_ACCESS_KEY" not in env and "MY_VAR" not in env
    assert containers.container_env(["MY_VAR"])["MY_VAR"] == "1"


def test_mounts_are_same_path_binds_without_nested_duplicates(tmp_path: Path) -> None:
    (tmp_path / "work/data").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    mounts = containers.mounts_for(
        [tmp_path / "work", tmp_path / "work/data", tmp_path / "elsewhere"]
    )
    assert [(m["Source"], m["Target"]) for m in mounts] == [
        (str(tmp_path / "elsewhere"), str(tmp_path / "elsewhere")),
        (str(tmp_path / "work"), str(tmp_path / "work")),
    ]
    assert all(m["Type"] == "bind" for m in mounts)


def test_stage_argv_drops_the_global_options() -> None:
    argv = [
        "--log",
        "logs/train.log",
        "--framework",
        "pytorch",
        "--accel",
        "1",
        "train",
        "--workload",
        "unet2d",
        "--out",
        "train",
    ]
    assert stage_argv(argv) == ["train", "--workload", "unet2d", "--out", "train"]
    assert stage_argv(["--log=x.log", "raw", "--dataset", "brats"]) == ["raw", "--dataset", "brats"]


def test_missing_paths_are_not_mounted(tmp_path: Path) -> None:
    mounts = containers.mounts_for([tmp_path, tmp_path.parent / "does-not-exist"])
    assert [m["Source"] for m in mounts] == [str(tmp_path)]


class _RefusedContainer:
    """A start the engine refuses, as Podman does when conmon cannot start."""

    def start(self) -> None:
        import requests
        from docker.errors import APIError

        response = requests.Response()
        response.status_code = 500
        raise APIError("start failed", response=response, explanation="write child: broken pipe")


def test_a_refused_start_is_one_clear_error() -> None:
    with pytest.raises(AccelpipeError, match="could not start img: write child: broken pipe"):
        containers._start(_RefusedContainer(), "img")


# --- the image-build lock (accelpipe.core.locks: the leases' lock directory) ---------------------

REF = "localhost/accelpipe/cpu-pytorch:abc123"
SPEC = images.spec_for("cpu", "pytorch")
MP = multiprocessing.get_context("spawn")


class _BuiltEngine:
    """An engine that already has every image: `build` only asks for it."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.images = self

    def get(self, ref: str) -> object:
        self.asked.append(ref)
        return object()


def _hold_build_lock(lock_dir: str, ready) -> None:
    """Another job building the image: holds its lock until killed."""
    name = f"image-{containers.image_slug(REF)}.lock"
    with locks.held(Path(lock_dir), name, wait_s=None, job="train:resnet50/default"):
        ready.set()
        time.sleep(3600)


def test_build_once_takes_the_build_lock_and_leaves_it_free(tmp_path: Path) -> None:
    engine = _BuiltEngine()
    assert containers.build_once(SPEC, REF, engine, tmp_path / "locks", wait_s=0) == REF
    assert engine.asked == [REF]
    lock = tmp_path / "locks" / "image-cpu-pytorch-abc123.lock"
    assert lock.read_text() == ""  # the holder record is gone with the lock
    assert (tmp_path / "locks").stat().st_mode & 0o777 == 0o700


def test_a_planted_symlink_build_lock_leaves_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"someone's results\n" * 10)
    before = victim.read_bytes()
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    (lock_dir / "image-cpu-pytorch-abc123.lock").symlink_to(victim)
    engine = _BuiltEngine()
    with pytest.raises(locks.UnsafeLockError, match=r"abc123\.lock is a symbolic link"):
        containers.build_once(SPEC, REF, engine, lock_dir, wait_s=0)
    assert victim.read_bytes() == before
    assert engine.asked == []  # nothing built or asked without the lock


def test_a_build_lock_dir_others_can_write_is_refused(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    lock_dir.chmod(0o777)
    with pytest.raises(locks.UnsafeLockError, match="writable by others"):
        containers.build_once(SPEC, REF, _BuiltEngine(), lock_dir, wait_s=0)
    assert list(lock_dir.iterdir()) == []


def test_a_held_build_lock_times_out_naming_the_builder(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    ready = MP.Event()
    builder = MP.Process(target=_hold_build_lock, args=(str(lock_dir), ready))
    builder.start()
    engine = _BuiltEngine()
    try:
        while not ready.wait(0.05):  # no deadline: only fail if the builder died
            assert builder.is_alive(), "the builder process died before locking"
        with pytest.raises(locks.LockTimeoutError) as err:
            containers.build_once(SPEC, REF, engine, lock_dir, wait_s=0)
    finally:
        os.kill(builder.pid, signal.SIGKILL)
        builder.join()
    message = str(err.value)
    assert f"by pid={builder.pid} host={socket.gethostname()} job=train:resnet50/default" in message
    assert "image-cpu-pytorch-abc123.lock" in message and "\n" not in message
    assert "raise accelerators.wait_s" in message
    assert engine.asked == []
    assert containers.build_once(SPEC, REF, engine, lock_dir, wait_s=0) == REF  # free again
