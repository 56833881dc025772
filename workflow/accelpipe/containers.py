"""The one container layer: image tags, and building and running through the Docker Engine API.

The Engine API is spoken by Docker and by Podman (`podman system service`), so the same
code drives both; DOCKER_HOST (or `containers.docker_host`) picks the socket. Images are
tagged by a hash of their Dockerfile, their requirement files and the package code that
runs in them (its AST, as the stages' code keys: a comment changes no tag), so a changed
module gives a new tag to the images whose stages import it (which Snakemake sees as a
changed software environment), and to no other.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from accelpipe import REPO, registry
from accelpipe.codegraph import executed_digest, stage_code
from accelpipe.errors import AccelpipeError, ConfigError
from accelpipe.stages import entry_modules

log = logging.getLogger(__name__)

IMAGES_FILE = Path("docker/images.yaml")
# Files whose content defines every image besides its Dockerfile, requirements and code.
IMAGE_INPUTS = ("pyproject.toml", "README.md")
# Stages that run in the image of a workload's framework, those of a dataset's, and those
# that run in every image (the doctor asks each image's framework: both probes are in it).
_WORKLOAD_STAGES = ("train", "evaluate")
_DATASET_STAGES = ("raw", "prepare")
_COMMON_STAGES = ("summarize-trace", "publish", "aggregate", "doctor")
# Host variables a containerised stage may see; everything else stays outside.
ENV_WHITELIST = (
    "ACCELPIPE_GIT_STATE",  # provenance.GIT_STATE_ENV: the image holds no checkout
    "TZ",
    "LANG",
    "LC_ALL",
    "OMP_NUM_THREADS",
    "PYTHONHASHSEED",
    "TORCH_HOME",
    "HF_HUB_OFFLINE",
    "NCCL_DEBUG",
    "MIOPEN_FIND_MODE",
    "MIOPEN_FIND_ENFORCE",
    "PT_HPU_LAZY_MODE",
    "LOG_LEVEL_ALL",
    "ACCELPIPE_LOCK_DIR",
)
LABEL = "io.accelpipe.stage"


@dataclass(frozen=True)
class ImageSpec:
    """One entry of docker/images.yaml."""

    name: str
    dockerfile: Path
    backend: str
    framework: str
    base_image: str
    requirements: tuple[Path, ...]  # the requirement files its Dockerfile installs


def load_specs(repo: Path = REPO) -> dict[str, ImageSpec]:
    data = yaml.safe_load((repo / IMAGES_FILE).read_text())
    return {
        name: ImageSpec(
            name,
            Path(entry["dockerfile"]),
            entry["backend"],
            entry["framework"],
            entry["base_image"],
            tuple(Path(r) for r in entry["requirements"]),
        )
        for name, entry in data["images"].items()
    }


def spec_for(backend: str, framework: str = "pytorch", repo: Path = REPO) -> ImageSpec:
    name = f"{backend}-{framework}"
    specs = load_specs(repo)
    if name not in specs:
        raise ConfigError(
            f"no container image {name!r} in {IMAGES_FILE} (have: {', '.join(specs)})"
        )
    return specs[name]


def framework_code(framework: str, package_dir: Path) -> list[Path]:
    """The package files that run in a `framework` image: the import graph of every stage of
    that framework's workloads and datasets (the image holds the whole package; the rest
    never runs there, so it does not define the image)."""
    entries = {m for stage in _COMMON_STAGES for m in entry_modules(stage)}
    for w in registry.WORKLOADS.values():
        if w.framework == framework:
            for stage in _WORKLOAD_STAGES:
                entries.update(entry_modules(stage, w.name))
    for d in registry.DATASETS.values():
        if d.framework == framework:
            for stage in _DATASET_STAGES:
                entries.update(entry_modules(stage, d.name))
    return stage_code(sorted(entries), package_dir)


def _hashed_files(spec: ImageSpec, repo: Path) -> Iterator[Path]:
    yield repo / spec.dockerfile
    yield from (repo / r for r in spec.requirements)
    yield from (repo / entry for entry in IMAGE_INPUTS)
    yield from framework_code(spec.framework, repo / "workflow" / "accelpipe")


def image_tag(spec: ImageSpec, repo: Path = REPO) -> str:
    """Content hash of everything the image is built from: paths, and the bytes of each
    file or, for Python modules, what they execute."""
    digest = hashlib.sha256()
    for path in _hashed_files(spec, repo):
        content = executed_digest(path).encode() if path.suffix == ".py" else path.read_bytes()
        digest.update(str(path.relative_to(repo)).encode() + b"\0" + content + b"\0")
    return digest.hexdigest()[:12]


def image_ref(spec: ImageSpec, registry: str, repo: Path = REPO) -> str:
    return f"{registry.rstrip('/')}/accelpipe/{spec.name}:{image_tag(spec, repo)}"


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


def build_once(spec: ImageSpec, ref: str, engine: Any, lock_dir: Path, **options: Any) -> str:
    """`build`, by one job at a time: the first stage of a DAG that needs the image builds
    it, the others wait on the lock and find it built."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / f"image-{image_slug(ref)}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
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
