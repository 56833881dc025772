"""The container layer without an engine: tags, vendor flags, environment, mounts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from accelpipe import containers
from accelpipe.cli import stage_argv
from accelpipe.errors import AccelpipeError, ConfigError

REPO = containers.REPO


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    for name in ("docker", "requirements", "workflow"):
        shutil.copytree(
            REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "wheelhouse")
        )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, tmp_path / name)
    return tmp_path


def test_tag_is_stable_and_follows_sources(repo_copy: Path) -> None:
    spec = containers.spec_for("cpu", repo=repo_copy)
    tag = containers.image_tag(spec, repo_copy)
    assert tag == containers.image_tag(spec, repo_copy) and len(tag) == 12
    (repo_copy / "workflow/accelpipe/__pycache__").mkdir(exist_ok=True)
    (repo_copy / "workflow/accelpipe/__pycache__/x.pyc").write_bytes(b"noise")
    assert containers.image_tag(spec, repo_copy) == tag  # bytecode is not a source

    model = repo_copy / "workflow/accelpipe/models/dynunet2d.py"
    model.write_text(model.read_text() + "\n# a comment is not what runs\n")
    assert containers.image_tag(spec, repo_copy) == tag
    model.write_text(model.read_text() + "\nEDITED = 1\n")
    edited = containers.image_tag(spec, repo_copy)
    assert edited != tag
    dockerfile = repo_copy / spec.dockerfile
    dockerfile.write_text(dockerfile.read_text() + "\n# edited\n")
    assert containers.image_tag(spec, repo_copy) not in (tag, edited)


def test_a_tag_hashes_only_what_goes_into_its_image(repo_copy: Path) -> None:
    """A torch-only module or pin rebuilds the PyTorch images and no TensorFlow one."""
    torch_spec = containers.spec_for("cpu", "pytorch", repo=repo_copy)
    tf_spec = containers.spec_for("cpu", "tensorflow", repo=repo_copy)
    before = containers.image_tag(torch_spec, repo_copy), containers.image_tag(tf_spec, repo_copy)
    for name, edit in (
        ("workflow/accelpipe/models/dynunet2d.py", "EDITED = 1"),
        ("requirements/torch.txt", "# edited"),
    ):
        path = repo_copy / name
        path.write_text(path.read_text() + f"\n{edit}\n")
    assert containers.image_tag(torch_spec, repo_copy) != before[0]
    assert containers.image_tag(tf_spec, repo_copy) == before[1]
    # code every image runs (the trace summarizer's stage) and a shared pin change both
    for name, edit in (
        ("workflow/accelpipe/stages/trace.py", "EDITED = 1"),
        ("requirements/core.txt", "# edited"),
    ):
        path = repo_copy / name
        path.write_text(path.read_text() + f"\n{edit}\n")
        assert containers.image_tag(tf_spec, repo_copy) != before[1]


def test_image_reference_and_slug() -> None:
    spec = containers.spec_for("cpu")
    ref = containers.image_ref(spec, "registry.example.org/team/")
    assert ref.startswith("registry.example.org/team/accelpipe/cpu-pytorch:")
    assert containers.image_slug(ref) == "cpu-pytorch-" + ref.rsplit(":", 1)[1]


def test_every_backend_has_an_image_and_unknown_ones_fail() -> None:
    assert {containers.spec_for(b).backend for b in ("cpu", "cuda", "rocm", "gaudi")} == {
        "cpu",
        "cuda",
        "rocm",
        "gaudi",
    }
    with pytest.raises(ConfigError, match="tpu-pytorch"):
        containers.spec_for("tpu")


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
