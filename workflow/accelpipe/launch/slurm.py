"""Slurm's rules for a training job's launch, the same for both frameworks' launchers
(launch.torch_launch: one torchrun per node; launch.tf_launch: one TF worker per task): the
job must have the nodes the config asks, a step inside a job step overlaps it, each task
gets its share of the job's CPUs, one failed task ends the step on every node, the node list
is expanded by `scontrol`, and a node lost mid-step is named (`StepWatch`).

A refusal names the config key of the workload whose launch asked (`config_key`).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess

from accelpipe.core.errors import AccelpipeError, ConfigError


def config_key(stage_argv: list[str], name: str) -> str:
    """`<workload>.train.<name>`, the workload read from the stage's --workload."""
    if "--workload" in stage_argv[:-1]:
        return f"{stage_argv[stage_argv.index('--workload') + 1]}.train.{name}"
    return f"train.{name}"


def require_slurm(nodes: int, under_slurm: bool, key: str) -> None:
    """Several nodes need a Slurm allocation: a ConfigError of one line naming `key` if not."""
    if nodes > 1 and not under_slurm:
        raise ConfigError(
            f"config key '{key}': {nodes} nodes need a Slurm allocation "
            "(SLURM_JOB_ID is not set); run the workflow inside one, e.g. with salloc"
        )


def srun_command(nodes: int, tasks_per_node: int, key: str) -> list[str]:
    """`srun` starting `tasks_per_node` tasks on each of `nodes` nodes of this Slurm job.

    The rules both engines' launches share: the job must have the nodes (else a ConfigError
    naming `key`); inside a job step the new step overlaps it; the CPUs a job task has
    (SLURM_CPUS_PER_TASK: the workflow's train job is one task per node with `threads` CPUs)
    are split over the node's tasks, and a node with fewer CPUs than tasks overcommits them.
    """
    allocated, _ = job_allocation()
    if allocated is not None and allocated < nodes:
        raise ConfigError(
            f"config key '{key}': {nodes} nodes, but Slurm job "
            f"{os.environ.get('SLURM_JOB_ID')} has {allocated}"
        )
    # --kill-on-bad-exit: one failed task ends the step everywhere; without it the ranks on
    # the other nodes would wait in a collective until its timeout (30 min for gloo and NCCL).
    cmd = [
        "srun",
        f"--ntasks-per-node={tasks_per_node}",
        f"--nodes={nodes}",
        "--kill-on-bad-exit=1",
    ]
    # Inside a job step already (Snakemake's Slurm executor runs each job in `srun -n1`), a new
    # step would wait forever for the CPUs that step holds unless it may overlap it.
    if "SLURM_STEP_ID" in os.environ:
        cmd.append("--overlap")
    # Since Slurm 22.05 a step does not inherit the job's --cpus-per-task, but srun reads
    # SLURM_CPUS_PER_TASK from the environment as if it were given: pass each task its share
    # explicitly, or a node's torchrun (and every rank it starts) is pinned to one core, or a
    # step of several tasks per node asks for more CPUs than the job has.
    cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    if cpus:
        cmd.append(f"--cpus-per-task={max(1, int(cpus) // tasks_per_node)}")
    # Fewer CPUs than tasks: srun refuses the step ("More processors requested than
    # permitted") unless told to run several tasks on a CPU, as a local launch would.
    job_cpus = os.environ.get("SLURM_JOB_CPUS_PER_NODE")
    if cpus:
        node_cpus = int(cpus)
    elif job_cpus:
        node_cpus = min(slurm_counts("SLURM_JOB_CPUS_PER_NODE", job_cpus))
    else:
        node_cpus = tasks_per_node
    if node_cpus < tasks_per_node:
        cmd.append("--overcommit")
    # Without it srun takes the job's SLURM_NTASKS: an allocation of more tasks than nodes
    # (salloc -N1 -n2) would start that many launchers per node.
    cmd.append(f"--ntasks={nodes * tasks_per_node}")
    return cmd


def slurm_counts(name: str, spec: str) -> list[int]:
    """A Slurm count per node (SLURM_JOB_CPUS_PER_NODE, SLURM_STEP_TASKS_PER_NODE) expanded:
    `2(x3),1` is [2, 2, 2, 1]; `name` is the variable's, for the error."""
    counts = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if not match:
            raise AccelpipeError(f"{name}={spec!r}: not a Slurm count per node")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def slurm_hostnames(nodelist: str) -> list[str]:
    """A Slurm node list (`gpu[017-018]`) expanded by `scontrol show hostnames`, in order."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise AccelpipeError(f"scontrol show hostnames {nodelist} failed: {err}") from None
    hosts = out.split()
    if not hosts:
        raise AccelpipeError(f"scontrol show hostnames {nodelist} listed no host")
    return hosts


def job_allocation() -> tuple[int | None, str | None]:
    """This Slurm job's node count and node list (None: not given).

    In the batch script (or an salloc shell) the SLURM_* variables are the job's. Inside a
    job step they are the step's: Snakemake's Slurm executor runs every job in `srun -n1`,
    whose variables name one node of a two-node job. There the controller is asked.
    """
    if "SLURM_STEP_ID" not in os.environ:
        count = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES")
        nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
        return (int(count) if count else None), nodelist
    job = os.environ.get("SLURM_JOB_ID", "")
    try:
        out = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", job],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise AccelpipeError(f"scontrol show job {job} failed: {err}") from None
    fields = dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", out))
    if "NumNodes" not in fields or fields.get("NodeList", "(null)") == "(null)":
        raise AccelpipeError(f"scontrol show job {job} gave no node count and list: {out!r}")
    return int(fields["NumNodes"].split("-")[0]), fields["NodeList"]


# Variables that name the job, not the step: a new srun step started with only these takes
# the job's whole allocation, as Snakemake's jobstep executor starts its own.
_JOB_IDENTITY = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CLUSTER_NAME", "SLURM_SUBMIT_DIR",
                 "SLURM_SUBMIT_HOST", "SLURM_CONF")  # fmt: skip


def srun_env(environ: dict[str, str]) -> dict[str, str]:
    """`environ` for the launcher's srun: the step-level SLURM_*, SRUN_* and SBATCH_* variables
    out (inside a one-node step, srun would otherwise read them as its own options and squeeze
    a two-node launch onto that node), the job's identity kept."""
    return {
        name: value
        for name, value in environ.items()
        if name in _JOB_IDENTITY or not name.startswith(("SLURM_", "SRUN_", "SBATCH_"))
    }


