"""Process groups for one training job spread over several devices or nodes.

torchrun (`python -m torch.distributed.run`) starts one process per device and tells each its
place through the environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT.
`init_from_env` turns that into a `DistContext`; a process started without torchrun is a world
of one and creates no process group, so single-device runs pay nothing. `launch_command` builds
the torchrun command (wrapped in srun under Slurm) that `accelpipe train` re-executes itself
through when a job asks for more than one process, by the Slurm rules (launch.slurm) and the
worker running (launch.workers) that the TensorFlow launcher (launch.tf_launch) shares.
torch is imported only where a process group is used, so the launching process stays light.

Typical use in a workload::

    device = torch_device.resolve(backend, index=torch_launch.local_rank())
    ctx = torch_launch.init_from_env(device)
    try:
        ...  # Trainer(..., dist=ctx); only ctx.is_main writes files
    finally:
        ctx.destroy()
"""

from __future__ import annotations

import logging
import os
import shlex
import socket
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelpipe.core.errors import BackendUnavailableError, ConfigError
from accelpipe.launch import slurm, workers

if TYPE_CHECKING:
    import torch

    from accelpipe.config.settings import TrainSettings
    from accelpipe.devices.torch_device import Device

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

    `device` should already be this rank's own one
    (`torch_device.resolve(..., index=local_rank())`).
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
    key = slurm.config_key(argv, "nodes")  # the workload's own key in a refusal
    if not under_slurm:
        slurm.require_slurm(nodes, under_slurm, key)
        return [*torchrun, "--standalone", f"--nproc-per-node={devices}", *module]
    return [
        *slurm.srun_command(nodes, 1, key),
        *torchrun,
        f"--nnodes={nodes}",
        f"--nproc-per-node={devices}",
        f"--rdzv-id={os.environ.get('SLURM_JOB_ID', 'accelpipe')}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={slurm.first_node()}:{port or _port()}",
        *module,
    ]


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


def launch_training(cfg: TrainSettings, stage_argv: list[str], threads: int) -> None:
    """Start `devices * nodes` processes running `accelpipe <stage_argv>`; exit with theirs."""
    under_slurm = "SLURM_JOB_ID" in os.environ
    cmd = launch_command(cfg.devices, cfg.nodes, stage_argv, under_slurm)
    env = {**os.environ, **workers.launched_env(under_slurm)}
    watch = None
    if under_slurm:
        env, watch = slurm.srun_env(env), slurm.step_watch(cfg.nodes)
    # torchrun would set 1 (with a warning); each rank sets its share in `cmd_train` anyway.
    env.setdefault("OMP_NUM_THREADS", str(max(1, threads // cfg.devices)))
    log.info("training on %d processes: %s", cfg.devices * cfg.nodes, shlex.join(cmd))
    code = workers.run_workers(cmd, env, watch)
    if code:
        raise SystemExit(code)
