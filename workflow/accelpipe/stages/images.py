"""`images tag` prints a backend's image reference; `images build` builds it (Engine API)."""

from __future__ import annotations

import argparse
from pathlib import Path

from accelpipe import containers
from accelpipe.io import write_json


def run_images(args: argparse.Namespace) -> None:
    spec = containers.spec_for(args.backend, args.framework)
    ref = containers.image_ref(spec, args.registry)
    if args.action == "tag":
        print(ref)
        return
    engine = containers.client(args.docker_host)
    pip_args = "--no-index" if args.offline else ""
    containers.build(spec, ref, engine, base_image=args.base_image, pip_extra_args=pip_args)
    if args.out:
        write_json(Path(args.out), {"image": ref, "backend": args.backend})
