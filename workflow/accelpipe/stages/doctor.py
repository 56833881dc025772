"""`accelpipe doctor`: check this host (or image) for a backend, print one line per check,
write the report as JSON (--json), and fail, naming each problem, where there is one.

The workflow's preflight rule runs it once per backend and image before the first train job
(rules/preflight.smk); people run it by hand on a new machine.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from accelpipe.config.runtime import read_runtime
from accelpipe.core.errors import AccelpipeError
from accelpipe.core.io import write_json
from accelpipe.devices import doctor

log = logging.getLogger("accelpipe")


class DoctorProblems(AccelpipeError):
    """The doctor found problems; the message names each check and what it found."""


def probe_for(framework: str) -> Callable[[str], doctor.FactsResult]:
    """The framework's probe, imported only when asked; a framework that does not import is
    the framework check's problem, not a crash."""

    def probe(backend: str) -> doctor.FactsResult:
        framework_probe: Callable[[str], doctor.FactsResult]
        try:
            if framework == "tensorflow":
                from accelpipe.devices import tf_doctor

                framework_probe = tf_doctor.probe
            else:
                from accelpipe.devices import torch_doctor

                framework_probe = torch_doctor.probe
        except ImportError as err:
            return f"cannot import {framework}: {err}"
        except AccelpipeError as err:
            return f"{framework}: {err}"
        return framework_probe(backend)

    return probe


def needs_from(args: argparse.Namespace, runtime: dict) -> doctor.Needs:
    pool = runtime.get("pool")
    if args.pool is not None:
        pool = [p.strip() for p in args.pool.split(",") if p.strip()]
    if pool is not None:
        pool = [str(p) for p in pool]
    world = args.world_size if args.world_size is not None else args.devices
    return doctor.Needs(args.devices, world, args.precision, pool)


def run_doctor(args: argparse.Namespace) -> None:
    # $ACCELPIPE_RUNTIME (set by the workflow) gives the backend and accelerators.pool where
    # the command does not; inside a container it is absent and the devices given are the pool
    runtime = read_runtime(args.framework)
    backend = args.backend or runtime.get("backend", "cpu")
    framework = args.check_framework or args.framework or "pytorch"
    report = doctor.run(backend, framework, needs_from(args, runtime), probe_for(framework))
    lines = report.lines()
    print("\n".join(lines), flush=True)
    if args.log:
        for line in lines:
            log.info("%s", line)
    if args.json:
        write_json(args.json, report.as_dict())
    if report.problems:
        named = "; ".join(f"{c.name}: {c.found}" for c in report.problems)
        where = doctor.in_container(report.container or "", report.image or "")
        raise DoctorProblems(
            f"{doctor.summary(report)} ({backend}, {framework}, host {report.host}"
            f"{', ' + where if where else ''}): {named}. The report above gives each fix"
        )
