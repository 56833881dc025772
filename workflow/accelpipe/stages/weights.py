"""`weights`: fetch, check and convert one model's starting weights (accelpipe.weights)."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from accelpipe import weights
from accelpipe.config.schema import stage_slice
from accelpipe.core import provenance
from accelpipe.core.io import atomic_path
from accelpipe.datasets.download import configured_watch, exclusive
from accelpipe.datasets.sources import MADE_FROM, config_key, made_from

log = logging.getLogger(__name__)


def run_weights(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    cfg, out, downloads = stage_slice(args), Path(args.out), Path(args.downloads)
    downloads.mkdir(parents=True, exist_ok=True)
    # Two workflows on one data_root: one converts, the other waits and keeps its folder.
    wait_s = configured_watch().lock_wait_s
    with exclusive(downloads / "weights", wait_s=wait_s, job=f"weights:{args.name}"):
        if made_from(out, cfg):
            log.info("%s: made meanwhile by another run from the same config; kept", out)
            return
        with atomic_path(out) as tmp:
            facts = weights.make(cfg, tmp, downloads)
            facts[MADE_FROM] = config_key(cfg)
            provenance.write_stage(tmp, "weights", started, name=args.name, **facts)
    log.info("%s: %s tensors converted", out, facts["converted"]["tensors"])
