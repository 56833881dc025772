"""Slurm's rules both launchers share: the config key a refusal names, the srun step's
CPUs per task, Slurm's per-node counts, and the watch that names a node lost mid-step."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelpipe.core.errors import AccelpipeError, ConfigError
from accelpipe.launch.slurm import (
    StepWatch,
    config_key,
    largest_partition,
    require_slurm,
    slurm_counts,
    srun_command,
    srun_env,
    step_watch,
    unresponsive_nodes,
)


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["train", "--workload", "segmenter", "--run", "r"], "segmenter.train.nodes"),
        (["train", "--run", "r"], "train.nodes"),  # no workload named: the bare key
        (["train", "--workload"], "train.nodes"),  # the flag without its value
    ],
)
def test_the_key_is_the_launching_workloads(argv: list[str], key: str) -> None:
    assert config_key(argv, "nodes") == key


def test_several_nodes_outside_slurm_name_the_key_given() -> None:
    require_slurm(1, False, "swinunetr.train.nodes")  # one node needs no allocation
    with pytest.raises(ConfigError, match=r"^config key 'swinunetr\.train\.nodes': 2 nodes"):
        require_slurm(2, False, "swinunetr.train.nodes")


def test_a_step_shares_the_job_cpus_over_its_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_STEP_ID", "SLURM_JOB_CPUS_PER_NODE", "SLURM_NNODES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    cmd = srun_command(2, 4, "ssd.train.nodes")
    assert cmd == [
        *("srun", "--ntasks-per-node=4", "--nodes=2", "--kill-on-bad-exit=1"),
        "--cpus-per-task=1",
        *("--overcommit", "--ntasks=8"),
    ]
    with pytest.raises(ConfigError, match=r"'ssd\.train\.nodes': 3 nodes, but Slurm job"):
        srun_command(3, 1, "ssd.train.nodes")


def test_slurm_counts_expand_and_a_bad_one_names_the_variable() -> None:
    assert slurm_counts("SLURM_JOB_CPUS_PER_NODE", "2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(AccelpipeError, match=r"SLURM_JOB_CPUS_PER_NODE='2x3'"):
        slurm_counts("SLURM_JOB_CPUS_PER_NODE", "2x3")


def test_the_launchers_srun_gets_the_jobs_identity_and_no_step_variable() -> None:
    step = {
        "SLURM_JOB_ID": "4242", "SLURM_CONF": "/etc/slurm/site.conf", "SLURM_NNODES": "1",
        "SLURM_JOB_NODELIST": "gpu017", "SLURM_NTASKS": "1", "SLURM_STEP_ID": "0",
        "SRUN_CPUS_PER_TASK": "4", "SBATCH_PARTITION": "gpu", "PATH": "/usr/bin",
    }  # fmt: skip
    assert srun_env(step) == {
        "SLURM_JOB_ID": "4242", "SLURM_CONF": "/etc/slurm/site.conf", "PATH": "/usr/bin",
    }  # fmt: skip


def _fake_sinfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: str, then: str = "exit 0"
) -> Path:
    """An sinfo on PATH that records its arguments in `args`, prints `lines`, then runs
    `then`."""
    sinfo = tmp_path / "sinfo"
    sinfo.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/args"\nprintf "{lines}"\n{then}\n')
    sinfo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "args"


def test_the_largest_partition_counts_its_nodes_in_every_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sinfo -o "%R %D": a line per partition and node state
    _fake_sinfo(tmp_path, monkeypatch, "debug 1\\ntwo 1\\ntwo 1\\ngpu 1\\n")
    largest_partition.cache_clear()
    assert largest_partition() == 2
    largest_partition.cache_clear()  # asked once per process
    _fake_sinfo(
        tmp_path, monkeypatch, "", "echo 'slurm_load_partitions: Unable to contact' >&2; exit 1"
    )
    assert largest_partition() is None  # no answer: no check
    largest_partition.cache_clear()


def test_the_watch_asks_slurm_only_once_a_task_failed_and_names_the_lost_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sinfo -N -o "%N %T": a line per node (and partition); `*`: not responding
    args = _fake_sinfo(tmp_path, monkeypatch, "gpu017 allocated\\ngpu018 allocated*\\n")
    watch = StepWatch("4242", "gpu[017-018]")
    watch.saw("epoch 3/12: mean logged loss 2.06")
    watch.saw("srun: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1")
    assert watch.lost() is None and not args.exists()  # healthy: Slurm is not asked
    watch.saw("srun: error: gpu017: task 0: Exited with exit code 1")
    assert watch.lost() == (
        "Slurm job 4242 lost node gpu018 (Slurm state allocated*) during training: the tasks "
        "on gpu017 failed and the step was stopped; a re-run resumes from the last checkpoint"
    )
    assert args.read_text().split() == ["-h", "-N", "-n", "gpu[017-018]", "-o", "%N", "%T"]


@pytest.mark.parametrize(
    ("lines", "lost"),
    [
        ("n1 mixed\\nn2 mixed\\n", {}),  # a failed rank on healthy nodes: srun ends the step
        ("n1 mixed\\nn2 down*\\n", {"n2": "down*"}),
        ("n1 fail\\nn2 idle\\n", {"n1": "fail"}),
        ("n1 drained\\nn2 completing\\n", {}),  # drained: no new jobs; running ones go on
    ],
)
def test_nodes_slurm_stopped_hearing_from_or_gave_up_on_are_unresponsive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: str, lost: dict[str, str]
) -> None:
    _fake_sinfo(tmp_path, monkeypatch, lines)
    assert unresponsive_nodes("n[1-2]") == lost


def test_a_controller_that_does_not_answer_names_no_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_sinfo(tmp_path, monkeypatch, "", "echo 'slurm_load_node: Unable to contact' >&2; exit 1")
    watch = StepWatch("7", "n[1-2]")
    watch.saw("srun: error: n1: tasks 0-3: Killed")
    assert watch.lost() is None


def test_one_node_needs_no_watch() -> None:
    assert step_watch(1) is None
