"""Slurm's rules both launchers share: the config key a refusal names, the srun step's
CPUs per task, and Slurm's per-node counts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelpipe.core.errors import AccelpipeError, ConfigError
from accelpipe.launch.slurm import (
    config_key,
    largest_partition,
    require_slurm,
    slurm_counts,
    srun_command,
    srun_env,
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
        *("srun", "--ntasks-per-node=4", "--nodes=2", "--cpus-per-task=1"),
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


def test_the_largest_partition_counts_its_nodes_in_every_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sinfo -o "%R %D": a line per partition and node state
    sinfo = tmp_path / "sinfo"
    sinfo.write_text('#!/bin/sh\nprintf "debug 1\\ntwo 1\\ntwo 1\\ngpu 1\\n"\n')
    sinfo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    largest_partition.cache_clear()
    assert largest_partition() == 2
    largest_partition.cache_clear()  # asked once per process
    sinfo.write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact' >&2; exit 1\n")
    assert largest_partition() is None  # no answer: no check
    largest_partition.cache_clear()
