"""Process groups for one training job spread over several devices or nodes.

torchrun (`python -m torch.distributed.run`) starts one process per device and tells each its
place through the environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT.
`init_from_env` turns that into a `DistContext`; a process started without torchrun is a world
of one and creates no process group, so single-device runs pay nothing. `launch_command` builds
the torchrun command (wrapped in srun under Slurm) that `accelpipe train` re-executes itself
through when a job asks for more than one process; its Slurm rules (`srun_command`,
`slurm_hostnames`) and `run_workers` serve the TensorFlow launcher too (launch.tf_launch).
torch is imported only where a process group is used, so the launching process stays light.

Typical use in a workload::

    device = devices.resolve(backend, index=torch_launch.local_rank())
    ctx = torch_launch.init_from_env(device)
    try:
        ...  # Trainer(..., dist=ctx); only ctx.is_main writes files
    finally:
        ctx.destroy()
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelpipe.errors import AccelpipeError, BackendUnavailableError, ConfigError
from accelpipe.launch import lifeline

if TYPE_CHECKING:
    import torch

    from accelpipe.devices.torch_device import Device
    from accelpipe.settings import TrainSettings

log = logging.getLogger(__name__)

_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "rocm": "nccl", "gaudi": "hccl"}
# torchrun sets these in every process it starts; their presence means "I am a worker".
WORKER_ENV = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK")


def backend_for(device_backend: str) -> str:
    """The collective-communication library for a device family (RCCL answers to nccl)."""
    try:
        return _BACKENDS[device_backend]
    except KeyError:
        raise ConfigError(f"no process-group backend for device {device_backend!r}") from None


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def local_rank() -> int:
    """This process's index among the processes of its node (0 outside torchrun)."""
    return _env_int("LOCAL_RANK", 0)


def in_worker() -> bool:
    """Whether this process was started by torchrun (so must not launch again)."""
    return any(name in os.environ for name in WORKER_ENV)


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job; the default is the whole job in one process."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes logs, traces, checkpoints and outputs; the others only train."""
        return self.rank == 0

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """Mean of `tensor` over all ranks (a new tensor; `tensor` itself is left alone)."""
        if self.world_size == 1:
            return tensor
        import torch.distributed as dist

        total = tensor.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)  # ReduceOp.AVG is nccl-only
        return total / self.world_size

    def rank0_flag(self, flag: bool, device: torch.device) -> bool:
        """Rank 0's `flag` on every rank (a decision only rank 0 could take); `device`: where
        the collective's tensor must live (the accelerator for nccl and hccl)."""
        if self.world_size == 1:
            return flag
        import torch
        import torch.distributed as dist

        value = torch.tensor([1.0 if flag and self.is_main else 0.0], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.SUM)  # gloo and nccl: rank 0's alone is set
        return bool(value.item() > 0)

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def destroy(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def init_from_env(device: Device) -> DistContext:
    """Join the process group torchrun describes in the environment, on `device`.

    `device` should already be this rank's own one (`devices.resolve(..., index=local_rank())`).
    """
    world = _env_int("WORLD_SIZE", 1)
    if world == 1:
        return DistContext()
    import torch
    import torch.distributed as dist

    ctx = DistContext(
        rank=_env_int("RANK", 0),
        world_size=world,
        local_rank=local_rank(),
        local_world_size=_env_int("LOCAL_WORLD_SIZE", 1),
    )
    backend = backend_for(device.backend)
    if backend == "hccl":
        try:  # registers the hccl backend with torch.distributed
            import habana_frameworks.torch.distributed.hccl  # noqa: F401
        except ImportError as err:
            raise BackendUnavailableError(
                f"backend 'gaudi' with several processes needs "
                f"habana_frameworks.torch.distributed.hccl: {err}"
            ) from None
    options: dict[str, Any] = {}  # init_process_group's keywords
    if device.torch_device.type == "cuda":
        # Bind before init so NCCL's communicator and barrier use this rank's GPU.
        torch.cuda.set_device(device.torch_device)
        options["device_id"] = device.torch_device
    dist.init_process_group(
        backend, init_method="env://", rank=ctx.rank, world_size=world, **options
    )
    return ctx


def check_global_batch(
    batch_size: int, world_size: int, key: str = "unet2d.train.batch_size"
) -> int:
    """The per-rank batch for a GLOBAL `batch_size`; ConfigError if it does not divide evenly."""
    if batch_size % world_size:
        raise ConfigError(
            f"config key '{key}': the global batch {batch_size} does not split evenly over "
            f"devices * nodes = {world_size} processes"
        )
    return batch_size // world_size


def launch_command(
    devices: int, nodes: int, argv: list[str], under_slurm: bool, port: int | None = None
) -> list[str]:
    """The command that starts `devices * nodes` processes running `accelpipe <argv>`.

    One process needs no launcher: the plain `python -m accelpipe <argv>`. Several on this
    machine: torchrun --standalone (it picks a free rendezvous port). Under Slurm: one torchrun
    per node through srun, meeting at the allocation's first node.
    """
    if devices * nodes == 1:
        return [sys.executable, "-m", "accelpipe", *argv]
    # "--" ends torchrun's options: its parser would otherwise read our `--run` as an ambiguous
    # abbreviation of its `--run-path` and refuse to start.
    module = ["-m", "--", "accelpipe", *argv]
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    if not under_slurm:
        require_slurm(nodes, under_slurm, "unet2d.train.nodes")
        return [*torchrun, "--standalone", f"--nproc-per-node={devices}", *module]
    return [
        *srun_command(nodes),
        *torchrun,
        f"--nnodes={nodes}",
        f"--nproc-per-node={devices}",
        f"--rdzv-id={os.environ.get('SLURM_JOB_ID', 'accelpipe')}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={_first_node()}:{port or _port()}",
        *module,
    ]


def require_slurm(nodes: int, under_slurm: bool, key: str) -> None:
    """Several nodes need a Slurm allocation: a ConfigError of one line naming `key` if not."""
    if nodes > 1 and not under_slurm:
        raise ConfigError(
            f"config key '{key}': {nodes} nodes need a Slurm allocation "
            "(SLURM_JOB_ID is not set); run the workflow inside one, e.g. with salloc"
        )


def srun_command(nodes: int, tasks_per_node: int = 1, key: str = "unet2d.train.nodes") -> list[str]:
    """`srun` starting `tasks_per_node` tasks on each of `nodes` nodes of this Slurm job.

    The rules both engines' launches share: the job must have the nodes (else a ConfigError
    naming `key`); inside a job step the new step overlaps it; the CPUs a job task has
    (SLURM_CPUS_PER_TASK: the workflow's train job is one task per node with `threads` CPUs)
    are split over the node's tasks, and a node with fewer CPUs than tasks overcommits them.
    """
    allocated = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES")
    if allocated and int(allocated) < nodes:
        raise ConfigError(
            f"config key '{key}': {nodes} nodes, but Slurm job "
            f"{os.environ.get('SLURM_JOB_ID')} has {allocated}"
        )
    cmd = ["srun", f"--ntasks-per-node={tasks_per_node}", f"--nodes={nodes}"]
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


def _first_node() -> str:
    """The first host of SLURM_JOB_NODELIST."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        raise AccelpipeError("Slurm job without SLURM_JOB_NODELIST: cannot find its first node")
    return slurm_hostnames(nodelist)[0]


def _port() -> int:
    """MASTER_PORT if set, else a port free here.

    The batch script of a Slurm job runs on the allocation's first node, which is where the
    c10d rendezvous store listens, so a port free here is free there.
    """
    if os.environ.get("MASTER_PORT"):
        return int(os.environ["MASTER_PORT"])
    with socket.socket() as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]  # AF_INET: (host, port); typeshed says Any
        return port


# -- launching the training processes ------------------------------------------------------


# Wall-clock start of a launched stage, so its workers count the stage's seconds from there.
_LAUNCHED_AT = "ACCELPIPE_LAUNCHED_AT"


@contextlib.contextmanager
def _sigterm_exits() -> Iterator[None]:
    """Turn SIGTERM (a cancelled job) into SystemExit, so `finally` blocks stop our children."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_workers(cmd: list[str], env: dict[str, str]) -> int:
    """Run the launcher, relaying every rank's output to our log; return its exit status.
    Killed outright, we take it with us (launch.lifeline)."""
    workers_log = logging.getLogger("accelpipe.workers")
    tail: collections.deque[str] = collections.deque(maxlen=30)
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lifeline.die_with_parent(),  # SIGTERM if we are killed outright
    )
    assert proc.stdout is not None  # stdout=PIPE
    try:
        with _sigterm_exits():
            for line in proc.stdout:
                tail.append(line.rstrip())
                workers_log.info("%s", tail[-1])
            code = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted: torchrun and srun pass SIGTERM on to the ranks
            proc.terminate()
            proc.wait()
    if code:
        log.error("training processes failed (status %d); last output:\n%s", code, "\n".join(tail))
    return code


