"""`publish` and `aggregate`: a run's result folder, and the cross-validation summary."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from accelpipe.config import load_slice
from accelpipe.publish import aggregate_folds, publish_run

log = logging.getLogger("accelpipe")


def run_publish(args: argparse.Namespace) -> None:
    stage_dirs = {
        "raw": Path(args.raw),
        "prepare": Path(args.prepared),
        "train": Path(args.model),
        "evaluate": Path(args.eval),
        "trace": Path(args.trace),
    }
    publish_run(stage_dirs, load_slice(args.config_json), Path(args.out))


def run_aggregate(args: argparse.Namespace) -> None:
    summary = aggregate_folds([Path(r) for r in args.runs], Path(args.out))
    log.info("cross-validation mean: %s", json.dumps(summary["mean"]))
