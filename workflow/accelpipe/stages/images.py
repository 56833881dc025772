"""`images tag` prints a backend's image reference; `images build` builds it (Engine API).
Under runtime docker the stages build their image themselves on first use
(containers.build_once): this command is for building or pushing ahead of a run."""

from __future__ import annotations

import argparse

from accelpipe.core import containers
from accelpipe.plan import images


def run_images(args: argparse.Namespace) -> None:
    spec = images.spec_for(args.backend, args.framework)
    ref = images.image_ref(spec, args.registry)
    if args.action == "tag":
        print(ref)
        return
    _build(spec, ref, args.docker_host, args.base_image, args.offline)


def _build(
    spec: images.ImageSpec,
    ref: str,
    docker_host: str | None,
    base_image: str | None,
    offline: bool,
) -> None:
    engine = containers.client(docker_host)
    pip_args = "--no-index" if offline else ""
    containers.build(spec, ref, engine, base_image=base_image, pip_extra_args=pip_args)
