"""runtime: docker through the real Engine API (Podman here): the tiny unet2d config
runs in the cpu-pytorch image with the same results as the local runtime, files belong
to the caller, and no container outlives its job, even when Snakemake is interrupted."""

from __future__ import annotations

import copy
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from accelpipe.core import containers
from accelpipe.plan import images
from tests.integration.conftest import BASE_IMAGE, copy_wheelhouse
from tests.workflow.project import TINY_CONFIG, Project, built_project, head_commit, make_project

pytestmark = pytest.mark.integration
TARGET = "results/unet2d/fold0"


@pytest.fixture(scope="module")
def ours(engine, tmp_path_factory: pytest.TempPathFactory) -> Callable[[], list]:
    """accelpipe's containers that this pytest process started: those working in its temp
    folder (another process's tests, e.g. the TF image's, run theirs at the same time)."""
    mine = str(tmp_path_factory.getbasetemp().resolve())

    def listed() -> list:
        found = engine.containers.list(all=True, filters={"label": containers.LABEL})
        return [c for c in found if c.attrs["Config"]["WorkingDir"].startswith(mine)]

    return listed


@pytest.fixture(scope="module")
def docker_project(engine, tmp_path_factory: pytest.TempPathFactory) -> Project:
    config = copy.deepcopy(TINY_CONFIG)
    config["runtime"] = "docker"
    config["containers"] = {"base_image": BASE_IMAGE, "offline": True}
    project = make_project(tmp_path_factory.mktemp("docker"), config)
    copy_wheelhouse(project.root)
    project.snakemake(TARGET)
    return project


@pytest.fixture(scope="module")
def local_project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return built_project(tmp_path_factory, (TARGET,))


def test_docker_results_equal_local_results(
    docker_project: Project, local_project: Project
) -> None:
    for name in ("metrics.json", "per_case_dice.csv"):
        docker_bytes = (docker_project.root / TARGET / name).read_bytes()
        local_bytes = (local_project.root / TARGET / name).read_bytes()
        assert docker_bytes == local_bytes, name
    prov = json.loads((docker_project.root / TARGET / "provenance.json").read_text())
    assert prov["config"]["runtime"] == "docker"
    # publish ran in the image, which holds no checkout: the commit came from the workflow
    assert prov["git"] == {"commit": head_commit(docker_project.root), "dirty": False}
    images = {stage["image"] for stage in prov["stages"].values()}
    assert len(images) == 1 and images.pop().startswith("localhost/accelpipe/cpu-pytorch:")


def test_every_stage_ran_in_the_image(docker_project: Project) -> None:
    # the first stage that needed the image built it (or found it built), under a lock
    raw_log = (docker_project.root / "logs/raw/brats.log").read_text()
    assert "cpu-pytorch" in raw_log
    train_log = (docker_project.root / "logs/unet2d/fold0/train.log").read_text()
    # the log is the container's output, streamed; the stage record says where it ran
    assert "epoch 2/2" in train_log
    stage = json.loads((docker_project.root / "work/unet2d/fold0/train/stage.json").read_text())
    assert stage["host"] != os.uname().nodename  # a container's hostname, not ours


def test_outputs_belong_to_the_caller(docker_project: Project) -> None:
    for folder in ("results", "work", "data"):
        for path in (docker_project.root / folder).rglob("*"):
            st = path.lstat()
            assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), path


def _python_in_image(engine, project: Project, code: str, workdir: Path, log: Path | None) -> int:
    """Run `python3 -c code` in the project's cpu image, as containers.run does for stages."""
    image = images.image_ref(
        images.spec_for("cpu", repo=project.root), "localhost", repo=project.root
    )
    return containers.run(
        engine,
        image,
        ["python3", "-c", code],
        workdir=workdir,
        mounts=[],
        backend="cpu",
        devices=[],
        env_names=[],
        log_file=log,
    )


def test_container_runs_as_the_calling_uid(
    engine, docker_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As root the check above cannot tell "the caller" from "root"; pretend to be uid 4321.
    tmp_path.chmod(0o777)  # a folder uid 4321 may write to
    monkeypatch.setattr(containers.os, "getuid", lambda: 4321)
    monkeypatch.setattr(containers.os, "getgid", lambda: 4322)
    code = _python_in_image(
        engine, docker_project, "open('made.txt', 'w').write('x')", tmp_path, None
    )
    assert code == 0
    st = (tmp_path / "made.txt").stat()
    assert (st.st_uid, st.st_gid) == (4321, 4322)


def test_exit_code_propagates_and_container_is_removed(
    engine, ours, docker_project: Project, tmp_path: Path
) -> None:
    log = tmp_path / "job.log"
    code = _python_in_image(
        engine, docker_project, "import sys; print('out'); sys.exit(3)", tmp_path, log
    )
    assert code == 3
    assert "out" in log.read_text()
    assert ours() == []


def test_no_container_is_left_behind(engine, ours, docker_project: Project) -> None:
    assert ours() == []


def test_interrupting_snakemake_mid_train_removes_the_container(
    engine, ours, docker_project: Project
) -> None:
    endless = 'unet2d={"train":{"epochs":100000,"steps_per_epoch":3}}'
    job = docker_project.start_snakemake("work/unet2d/fold2/train", "--config", endless)
    try:
        docker_project.wait_for(
            lambda: next(
                (
                    c
                    for c in ours()
                    if "train" in c.labels[containers.LABEL] and c.status == "running"
                ),
                None,
            ),
            job,
        )
        docker_project.wait_for(
            lambda: next(
                (docker_project.root / "work/unet2d/fold2").glob(".train-partial-*/checkpoint.pt"),
                None,
            ),
            job,
        )
        # Ctrl-C in a terminal signals the whole foreground process group. (SIGINT to the
        # snakemake process alone makes Snakemake 9 wait for running jobs to finish.)
        os.killpg(job.pid, signal.SIGINT)
        assert job.wait() != 0
    finally:
        docker_project.kill(job)
    assert ours() == []
    assert not (docker_project.root / "work/unet2d/fold2/train").exists()


def test_changed_package_source_rebuilds_the_image_and_reruns_its_stages(
    docker_project: Project,
) -> None:
    module = docker_project.root / "workflow/accelpipe/traces/summary.py"
    original, stat = module.read_text(), module.stat()
    try:
        module.write_text(original + "\n# a comment\n")
        assert docker_project.planned_jobs(TARGET) == {}  # the same code, the same image
        module.write_text(original + "\n_ACCELPIPE_TEST_EDIT = 1\n")
        jobs = docker_project.planned_jobs(TARGET)
    finally:
        module.write_text(original)
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # a new image tag: the stages that ran in the old image run again in the new one, but
    # the data stages, whose outputs do not depend on where they run
    assert set(jobs) == {
        "train",
        "evaluate",
        "summarize_trace",
        "publish_run",
    }
    assert docker_project.planned_jobs(TARGET) == {}


def test_stage_error_inside_the_container_is_one_clear_line(
    docker_project: Project, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-dataset"
    override = "datasets=" + json.dumps({"brats": {"source": f"path:{missing}"}})
    proc = docker_project.snakemake(TARGET, "--config", override, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"in container: accelpipe raw: {missing}" in output, output
    assert "Traceback" not in output
