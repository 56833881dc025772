"""`raw` and `prepare`: fetch, synthesize or link a raw dataset; preprocess it."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from accelpipe import datasets
from accelpipe.config.schema import stage_slice
from accelpipe.core import provenance
from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path
from accelpipe.datasets.sources import MADE_FROM, config_key, made_from, make_raw, raw_lock
from accelpipe.plan import capacity

log = logging.getLogger(__name__)


def _enough(verdict: str | None) -> None:
    """The preflight's disk line (plan.capacity), before anything is downloaded or written."""
    if verdict is not None:
        raise DataError(verdict)


def run_raw(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    module = datasets.get(args.dataset)
    cfg, out = stage_slice(args), Path(args.out)
    with raw_lock(args.dataset, Path(args.downloads)):
        if made_from(out, cfg):  # by another workflow sharing data_root, while this one waited
            log.info("%s: made meanwhile by another run from the same config; kept", out)
            return
        _enough(capacity.raw_disk_verdict(args.dataset, cfg, out.parent))
        with atomic_path(out) as tmp:
            facts = make_raw(module.SOURCES, cfg, tmp, args.downloads)
            facts[MADE_FROM] = config_key(cfg)
            provenance.write_stage(tmp, "raw", started, dataset=args.dataset, **facts)


def run_prepare(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    module = datasets.get(args.dataset)
    _enough(capacity.prepare_disk_verdict(args.dataset, Path(args.raw), Path(args.out)))
    # The dataset's prepare writes its output atomically itself.
    module.prepare_variant(
        args.variant,
        Path(args.raw),
        Path(args.out),
        stage_slice(args),
        workers=args.workers,
    )
    provenance.write_stage(
        Path(args.out), "prepare", started, dataset=args.dataset, variant=args.variant
    )
