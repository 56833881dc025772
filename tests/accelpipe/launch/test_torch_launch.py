"""One training job over several processes: launch commands, data shards, `accelpipe train`.

The Trainer's own 2-process runs (loss trajectory, resume across world sizes) are in
engines/test_torch_trainer.py; here the workload runs end to end through the CLI and torchrun.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from accelpipe import cli
from accelpipe.config.schema import validate
from accelpipe.core.errors import ConfigError, DataError
from accelpipe.devices.torch_device import resolve
from accelpipe.inputs.slices import SliceBatches
from accelpipe.launch import lifeline
from accelpipe.launch.torch_launch import DistContext, backend_for, init_from_env, launch_command
from accelpipe.launch.workers import check_global_batch
from tests.helpers.brats_data import tiny_prepared

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[3]
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID")
SLURM_ENV = (
    *("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_CPUS_PER_TASK"),
    *("SLURM_STEP_ID", "SLURM_NNODES", "SLURM_NODELIST"),
)


@pytest.fixture(autouse=True)
def _no_launcher_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start outside torchrun and Slurm, whatever runs the test suite."""
    for name in (*TORCHRUN_ENV, *SLURM_ENV, "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)


# -- process group -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "backend"), [("cpu", "gloo"), ("cuda", "nccl"), ("rocm", "nccl"), ("gaudi", "hccl")]
)
def test_each_device_family_has_its_collective_backend(device: str, backend: str) -> None:
    assert backend_for(device) == backend


def test_without_torchrun_a_process_is_a_world_of_one() -> None:
    ctx = init_from_env(resolve("cpu"))
    assert ctx == DistContext() and ctx.is_main and ctx.world_size == 1
    assert not torch.distributed.is_initialized()  # no process group to pay for
    loss = torch.tensor(0.25)
    assert ctx.all_reduce_mean(loss) is loss
    ctx.barrier()
    ctx.destroy()


def test_the_global_batch_must_split_evenly() -> None:
    assert check_global_batch(8, 2) == 4
    with pytest.raises(ConfigError, match=r"'ssd.train.batch_size'.*global batch 6.*4"):
        check_global_batch(6, 4, "ssd.train.batch_size")


# -- launch commands -----------------------------------------------------------------------------

ARGV = ["train", "--workload", "unet2d", "--run", "fold0"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def test_local_launch_is_torchrun_standalone_with_one_process_per_device() -> None:
    assert launch_command(4, 1, ARGV, under_slurm=False) == [
        *TORCHRUN,
        "--standalone",
        "--nproc-per-node=4",
        "-m",
        "--",
        "accelpipe",
        *ARGV,
    ]


def test_torchrun_hands_the_stage_argv_over_untouched() -> None:
    from torch.distributed.run import parse_args

    # `--run` abbreviates torchrun's `--run-path`: without the "--" torchrun would refuse it.
    args = parse_args(launch_command(2, 1, ARGV, under_slurm=False)[3:])
    assert args.module and args.training_script == "accelpipe"
    assert args.training_script_args == ARGV


def test_one_process_needs_no_launcher() -> None:
    assert launch_command(1, 1, ARGV, under_slurm=False) == [
        sys.executable,
        "-m",
        "accelpipe",
        *ARGV,
    ]
    assert launch_command(1, 1, ARGV, under_slurm=True)[0] == sys.executable


def test_several_nodes_without_slurm_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"'unet2d.train.nodes'.*Slurm"):
        launch_command(2, 2, ARGV, under_slurm=False)


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Slurm job of 2 nodes with a fake `scontrol` on PATH; returns the file its args go to."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol-args"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(
        '#!/bin/sh\n[ "$2" = job ] && echo "JobId=4242 NodeList=gpu[017-018] NumNodes=2" && exit\n'
        f'echo "$@" > {calls}\nprintf "gpu017\\ngpu018\\n"\n'
    )
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[017-018]")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    return calls


def test_slurm_launch_is_one_torchrun_per_node_meeting_at_the_first_node(slurm: Path) -> None:
    assert launch_command(4, 2, ARGV, under_slurm=True, port=29511) == [
        "srun",
        "--ntasks-per-node=1",
        "--nodes=2",
        "--kill-on-bad-exit=1",
        "--ntasks=2",
        *TORCHRUN,
        "--nnodes=2",
        "--nproc-per-node=4",
        "--rdzv-id=4242",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=gpu017:29511",
        "-m",
        "--",
        "accelpipe",
        *ARGV,
    ]
    assert slurm.read_text().split() == ["show", "hostnames", "gpu[017-018]"]


