"""`evaluate`: metrics of a trained run on the validation data, and their TensorBoard scalars
(eval/<metric> at the run's last training step, beside the train stage's)."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import time
from pathlib import Path

from accelpipe import engines, provenance, workloads
from accelpipe.config import load_slice
from accelpipe.engines import scalars
from accelpipe.io import atomic_path, read_json

log = logging.getLogger("accelpipe")


def run_evaluate(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    importlib.import_module(engines.for_workload(args.workload).module).limit_threads(args.threads)
    module = workloads.get(args.workload)
    with atomic_path(args.out) as tmp:
        metrics = module.evaluate(
            Path(args.prepared), args.run, load_slice(args.config_json), Path(args.model), tmp
        )
        trained = read_json(Path(args.model) / provenance.STAGE_FILE)
        scalars.write_metrics(
            tmp / scalars.TENSORBOARD_DIR, trained["steps"], read_json(tmp / "metrics.json"), "eval"
        )
        provenance.write_stage(tmp, "evaluate", started, workload=args.workload, run=args.run)
    log.info("metrics: %s", json.dumps(metrics))
