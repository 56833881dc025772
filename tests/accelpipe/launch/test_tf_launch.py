"""The TensorFlow launcher's Slurm side: the srun step it builds, each task's TF_CONFIG from
the step's variables, and the refusal of several nodes outside Slurm.

No TensorFlow here: the launcher and the per-task wrapper do not import it. Two real workers
training on one node are in test_tf_trainer.py, and through a real srun in
tests/integration/test_tf_slurm.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelpipe.config.settings import TFTrain
from accelpipe.core.errors import AccelpipeError, ConfigError
from accelpipe.launch import lifeline, tf_launch
from accelpipe.launch.tf_launch import PORTS_ENV, cluster, slurm_command, slurm_worker_env
from tests.helpers.settings import tf_train

REPO = Path(__file__).resolve().parents[3]
WORKER = ["python", "-m", "accelpipe", "train", "--workload", "ssd"]
WRAPPER = [sys.executable, "-m", "accelpipe.launch.tf_launch"]
SLURM_ENV = (
    *("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
    *("SLURM_CPUS_PER_TASK", "SLURM_JOB_CPUS_PER_NODE", "SLURM_STEP_ID", "SLURM_NTASKS"),
    *("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"),
    *("SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS"),
)


@pytest.fixture(autouse=True)
def _no_launcher_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start outside any launch and Slurm, whatever runs the test suite."""
    for name in (*SLURM_ENV, "TF_CONFIG", PORTS_ENV, "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A Slurm job of 2 nodes with a fake `scontrol` on PATH; returns the environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    # expands the node lists these tests use, as the real one does
    scontrol.write_text(
        '#!/bin/sh\n[ "$2" = job ] && echo "JobId=4242 NodeList=gpu[017-018] NumNodes=2" && exit\n'
        'case "$3" in\n'
        '  "gpu[017-018]") printf "gpu017\\ngpu018\\n" ;;\n'
        '  "node[2,10]") printf "node2\\nnode10\\n" ;;\n'
        '  *) echo "scontrol: bad hostlist $3" >&2; exit 1 ;;\nesac\n'
    )
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[017-018]")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    return os.environ


# -- the srun step ------------------------------------------------------------------------------


def test_the_step_is_devices_tasks_per_node_block_distributed_through_the_wrapper(
    job: dict[str, str],
) -> None:
    assert slurm_command(4, 2, WORKER, "ssd.train.nodes") == [
        "srun",
        "--ntasks-per-node=4",
        "--nodes=2",
        "--kill-on-bad-exit=1",
        "--ntasks=8",
        "--distribution=block",
        *WRAPPER,
        *WORKER,
    ]


def test_inside_a_job_step_the_step_overlaps_it_and_splits_the_cpus_of_a_job_task(
    job: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_STEP_ID", "0")  # Snakemake's executor: `srun -n1 ...`
    # ...whose variables are its one node's; the job's two come from the controller
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu017")
    monkeypatch.setenv("SLURM_NNODES", "1")
    monkeypatch.delenv("SLURM_JOB_NUM_NODES")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "16")  # the train job: threads CPUs per node
    cmd = slurm_command(4, 2, WORKER, "ssd.train.nodes")
    assert cmd[:4] == ["srun", "--ntasks-per-node=4", "--nodes=2", "--kill-on-bad-exit=1"]
    assert cmd[4:6] == ["--overlap", "--cpus-per-task=4"]
    assert "--overcommit" not in cmd


def test_a_node_with_fewer_cpus_than_workers_overcommits_them(
    job: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    cmd = slurm_command(2, 1, WORKER, "ssd.train.nodes")
    assert "--cpus-per-task=1" in cmd and "--overcommit" in cmd
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")  # e.g. `salloc -N2 -n3`: CPUs per node only
    monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "2,1")
    cmd = slurm_command(2, 2, WORKER, "ssd.train.nodes")
    assert "--overcommit" in cmd and not any(a.startswith("--cpus-per-task") for a in cmd)
    monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "2(x2)")
    assert "--overcommit" not in slurm_command(2, 2, WORKER, "ssd.train.nodes")


