"""`images tag` prints a backend's image reference; `images build` builds it (Engine API);
`runtime` writes where a framework's stages run, building its image for runtime docker."""

from __future__ import annotations

import argparse
from pathlib import Path

from accelpipe import containers
from accelpipe.config import load_slice
from accelpipe.io import write_json


def run_images(args: argparse.Namespace) -> None:
    spec = containers.spec_for(args.backend, args.framework)
    ref = containers.image_ref(spec, args.registry)
    if args.action == "tag":
        print(ref)
        return
    _build(spec, ref, args.docker_host, args.base_image, args.offline)


def run_runtime(args: argparse.Namespace) -> None:
    settings = load_slice(args.config_json)
    build = settings.pop("build", None)
    if settings["runtime"] == "docker":
        spec = containers.spec_for(settings["backend"], args.framework)
        _build(
            spec, settings["image"], settings["docker_host"], build["base_image"], build["offline"]
        )
    write_json(Path(args.out), settings)


def _build(
    spec: containers.ImageSpec,
    ref: str,
    docker_host: str | None,
    base_image: str | None,
    offline: bool,
) -> None:
    engine = containers.client(docker_host)
    pip_args = "--no-index" if offline else ""
    containers.build(spec, ref, engine, base_image=base_image, pip_extra_args=pip_args)
