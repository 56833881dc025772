"""Data-parallel TensorFlow across processes: the launcher and each worker's place in it.

`train.devices` workers on each of `train.nodes` nodes, each rerunning the train stage with a
TF_CONFIG that names the cluster and its own index; in each, TensorFlow's
MultiWorkerMirroredStrategy all-reduces the gradients (gRPC collectives on CPU, NCCL on
GPUs). Each worker reads its own shard of the data (`InputShard`) and feeds its share of
the global batch; worker 0 (the chief) writes the log, the checkpoints and the weights. A
worker keeps the one device of its index on its node from the visibility variables (the
accelerator lease's, or Slurm's) and an even share of the node's threads.

Two launches:

* Outside Slurm: `devices` processes on this node, on free local ports. `train.nodes` > 1
  is a ConfigError naming `<workload>.train.nodes`, as on the PyTorch side.
* Under a Slurm allocation (SLURM_JOB_ID set), whenever there is more than one worker, one
  node or several: one `srun` step of `devices` tasks per node, with the Slurm rules both
  launchers share (`launch.slurm.srun_command`: the job must have the nodes, inside a job
  step the new one overlaps it, the job's CPUs per task are split over a node's tasks, or
  overcommitted where they are fewer, one failed task ends the step, a lost node is named),
  plus block distribution (ranks fill the nodes in order, which TF_CONFIG relies on).
  srun on one node too, like the PyTorch side: then Slurm owns every worker (scancel and the
  time limit reach them, a failure stops the step), and the one-node launch is the multi-node
  one, so a single-node Slurm tests the multi-node path.

Each Slurm task runs this module (`python -m accelpipe.launch.tf_launch <worker
command>`), which derives TF_CONFIG from the step's variables (`slurm_worker_env`) and
execs the worker: the index is SLURM_PROCID, the cluster is SLURM_STEP_NODELIST (expanded by
`scontrol show hostnames`, Slurm's own order) times SLURM_STEP_TASKS_PER_NODE, and task j
of a node listens on the j-th of the ports the launcher picked (free on its node, the batch
script's, i.e. the allocation's first; the other nodes are assumed to have them free too).
tf.distribute's SlurmClusterResolver reads the same variables but does not fit (TF 2.15 to
2.21): it orders the cluster by sorted host name, not Slurm's order (node2 and node10 swap
their ranks: a hang), gives every job the same ports (8888 + local index: two jobs on a
node collide), needs a GPU count (nvidia-smi; none on CPU nodes, where 0 fails) and rewrites
CUDA_VISIBLE_DEVICES itself, over the lease; and importing TensorFlow in the wrapper would
cost every task seconds.

Horovod from PyPI does not build against Keras 3, and Habana's own Horovod ended with its
TensorFlow stack (SynapseAI 1.14): tf.distribute is the one path here. On gaudi the workers
take Habana's HPUStrategy, a MultiWorkerMirroredStrategy over HCCL that reads the same
TF_CONFIG (devices.tf_device.multi_worker_strategy).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from accelpipe.config.settings import TrainSettings
from accelpipe.core.errors import AccelpipeError
from accelpipe.launch import lifeline
from accelpipe.launch.slurm import (
    config_key,
    require_slurm,
    slurm_counts,
    slurm_hostnames,
    srun_command,
    srun_env,
    step_watch,
)
from accelpipe.launch.workers import LAUNCH_ID_ENV, launched_env, reap, run_workers

log = logging.getLogger(__name__)
# The lease's visibility variables: each worker keeps the one device of its index.
_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "HABANA_VISIBLE_MODULES")
# The ports of a Slurm launch, comma-separated: task j of every node listens on the j-th.
PORTS_ENV = "ACCELPIPE_TF_PORTS"


@dataclass(frozen=True)
class InputShard:
    """Which part of the data a worker reads, and its share of the global batch."""

    num_workers: int = 1
    index: int = 0
    batch_size: int = 1  # per worker


def cluster() -> tuple[int, int]:
    """(this worker's index, number of workers) from TF_CONFIG; (0, 1) outside a launch."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return 0, 1
    config = json.loads(raw)
    return int(config["task"]["index"]), len(config["cluster"]["worker"])


def _free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _worker_env(
    environ: Mapping[str, str], index: int, local_index: int, addresses: list[str]
) -> dict[str, str]:
    """`environ` for worker `index` of the cluster `addresses`, the `local_index`-th on its node."""
    env = dict(environ)
    env["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
    )
    for name in _VISIBILITY:
        if env.get(name):
            leased = env[name].split(",")
            env[name] = leased[local_index % len(leased)]
    return env


def worker_command(stage_argv: list[str]) -> list[str]:
    """What each worker runs: this Python's accelpipe with the stage's own arguments."""
    return [sys.executable, "-m", "accelpipe", *stage_argv]


def slurm_command(devices: int, nodes: int, cmd: list[str], key: str) -> list[str]:
    """The srun step running `cmd` as `devices` tasks on each of `nodes` nodes, each task
    through this module (its TF_CONFIG from the step's variables)."""
    return [
        *srun_command(nodes, devices, key),
        "--distribution=block",
        *(sys.executable, "-m", "accelpipe.launch.tf_launch"),
        *cmd,
    ]


def launch_training(cfg: TrainSettings, stage_argv: list[str], threads: int) -> None:
    """Start `devices * nodes` workers running `accelpipe <stage_argv>`; exit with the first
    failure."""
    cmd = worker_command(stage_argv)
    share = str(max(1, threads // cfg.devices))
    if "SLURM_JOB_ID" in os.environ:
        _launch_slurm(cfg, cmd, share, config_key(stage_argv, "nodes"))
        return
    require_slurm(cfg.nodes, False, config_key(stage_argv, "nodes"))
    addresses = [f"127.0.0.1:{p}" for p in _free_ports(cfg.devices)]
    log.info("training on %d TensorFlow workers: %s", cfg.devices, shlex.join(cmd))
    environ = {**os.environ, **launched_env(under_slurm=False), "OMP_NUM_THREADS": share}
    envs = [_worker_env(environ, i, i, addresses) for i in range(cfg.devices)]
    # Killed outright, we take the workers with us (launch.lifeline).
    procs = [subprocess.Popen(cmd, env=env, preexec_fn=lifeline.die_with_parent()) for env in envs]
    try:
        code = _first_failure(procs)
    finally:
        for proc in procs:
            if proc.poll() is None:  # one worker failed: the collectives of the rest would hang
                proc.terminate()
                proc.wait()
        reap(environ[LAUNCH_ID_ENV])  # whatever the workers started
    if code:
        log.error("TensorFlow workers failed (status %d)", code)
        raise SystemExit(code)


def _first_failure(procs: list[subprocess.Popen[bytes]], poll_s: float = 0.2) -> int:
    """The status of the first worker to fail, whichever it is, as soon as it does; 0 once
    all have succeeded. Waiting for them in order would wait on a chief blocked in a
    collective with a dead worker until TF's heartbeats give up on it."""
    running = list(procs)
    while running:
        for proc in list(running):
            status = proc.poll()
            if status is None:
                continue
            if status:
                return status
            running.remove(proc)
        time.sleep(poll_s)
    return 0


def _launch_slurm(cfg: TrainSettings, cmd: list[str], share: str, key: str) -> None:
    srun = slurm_command(cfg.devices, cfg.nodes, cmd, key)
    ports = _free_ports(cfg.devices, host="")  # this node's; the tasks listen on all interfaces
    env = {
        **os.environ,
        **launched_env(under_slurm=True),
        PORTS_ENV: ",".join(map(str, ports)),
        "OMP_NUM_THREADS": share,
    }
    workers = f"{cfg.devices * cfg.nodes} TensorFlow workers ({cfg.devices} per node)"
    log.info("training on %s through srun: %s", workers, shlex.join(srun))
    code = run_workers(srun, srun_env(env), step_watch(cfg.nodes))
    if code:
        raise SystemExit(code)


def slurm_worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` of a task of the launcher's srun step, with its TF_CONFIG and device.

    Worker index = SLURM_PROCID; the cluster lists each node of the step (in Slurm's order)
    once per task on it, with the launcher's ports: the layout srun's block distribution
    gives, which is checked against this task's own node and local index.
    """
    try:
        rank, local = int(environ["SLURM_PROCID"]), int(environ["SLURM_LOCALID"])
        node = int(environ["SLURM_NODEID"])
        nodelist, per_node = environ["SLURM_STEP_NODELIST"], environ["SLURM_STEP_TASKS_PER_NODE"]
        ports = [int(p) for p in environ[PORTS_ENV].split(",")]
    except KeyError as err:
        raise AccelpipeError(
            f"{err.args[0]} is not set: a TensorFlow worker task must be started by the Slurm "
            "launch of accelpipe.launch.tf_launch"
        ) from None
    hosts = slurm_hostnames(nodelist)
    counts = slurm_counts("SLURM_STEP_TASKS_PER_NODE", per_node)
    if len(hosts) != len(counts) or max(counts) > len(ports):
        raise AccelpipeError(
            f"Slurm step of {nodelist} with tasks per node {per_node} does not fit the "
            f"launch ({len(ports)} ports per node)"
        )
    if node >= len(hosts) or sum(counts[:node]) + local != rank:
        raise AccelpipeError(
            f"Slurm task {rank} is task {local} of node {node} of {nodelist} ({per_node}): "
            "not the block distribution the launch asked srun for"
        )
    addresses = [
        f"{host}:{ports[j]}" for host, n in zip(hosts, counts, strict=True) for j in range(n)
    ]
    return _worker_env(environ, rank, local, addresses)


def _exec_worker(argv: list[str]) -> None:
    """A Slurm task: exec the worker command `argv` with this task's TF_CONFIG."""
    try:
        if not argv:
            raise AccelpipeError("no worker command given")
        env = slurm_worker_env(os.environ)
    except AccelpipeError as err:
        print(f"accelpipe TensorFlow worker: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    _exec_worker(sys.argv[1:])
