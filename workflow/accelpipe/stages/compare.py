"""`compare`: results/compare, every finished run of every workload on one page."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from accelpipe.compare.write import write_compare
from accelpipe.config import load_slice

log = logging.getLogger("accelpipe")


def run_compare(args: argparse.Namespace) -> None:
    per_hour = load_slice(args.config_json)["cost"]["per_hour"]
    rows = write_compare([Path(r) for r in args.runs], per_hour, Path(args.out))
    for mark in ("fastest", "most_accurate"):
        marked = [f"{r['workload']}/{r['run']}" for r in rows if r[mark]]
        log.info("compare: %d runs; %s: %s", len(rows), mark, ", ".join(marked) or "none")
