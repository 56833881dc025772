"""The Docker Engine client: building images and running a stage in one.

The Engine API is spoken by Docker and by Podman (`podman system service`), so the same
code drives both; DOCKER_HOST (or `containers.docker_host`) picks the socket. Which image a
stage runs in and its tag are decided at plan time (`accelpipe.plan.images`); this module only
builds a given spec under a given reference and runs containers from it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from accelpipe import REPO
from accelpipe.core import locks
from accelpipe.core.errors import AccelpipeError, ConfigError

if TYPE_CHECKING:
    from accelpipe.plan.images import ImageSpec

log = logging.getLogger(__name__)

# Host variables a containerised stage may see; everything else stays outside.
ENV_WHITELIST = (
    "ACCELPIPE_GIT_STATE",  # provenance.GIT_STATE_ENV: the image holds no checkout
    "ACCELPIPE_EVAL_SETTINGS",  # runtime.EVAL_SETTINGS_ENV: evaluate settings outside train's key
    "TZ",
    "LANG",
    "LC_ALL",
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "PYTHONHASHSEED",
    "TORCH_HOME",
    "HF_HUB_OFFLINE",
    "NCCL_DEBUG",
    "MIOPEN_FIND_MODE",
    "MIOPEN_FIND_ENFORCE",
    "PT_HPU_LAZY_MODE",
    "LOG_LEVEL_ALL",
    "ACCELPIPE_LOCK_DIR",
    "ACCELPIPE_DOWNLOADS",  # datasets.download.DOWNLOADS_ENV: the config's downloads block
)
LABEL = "io.accelpipe.stage"


def image_slug(ref: str) -> str:
    """`<registry>/accelpipe/cpu-pytorch:abc123` -> `cpu-pytorch-abc123` (a file-name-safe id)."""
    return ref.rpartition("/")[2].replace(":", "-")


# -- the Engine API -------------------------------------------------------------------------


def client(docker_host: str | None = None) -> Any:
    """A docker SDK client for `docker_host`, DOCKER_HOST, or the default socket."""
    import docker

    try:
        engine = docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
        engine.ping()
    except docker.errors.DockerException as err:
        where = docker_host or os.environ.get("DOCKER_HOST") or "the default socket"
        raise AccelpipeError(
            f"no Docker Engine API at {where} ({err}); start Docker, or Podman's API with "
            "`podman system service --time=0 unix:///run/podman/podman.sock` and set DOCKER_HOST"
        ) from None
    return engine


def build(
    spec: ImageSpec,
    ref: str,
    engine: Any,
    *,
    base_image: str | None = None,
    pip_extra_args: str = "",
    repo: Path = REPO,
) -> str:
    """Build `spec` as `ref` unless the engine already has it; the build output is logged."""
    import docker

    with contextlib.suppress(docker.errors.ImageNotFound):
        engine.images.get(ref)
        log.info("image %s is up to date", ref)
        return ref
    (repo / "docker/wheelhouse").mkdir(exist_ok=True)  # the Dockerfiles COPY it, maybe empty
    buildargs = {"BASE_IMAGE": base_image or spec.base_image, "PIP_EXTRA_ARGS": pip_extra_args}
    stream = engine.api.build(
        path=str(repo),
        dockerfile=str(spec.dockerfile),
        tag=ref,
        buildargs=buildargs,
        rm=True,
        forcerm=True,
        decode=True,
        network_mode="host" if not pip_extra_args else "none",
    )
    for chunk in stream:
        if chunk.get("stream", "").strip():
            log.info("%s", chunk["stream"].rstrip())
        if "error" in chunk:
            raise AccelpipeError(
                f"building {ref} from {spec.dockerfile} failed: {chunk['error'].strip()}"
            )
    engine.images.get(ref)  # the build really produced it
    return ref


def build_once(
    spec: ImageSpec,
    ref: str,
    engine: Any,
    lock_dir: Path,
    *,
    wait_s: float | None = None,
    job: str = "",
    **options: Any,
) -> str:
    """`build`, by one job at a time: the first stage of a DAG that needs the image builds
    it, the others wait on the lock (at most `wait_s` seconds, then an error naming the
    builder) and find it built. The lock is accelpipe.core.locks': safe in a shared /tmp."""
    logged = False

    def waiting(holder: str) -> None:
        nonlocal logged
        if not logged:
            log.info("waiting for the build of %s by %s", ref, holder)
            logged = True

    with locks.held(
        lock_dir, f"image-{image_slug(ref)}.lock", wait_s=wait_s, job=job, on_wait=waiting
    ):
        return build(spec, ref, engine, **options)


# -- running a stage ------------------------------------------------------------------------