def test_more_nodes_than_the_allocation_is_a_config_error_naming_the_key(
    job: dict[str, str],
) -> None:
    with pytest.raises(ConfigError, match=r"^config key 'ssd.train.nodes': 3 nodes, but Slurm"):
        slurm_command(1, 3, WORKER, "ssd.train.nodes")


def _cfg(devices: int, nodes: int) -> TFTrain:
    return tf_train(devices=devices, nodes=nodes, batch_size=4)


def test_under_slurm_the_launch_runs_the_step_with_the_ports_and_thread_share(
    job: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One node too: under Slurm every multi-worker launch is an srun step."""
    ran = []
    monkeypatch.setattr(
        tf_launch, "run_workers", lambda cmd, env, watch=None: ran.append((cmd, env))
    )
    argv = ["train", "--workload", "ssd", "--run", "r0"]
    tf_launch.launch_training(_cfg(2, 1), argv, threads=8)
    ((cmd, env),) = ran
    assert cmd[:3] == ["srun", "--ntasks-per-node=2", "--nodes=1"]
    worker = [sys.executable, "-m", "accelpipe", *argv]  # tf_launch.worker_command
    assert cmd[-len(worker) - len(WRAPPER) :] == [*WRAPPER, *worker]
    ports = [int(p) for p in env[PORTS_ENV].split(",")]
    assert len(ports) == 2 and len(set(ports)) == 2
    assert env["OMP_NUM_THREADS"] == "4"


def test_a_failed_step_fails_the_stage_with_its_status(
    job: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tf_launch, "run_workers", lambda cmd, env, watch=None: 3)
    with pytest.raises(SystemExit) as exc:
        tf_launch.launch_training(_cfg(2, 2), ["train"], threads=2)
    assert exc.value.code == 3


def test_several_nodes_outside_slurm_is_a_one_line_config_error_naming_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(ConfigError) as exc:
        tf_launch.launch_training(_cfg(2, 2), ["train", "--workload", "ssd"], threads=2)
    message = str(exc.value)
    assert message.startswith("config key 'ssd.train.nodes': 2 nodes need a Slurm allocation")
    assert "\n" not in message
    assert not started


# -- each task's TF_CONFIG ----------------------------------------------------------------------


def _task(rank: int, local: int, node: int, **step: str) -> dict[str, str]:
    """The variables srun gives task `rank` of the launcher's step (2 nodes x 2 tasks)."""
    return {
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(local),
        "SLURM_NODEID": str(node),
        "SLURM_STEP_NODELIST": "gpu[017-018]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_NUM_TASKS": "4",
        PORTS_ENV: "41000,41001",
        **step,
    }


def test_every_task_of_the_step_gets_the_same_cluster_and_its_own_index_and_device(
    job: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = ["gpu017:41000", "gpu017:41001", "gpu018:41000", "gpu018:41001"]
    for rank in range(4):
        node, local = divmod(rank, 2)
        env = slurm_worker_env(_task(rank, local, node, CUDA_VISIBLE_DEVICES="4,5"))
        config = json.loads(env["TF_CONFIG"])
        assert config == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
        assert env["CUDA_VISIBLE_DEVICES"] == "45"[local]  # the lease's device of its index
        monkeypatch.setenv("TF_CONFIG", env["TF_CONFIG"])
        assert cluster() == (rank, 4)  # what the trainer reads; worker 0 is the chief


def test_ranks_follow_slurms_node_order_not_sorted_names(job: dict[str, str]) -> None:
    """SlurmClusterResolver sorts host names, putting node10's tasks first: not here."""
    env = slurm_worker_env(_task(0, 0, 0, SLURM_STEP_NODELIST="node[2,10]"))
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == [
        "node2:41000",
        "node2:41001",
        "node10:41000",
        "node10:41001",
    ]


def test_uneven_tasks_per_node_fill_the_nodes_in_order(job: dict[str, str]) -> None:
    env = slurm_worker_env(_task(2, 0, 1, SLURM_STEP_TASKS_PER_NODE="2,1"))
    config = json.loads(env["TF_CONFIG"])
    assert config["cluster"]["worker"] == ["gpu017:41000", "gpu017:41001", "gpu018:41000"]
    assert config["task"]["index"] == 2


def test_a_task_placed_other_than_by_block_distribution_is_refused(job: dict[str, str]) -> None:
    with pytest.raises(AccelpipeError, match="not the block distribution"):
        slurm_worker_env(_task(1, 0, 1))  # cyclic: rank 1 first on the second node


def test_a_task_outside_the_launch_is_told_what_is_missing(job: dict[str, str]) -> None:
    env = _task(0, 0, 0)
    del env[PORTS_ENV]
    with pytest.raises(AccelpipeError, match=f"{PORTS_ENV} is not set"):
        slurm_worker_env(env)


PRINT_CONFIG = (
    "import os; print(os.environ['TF_CONFIG']); print(os.environ['CUDA_VISIBLE_DEVICES'])"
)


def test_the_wrapper_execs_the_worker_with_its_tf_config(job: dict[str, str]) -> None:
    env = {
        **os.environ,
        **_task(3, 1, 1, CUDA_VISIBLE_DEVICES="0,1"),
        "PYTHONPATH": f"{REPO / 'workflow'}",
    }
    proc = subprocess.run(
        [*WRAPPER, sys.executable, "-c", PRINT_CONFIG],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    config, device = proc.stdout.splitlines()
    assert json.loads(config)["task"] == {"type": "worker", "index": 3}
    assert device == "1"


def test_the_wrapper_outside_a_step_fails_with_one_line(job: dict[str, str]) -> None:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'workflow'}"}
    proc = subprocess.run(
        [*WRAPPER, sys.executable, "-c", "print('ran')"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip().splitlines() == [
        "accelpipe TensorFlow worker: SLURM_PROCID is not set: a TensorFlow worker task must be "
        "started by the Slurm launch of accelpipe.launch.tf_launch"
    ]


# -- the local launch ---------------------------------------------------------------------------


def test_the_first_worker_to_fail_is_reported_while_an_earlier_one_still_runs() -> None:
    """Worker 0 (a chief stuck in a collective) never ends; worker 1 fails with status 3."""
    stuck = subprocess.Popen(["sleep", "600"])
    failing = subprocess.Popen(["sh", "-c", "exit 3"])
    try:
        assert tf_launch._first_failure([stuck, failing], poll_s=0.01) == 3
        assert stuck.poll() is None  # still running: the launcher terminates it next
    finally:
        stuck.kill()
        stuck.wait()


def test_all_workers_succeeding_is_status_0() -> None:
    procs = [subprocess.Popen(["true"]), subprocess.Popen(["sh", "-c", "sleep 0.1"])]
    assert tf_launch._first_failure(procs, poll_s=0.01) == 0
    assert [p.returncode for p in procs] == [0, 0]


def test_local_workers_die_with_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker asks for the parent-death signal and is told whom to watch
    (launch.lifeline, tested with real processes in test_lifeline.py)."""
    started: list[dict] = []

    class Finished:
        def __init__(self, cmd: list[str], **kwargs: object) -> None:
            started.append(kwargs)

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", Finished)
    tf_launch.launch_training(_cfg(2, 1), ["train", "--workload", "ssd"], threads=2)
    assert len(started) == 2
    for kwargs in started:
        assert kwargs["preexec_fn"] is not None
        assert kwargs["env"][lifeline.LAUNCHER_PID_ENV] == str(os.getpid())


def test_slurm_tasks_are_slurms_to_end_and_watch_no_launcher(
    job: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's ancestors are Slurm's, not the launcher: it must not look for it there."""
    ran = []
    monkeypatch.setattr(tf_launch, "run_workers", lambda cmd, env, watch=None: ran.append(env) or 0)
    tf_launch.launch_training(_cfg(2, 1), ["train", "--workload", "ssd"], threads=2)
    assert lifeline.LAUNCHER_PID_ENV not in ran[0]
