"""The stages behind `accelpipe <stage>`, one module per rule file.

The CLI imports a stage's module only when that stage runs, and a stage reaches its
dataset or workload module by name. So the package code a stage executes is the import
graph (codegraph.py) of the CLI, the stage's module and that dataset or workload module:
`entry_modules` names them, and the rules key each stage on that graph's code.
"""

from __future__ import annotations

from accelpipe import engines
from accelpipe.workloads.base import module_name as workload_module

# stage (the CLI's sub-command) -> module holding `run_<stage>` (dashes as underscores)
MODULES = {
    "raw": "accelpipe.stages.data",
    "prepare": "accelpipe.stages.data",
    "weights": "accelpipe.stages.weights",
    "train": "accelpipe.stages.train",
    "evaluate": "accelpipe.stages.evaluate",
    "summarize-trace": "accelpipe.stages.trace",
    "publish": "accelpipe.stages.publish",
    "aggregate": "accelpipe.stages.publish",
    "grid": "accelpipe.stages.publish",
    "ttt": "accelpipe.stages.publish",
    "benchmark": "accelpipe.stages.publish",
    "compare": "accelpipe.stages.compare",
    "diff": "accelpipe.stages.diff",
    "images": "accelpipe.stages.images",
    "doctor": "accelpipe.stages.doctor",
    "accelerator-check": "accelpipe.stages.accelerator_check",
    "targets": "accelpipe.stages.targets",
    "runs": "accelpipe.stages.runs",
    "drop-archives": "accelpipe.stages.data",
}
# stages that call into one dataset's or one workload's module by name
_PLUGINS = {
    "raw": "datasets",
    "prepare": "datasets",
    "train": "workloads",
    "evaluate": "workloads",
}


def entry_modules(stage: str, plugin: str | None = None) -> list[str]:
    """Where the stage's code starts: the CLI, its stage module, its dataset or workload
    module and, for a workload, its engine (which the stage also calls by name)."""
    entries = ["accelpipe.cli", MODULES[stage]]
    if stage in _PLUGINS:
        if plugin is None:
            raise ValueError(f"stage {stage!r} needs its {_PLUGINS[stage][:-1]} name")
        if _PLUGINS[stage] == "workloads":
            entries += [workload_module(plugin), engines.for_workload(plugin).module]
        else:
            entries.append(f"accelpipe.{_PLUGINS[stage]}.{plugin}")
    return entries