def test_slurm_launch_passes_cpus_per_task_and_master_port(
    slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "16")
    monkeypatch.setenv("MASTER_PORT", "29600")
    cmd = launch_command(2, 1, ARGV, under_slurm=True)
    assert cmd[:5] == [
        *("srun", "--ntasks-per-node=1", "--nodes=1", "--kill-on-bad-exit=1"),
        "--cpus-per-task=16",
    ]
    assert "--rdzv-endpoint=gpu017:29600" in cmd and "--nnodes=1" in cmd


def test_slurm_launch_inside_a_job_step_overlaps_it(
    slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_STEP_ID", "0")  # e.g. Snakemake's executor: `srun -n1 ...`
    # ...whose variables are its one node's (a second node's step would name only that one);
    # the job's two nodes, and its first, come from the controller
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu018")
    monkeypatch.setenv("SLURM_NNODES", "1")
    monkeypatch.delenv("SLURM_JOB_NUM_NODES")
    cmd = launch_command(2, 2, ARGV, under_slurm=True, port=29511)
    assert cmd[:5] == [
        *("srun", "--ntasks-per-node=1", "--nodes=2", "--kill-on-bad-exit=1"),
        "--overlap",
    ]
    assert "--rdzv-endpoint=gpu017:29511" in cmd


def test_slurm_launch_without_a_port_picks_a_free_one(slurm: Path) -> None:
    endpoint = next(a for a in launch_command(2, 2, ARGV, True) if a.startswith("--rdzv-endpoint"))
    host, port = endpoint.split("=", 1)[1].split(":")
    assert host == "gpu017" and 0 < int(port) < 65536


def test_more_nodes_than_the_allocation_is_a_config_error(slurm: Path) -> None:
    with pytest.raises(ConfigError, match=r"3 nodes, but Slurm job 4242 has 2"):
        launch_command(1, 3, ARGV, under_slurm=True)


@pytest.mark.parametrize(("nodes", "under_slurm"), [(2, False), (3, True)])
def test_a_refusal_names_the_key_of_the_workload_that_asked(
    slurm: Path, nodes: int, under_slurm: bool
) -> None:
    """Without Slurm, or with fewer nodes than asked, the error names the launching workload's
    own key (every PyTorch workload's said `unet2d.train.nodes`)."""
    argv = ["train", "--workload", "resnet50", "--run", "bf16"]
    with pytest.raises(ConfigError, match=r"^config key 'resnet50\.train\.nodes': "):
        launch_command(1, nodes, argv, under_slurm=under_slurm)


# -- data shards ---------------------------------------------------------------------------------

CASES = ["BRATS_001", "BRATS_002", "BRATS_003", "BRATS_004", "BRATS_005"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_prepared(tmp_path_factory.mktemp("distributed"))


def _epoch(prepared: Path, world: int, rank: int, workers: int, augment: bool = False) -> list:
    ds = SliceBatches(
        prepared,
        CASES,
        batch_size=8,
        steps=6,
        augment=augment,
        seed=7,
        rank=rank,
        world_size=world,
    )
    return list(DataLoader(ds, batch_size=None, num_workers=workers))


@pytest.mark.parametrize("workers", [0, 2])
def test_rank_shards_of_a_step_are_the_one_process_batch_split(
    prepared: Path, workers: int
) -> None:
    whole = _epoch(prepared, 1, 0, workers)
    shards = [_epoch(prepared, 2, rank, workers) for rank in range(2)]
    for step, (image, label) in enumerate(whole):
        halves = [shard[step] for shard in shards]
        assert all(h[0].shape == (4, 4, 32, 32) and h[1].shape == (4, 1, 32, 32) for h in halves)
        assert torch.equal(torch.cat([h[0] for h in halves]), image)
        assert torch.equal(torch.cat([h[1] for h in halves]), label)


def test_augmented_shards_keep_the_global_block(prepared: Path) -> None:
    shards = [_epoch(prepared, 2, rank, 0, augment=True) for rank in range(2)]
    assert all(image.shape == (4, 4, 32, 32) for shard in shards for image, _ in shard)
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(shards[0], shards[1], strict=True))


def test_a_batch_that_does_not_split_over_the_ranks_is_refused(prepared: Path) -> None:
    with pytest.raises(DataError, match="world_size 3"):
        SliceBatches(prepared, CASES, batch_size=8, steps=1, rank=0, world_size=3)


# -- the unet2d workload through `accelpipe train` -----------------------------------------------


def _train_slice(**train: object) -> str:
    """The config slice the train rule passes, for TINY_CONFIG (tests/workflow/project.py)."""
    cfg = validate(
        {
            "performance": {"warmup_steps": 0},  # the profiler may record from step 1
            "unet2d": {
                "model": {"filters": [8, 16, 32], "strides": [1, 2, 2], "deep_supr_num": 1},
                "train": {"epochs": 2, "steps_per_epoch": 3, "batch_size": 4, **train},
                "profile": {"schedule": {"wait": 0, "warmup": 1, "active": 2, "repeat": 1}},
            },
        }
    )
    block = cfg["unet2d"]
    return json.dumps({"backend": "cpu", **{k: block[k] for k in ("model", "train", "profile")}})


def _accelpipe_train(prepared: Path, out: Path, cfg: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    cmd = [
        *(sys.executable, "-m", "accelpipe", "--log", str(out.parent / "train.log"), "train"),
        *("--workload", "unet2d", "--run", "fold0", "--prepared", str(prepared)),
        *("--config-json", cfg, "--out", str(out), "--threads", "2"),
    ]
    return subprocess.run(cmd, env=env, text=True, capture_output=True)


def test_unet2d_trains_on_two_processes_through_the_cli(prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "train"
    proc = _accelpipe_train(prepared, out, _train_slice(devices=2, loader_workers=1))
    assert proc.returncode == 0, proc.stderr

    stage = json.loads((out / "stage.json").read_text())
    assert stage["world_size"] == 2 and stage["global_batch"] == 4 and stage["steps"] == 6
    model = torch.load(out / "model.pt", weights_only=False)
    assert not any(k.startswith("module.") for k in model["state_dict"])  # the bare model
    with (out / "train_log.csv").open() as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == list(range(1, 7))  # rank 0 only
    assert len(list((out / "traces").glob("*.json.gz"))) == 1
    assert not (out / "checkpoint.pt").exists()
    # The partial work dir was renamed onto the output.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train", "train.log"]
    log = (tmp_path / "train.log").read_text()
    assert "training on 2 processes" in log and "epoch 2/2" in log  # the ranks' output, relayed


@pytest.mark.main_suite_only
def test_failing_training_processes_fail_the_stage(tmp_path: Path) -> None:
    out = tmp_path / "train"
    proc = _accelpipe_train(tmp_path / "missing", out, _train_slice(devices=2))
    assert proc.returncode != 0
    assert "training processes failed" in proc.stderr
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.log"]  # no .train-partial-*


def test_a_global_batch_that_does_not_split_fails_before_launching(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        *("train", "--workload", "unet2d", "--run", "fold0", "--prepared", str(prepared)),
        *("--config-json", _train_slice(devices=2, batch_size=5), "--out", str(tmp_path / "o")),
    ]
    assert cli.main(argv) == 2
    assert "'unet2d.train.batch_size'" in capsys.readouterr().err


# -- a launcher killed outright ---------------------------------------------------------------

DEADLINE_S = 300.0  # generous: the machine may be busy; nothing here is about speed


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` now."""
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and pid in lifeline.ancestors(int(p.name))
    ]


def _running(pid: int) -> bool:
    """It exists and is not a zombie (a reparented process whose reaper never reaps)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _poll(condition: Callable[[], object], what: str) -> object:
    deadline = time.monotonic() + DEADLINE_S
    while not (found := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S:.0f} s: {what}")
        time.sleep(0.1)
    return found


@pytest.mark.main_suite_only
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc and prctl")
def test_a_launcher_killed_outright_takes_its_ranks_and_leaves_no_output(
    prepared: Path, tmp_path: Path
) -> None:
    """SIGKILL of `accelpipe train` (2 processes) once the ranks have written a checkpoint:
    torchrun and the ranks end too, nothing appears at --out (they used to train on and rename
    their folder onto it after the job was reported failed), and the rerun resumes."""
    out = tmp_path / "train"
    cfg = _train_slice(devices=2, epochs=20)
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    cmd = [
        *(sys.executable, "-m", "accelpipe", "--log", str(tmp_path / "train.log"), "train"),
        *("--workload", "unet2d", "--run", "fold0", "--prepared", str(prepared)),
        *("--config-json", cfg, "--out", str(out), "--threads", "2"),
    ]
    launcher = subprocess.Popen(cmd, env=env)
    try:
        _poll(
            lambda: launcher.poll() is not None or next(tmp_path.glob(".*/checkpoint.pt"), None),
            "a checkpoint of the ranks",
        )
        assert launcher.poll() is None, (tmp_path / "train.log").read_text()
        below = _descendants(launcher.pid)  # torchrun and the two ranks
        assert len(below) >= 3
    finally:
        launcher.kill()
        launcher.wait()
    _poll(lambda: not any(_running(pid) for pid in below), f"the ranks {below} ended")
    assert not list(tmp_path.glob(".*/stage.json"))  # ended with the launcher, not trained out
    assert not out.exists()  # and nothing is left that could still make it appear

    again = _accelpipe_train(prepared, out, cfg)
    assert again.returncode == 0, again.stderr
    stage = json.loads((out / "stage.json").read_text())
    assert stage["resumed_from_step"] > 0 and stage["steps"] == 20 * 3
    assert [a["status"] for a in stage["attempts"]] == ["interrupted", "finished"]
    with (out / "train_log.csv").open() as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == list(range(1, 61))
