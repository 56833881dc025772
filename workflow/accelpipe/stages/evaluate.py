"""`evaluate`: metrics of a trained run on the validation data, whether they reach the
workload's quality target (accelpipe.config.quality), and their TensorBoard scalars (eval/<metric>
at the run's last training step, beside the train stage's)."""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from accelpipe import engines
from accelpipe.config import quality
from accelpipe.config.schema import stage_slice
from accelpipe.core import provenance
from accelpipe.core.io import atomic_path, read_json, write_json
from accelpipe.engines import scalars
from accelpipe.workloads import base as workloads

log = logging.getLogger("accelpipe")


def run_evaluate(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    engines.hooks(engines.for_workload(args.workload)).limit_threads(args.threads)
    module = workloads.get(args.workload)
    cfg = stage_slice(args)
    with atomic_path(args.out) as tmp:
        module.evaluate(Path(args.prepared), args.run, cfg, Path(args.model), tmp)
        metrics = read_json(tmp / "metrics.json")
        target = quality.target_for(args.workload, cfg["target"])
        metrics[quality.VERDICT_KEY] = quality.verdict(metrics, target)
        write_json(tmp / "metrics.json", metrics)
        trained = read_json(Path(args.model) / provenance.STAGE_FILE)
        scalars.write_metrics(tmp / scalars.TENSORBOARD_DIR, trained["steps"], metrics, "eval")
        provenance.write_stage(tmp, "evaluate", started, workload=args.workload, run=args.run)
    log.info("metrics: %s", json.dumps(metrics))
