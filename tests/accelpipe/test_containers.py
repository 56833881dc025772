"""The Docker Engine client without an engine: vendor flags, environment, mounts, argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelpipe import containers
from accelpipe.cli import stage_argv
from accelpipe.errors import AccelpipeError


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
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    monkeypatch.setenv("MY_VAR", "1")
    env = containers.container_env()
    assert env["OMP_NUM_THREADS"] == "3" and env["HOME"] == "/tmp"
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