def launch_training(cfg: TrainSettings, stage_argv: list[str], threads: int) -> None:
    """Start `devices * nodes` processes running `accelpipe <stage_argv>`; exit with theirs."""
    under_slurm = "SLURM_JOB_ID" in os.environ
    cmd = launch_command(cfg.devices, cfg.nodes, stage_argv, under_slurm)
    env = {**os.environ, **launched_env(under_slurm)}
    # torchrun would set 1 (with a warning); each rank sets its share in `cmd_train` anyway.
    env.setdefault("OMP_NUM_THREADS", str(max(1, threads // cfg.devices)))
    log.info("training on %d processes: %s", cfg.devices * cfg.nodes, shlex.join(cmd))
    code = run_workers(cmd, env)
    if code:
        raise SystemExit(code)


def launched_env(under_slurm: bool) -> dict[str, str]:
    """What a launch adds to its processes' environment: when it started (`stage_started`)
    and, on this node, who launched them, so that they die with us (launch.lifeline; a Slurm
    step's tasks are Slurm's, which ends a step whose srun is gone)."""
    env = {_LAUNCHED_AT: repr(time.time())}
    return env if under_slurm else env | lifeline.launcher_env()


# time.time() at the origin of the stage running in this process (`stage_clock`)
_origin: dict[str, float] = {}


def stage_started() -> float:
    """perf_counter() origin of the stage: the launch, for a launched worker."""
    launched = os.environ.get(_LAUNCHED_AT)
    elapsed = max(time.time() - float(launched), 0.0) if launched else 0.0
    return time.perf_counter() - elapsed


@contextlib.contextmanager
def stage_clock() -> Iterator[float]:
    """The stage's perf_counter() origin (`stage_started`); while the stage runs,
    `stage_started_at` gives its wall-clock time (an attempt's record starts there)."""
    started = stage_started()
    _origin["at"] = time.time() - (time.perf_counter() - started)
    try:
        yield started
    finally:
        _origin.clear()


def stage_started_at() -> float:
    """time.time() at the origin of the stage running here; now outside one (a loop run
    without the train stage, as tests do)."""
    return _origin.get("at", time.time())
