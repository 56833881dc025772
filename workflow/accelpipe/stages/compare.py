"""`compare`: results/compare, every finished run of every workload on one page."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from accelpipe.compare.write import write_compare
from accelpipe.config.schema import stage_slice

log = logging.getLogger("accelpipe")


def run_compare(args: argparse.Namespace) -> None:
    cfg = stage_slice(args)
    runs = [Path(r) for r in args.runs]
    rows = write_compare(runs, cfg["cost"]["per_hour"], Path(args.out), cfg.get("config_hashes"))
    for mark in ("fastest", "most_accurate"):
        marked = [f"{r['workload']}/{r['run']}" for r in rows if r[mark]]
        log.info("compare: %d runs; %s: %s", len(rows), mark, ", ".join(marked) or "none")
    stale = [f"{r['workload']}/{r['run']}" for r in rows if r["config_stale"]]
    if stale:
        log.warning("compare: stale under the current config: %s", ", ".join(stale))