def first_node() -> str:
    """The first host of this job's allocation, where the launch's rendezvous listens."""
    nodelist = job_allocation()[1]
    if not nodelist:
        raise AccelpipeError("Slurm job without SLURM_JOB_NODELIST: cannot find its first node")
    return slurm_hostnames(nodelist)[0]


@functools.cache
def largest_partition() -> int | None:
    """Nodes in this Slurm cluster's largest partition (sinfo); None where sinfo cannot say.
    A job asking more nodes fits no partition: sbatch would refuse it without naming the
    config key that asked. Asked once per process: Snakemake plans every train job with it.
    Bounded: sinfo retries an unreachable controller for its MessageTimeout."""
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%R %D"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    per_partition: dict[str, int] = {}
    for line in out.splitlines():  # a line per partition and node state
        name, count = line.split()
        per_partition[name] = per_partition.get(name, 0) + int(count)
    return max(per_partition.values(), default=None)


# srun's report of a task that ended badly, e.g. "srun: error: node7: task 1: Exited with
# exit code 1" or "srun: error: node[3-4]: tasks 0-7: Killed".
_TASK_FAILED = re.compile(r"^srun: error: (\S+): tasks? [\d,\-]+: ")
# sinfo's %T state of a node that cannot finish its share of a step: a trailing `*` is "not
# responding" (a missed ping), the others are states Slurm gives a node it gave up on.
_LOST_STATES = ("down", "fail", "failing", "unknown")


def unresponsive_nodes(nodelist: str) -> dict[str, str]:
    """The nodes of `nodelist` that Slurm reports not responding, down or failed, with their
    sinfo state; {} where sinfo cannot say (a controller that does not answer names no node)."""
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N %T"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    lost = {}
    for line in out.splitlines():  # a line per node and partition
        node, state = line.split()
        if state.endswith("*") or state.rstrip("*~#$@+^-!%") in _LOST_STATES:
            lost[node] = state
    return lost


class StepWatch:
    """Whether a multi-node srun step lost a node, for the launcher that waits on it.

    A node that dies mid-step (crashed, its slurmd and tasks gone) reports nothing: the ranks
    on the other nodes fail in their next collective, srun (--kill-on-bad-exit) reports their
    exit and stops the step, then waits for the dead node to confirm its tasks stopped, until
    Slurm declares it down (SlurmdTimeout, 300 s by default). Once srun has reported a failed
    task (`saw`), `lost` asks Slurm whether a node of the job stopped responding and, if one
    did, says which: the launcher then stops srun instead of waiting. Nothing is asked while
    the step is healthy, so a missed ping on a busy node stops no training.
    """

    def __init__(self, job: str, nodelist: str) -> None:
        self.job, self.nodelist = job, nodelist
        self.failed_on: set[str] = set()  # the nodes srun reported a failed task on

    def saw(self, line: str) -> None:
        """One line of srun's output."""
        if match := _TASK_FAILED.match(line):
            self.failed_on.add(match[1])

    def lost(self) -> str | None:
        """One line naming the node(s) lost while the step fails; None while none is."""
        if not self.failed_on:
            return None
        nodes = unresponsive_nodes(self.nodelist)
        if not nodes:
            return None
        named = ", ".join(f"{node} (Slurm state {state})" for node, state in sorted(nodes.items()))
        return (
            f"Slurm job {self.job} lost node {named} during training: the tasks on "
            f"{', '.join(sorted(self.failed_on))} failed and the step was stopped; "
            "a re-run resumes from the last checkpoint"
        )


def step_watch(nodes: int) -> StepWatch | None:
    """The watch for a launch over `nodes` nodes of this Slurm job; None for one node, where
    srun ends with the node's tasks."""
    if nodes < 2:
        return None
    nodelist = job_allocation()[1]
    if not nodelist:
        raise AccelpipeError("Slurm job without SLURM_JOB_NODELIST: cannot watch its nodes")
    return StepWatch(os.environ.get("SLURM_JOB_ID", "?"), nodelist)
