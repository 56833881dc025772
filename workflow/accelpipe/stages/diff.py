"""`diff`: two published runs side by side (accelpipe.results.diff), written to
results/<workload>/diff/<A>_vs_<B> (diff.json, diff.md); a headline regression beyond the
threshold fails the command (exit 3), after the report is written, unless --report-only."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from accelpipe.config.schema import slice_schema, validate_slice
from accelpipe.core.errors import DataError
from accelpipe.results.diff import Regressed, Settings, default_out, diff_runs, write_diff
from accelpipe.results.diff_stats import WITHIN_NOISE

log = logging.getLogger("accelpipe")


def _settings(args: argparse.Namespace) -> Settings:
    """The slice's `diff` block (the schema's defaults where no --config-json was given),
    --threshold over it."""
    config = getattr(args, "config", None)
    if config is None:  # by hand, without a slice: the schema's defaults
        node = slice_schema("diff")
        assert node is not None
        config = validate_slice({"diff": {}}, node, "diff")
    block = dict(config["diff"])
    if args.threshold is not None:
        block["threshold"] = args.threshold
    return Settings(**block)


def run_diff(args: argparse.Namespace) -> None:
    run_a, run_b = Path(args.run_a), Path(args.run_b)
    out = Path(args.out) if args.out else default_out(run_a, run_b)
    diff = diff_runs(run_a, run_b, _settings(args))
    write_diff(out, diff)
    flagged = [f"{r['name']} {r['verdict']}" for r in diff["rows"] if r["verdict"] != WITHIN_NOISE]
    log.info("diff: %s; %d rows, flagged: %s", out, len(diff["rows"]), ", ".join(flagged) or "none")
    gate = diff["gate"]
    if args.report_only:
        if not gate["passed"]:
            log.warning("diff %s: the gate did not pass (--report-only): %s", out, gate)
        return
    threshold = f"{gate['threshold']:.1%}"
    if gate["not_compared"]:
        raise DataError(
            f"{out / 'diff.md'}: {', '.join(gate['not_compared'])} not compared "
            "(a run without two measured steps: performance.json says why)"
        )
    if gate["regressed"]:
        changes = [
            f"{r['name']} {r['relative_change']:+.1%}"
            for r in diff["rows"]
            if r["name"] in gate["regressed"] and r["group"] == "headline"
        ]
        raise Regressed(
            f"{run_b} regressed against {run_a} beyond {threshold}: {', '.join(changes)} "
            f"(report: {out / 'diff.md'})"
        )
