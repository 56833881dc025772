"""`raw` and `prepare`: fetch, synthesize or link a raw dataset; preprocess it."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from accelpipe import datasets, provenance
from accelpipe.config import load_slice
from accelpipe.datasets.sources import make_raw
from accelpipe.io import atomic_path


def run_raw(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    module = datasets.get(args.dataset)
    with atomic_path(args.out) as tmp:
        facts = make_raw(module.SOURCES, load_slice(args.config_json), tmp, args.downloads)
        provenance.write_stage(tmp, "raw", started, dataset=args.dataset, **facts)


def run_prepare(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    module = datasets.get(args.dataset)
    # The dataset's prepare writes its output atomically itself.
    module.prepare_variant(
        args.variant,
        Path(args.raw),
        Path(args.out),
        load_slice(args.config_json),
        workers=args.workers,
    )
    provenance.write_stage(
        Path(args.out), "prepare", started, dataset=args.dataset, variant=args.variant
    )
