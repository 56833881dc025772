"""Container images at plan time: which image runs a stage, and its tag.

docker/images.yaml lists one image per backend and framework (`ImageSpec`). An image is
tagged by a hash of its Dockerfile, its requirement files and the package code that runs in
it (its AST, as the stages' code keys: a comment changes no tag), so a changed module gives
a new tag to the images whose stages import it (which Snakemake sees as a changed software
environment), and to no other. The rules and the preflight name images here; building and
running them is `accelpipe.core.containers` (the Docker Engine client), which imports none of this.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from accelpipe import REPO
from accelpipe.config import registry
from accelpipe.core.codegraph import executed_digest, stage_code
from accelpipe.core.errors import ConfigError
from accelpipe.core.io import read_yaml
from accelpipe.stages import entry_modules

IMAGES_FILE = Path("docker/images.yaml")
# Files whose content defines every image besides its Dockerfile, requirements and code.
IMAGE_INPUTS = ("pyproject.toml", "README.md")
# Stages that run in the image of a workload's framework, those of a dataset's, and those
# that run in every image (the doctor asks each image's framework: both probes are in it).
_WORKLOAD_STAGES = ("train", "evaluate")
_DATASET_STAGES = ("raw", "prepare")
_COMMON_STAGES = ("summarize-trace", "publish", "aggregate", "doctor")


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
    data = read_yaml(repo / IMAGES_FILE)
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