def device_options(backend: str, devices: Sequence[str]) -> dict[str, Any]:
    """The vendor's container flags for the leased `devices` (never privileged).

    Inside the container only the leased devices exist, numbered from 0 (CUDA, ROCm); the
    Habana runtime itself selects modules from HABANA_VISIBLE_MODULES.
    """
    if backend == "cpu" or not devices:
        return {}
    if backend == "cuda":
        from docker.types import DeviceRequest

        return {
            "device_requests": [DeviceRequest(device_ids=list(devices), capabilities=[["gpu"]])]
        }
    if backend == "rocm":
        render = [f"/dev/dri/renderD{128 + int(d)}" for d in devices]
        return {
            "devices": [f"{node}:{node}:rwm" for node in ("/dev/kfd", *render)],
            "group_add": ["video"],
            "security_opt": ["seccomp=unconfined"],
            "ipc_mode": "host",
            "environment": {"HIP_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(devices)))},
        }
    if backend == "gaudi":
        return {
            "runtime": "habana",
            "cap_add": ["SYS_NICE"],
            "ipc_mode": "host",
            "environment": {"HABANA_VISIBLE_MODULES": ",".join(devices)},
        }
    raise ConfigError(f"config key 'backend': no container flags for {backend!r}")


def container_env(extra: Sequence[str] = ()) -> dict[str, str]:
    env = {k: os.environ[k] for k in (*ENV_WHITELIST, *extra) if k in os.environ}
    env.setdefault("HOME", "/tmp")  # the caller's uid has no home in the image
    return env


def mounts_for(paths: Sequence[str | Path]) -> list[Any]:
    """Bind mounts of each path at the same location, so every path in argv works inside."""
    from docker.types import Mount

    # A path that does not exist is not mounted: the stage inside then names it in its error,
    # instead of the engine failing to create the container.
    unique = sorted({str(Path(p).resolve()) for p in paths if Path(p).exists()})
    # a path inside another mounted path needs no mount of its own
    roots = [p for p in unique if not any(p != q and p.startswith(q + os.sep) for q in unique)]
    return [Mount(target=p, source=p, type="bind") for p in roots]


class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP (what Snakemake and schedulers send) into an exception."""

    def handler(signum: int, frame: Any) -> None:
        raise _Interrupted(signum)

    previous = {
        s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    }
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run(
    engine: Any,
    image: str,
    argv: Sequence[str],
    *,
    workdir: Path,
    mounts: Sequence[Path],
    backend: str,
    devices: Sequence[str],
    env_names: Sequence[str],
    log_file: Path | None,
) -> int:
    """Run `argv` in `image` as the calling user; stream its output; always remove it."""
    options = device_options(backend, devices)
    environment = {
        **container_env(env_names),
        **options.pop("environment", {}),
        "ACCELPIPE_IMAGE": image,  # recorded in stage.json / provenance.json
    }
    container = engine.containers.create(
        image,
        list(argv),
        user=f"{os.getuid()}:{os.getgid()}",
        working_dir=str(workdir.resolve()),
        mounts=mounts_for([workdir, *mounts]),
        environment=environment,
        network_disabled=True,
        labels={LABEL: json.dumps(list(argv[:2]))},
        detach=True,
        **options,
    )
    try:
        with _signals_raise():
            _start(container, image)
            errors = _stream(container, log_file)
            code = int(container.wait()["StatusCode"])
            for line in errors if code else ():  # the stage's own error line, on the console
                # "<time> ERROR <logger>: <message>" -> "<message>"
                log.error("in container: %s", line.split(" ERROR ", 1)[-1].split(": ", 1)[-1])
            return code
    except _Interrupted as stop:
        log.error("interrupted by %s: removing container %s", stop, container.short_id)
        raise SystemExit(128 + stop.signum) from None
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def _start(container: Any, image: str) -> None:
    """Start the container; an engine refusal is one line naming the image, not a traceback."""
    from docker.errors import APIError

    try:
        container.start()
    except APIError as err:
        raise AccelpipeError(
            f"the container engine could not start {image}: {err.explanation or err}"
        ) from None


def _stream(container: Any, log_file: Path | None) -> list[str]:
    """Container output to the rule's log (or stderr); returns its error lines."""
    sink = log_file.open("a") if log_file else sys.stderr
    errors: list[str] = []
    try:
        pending = b""
        for chunk in container.logs(stream=True, follow=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                _emit(raw.decode(errors="replace"), sink, errors)
        if pending:
            _emit(pending.decode(errors="replace"), sink, errors)
    finally:
        if log_file:
            sink.close()
    return errors


def _emit(line: str, sink: TextIO, errors: list[str]) -> None:
    sink.write(line + "\n")
    sink.flush()
    if " ERROR " in line:
        errors.append(line)
