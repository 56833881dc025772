# accelpipe: dataset -> prepare -> train -> evaluate -> trace summary -> results.
# Targets: results/<workload>/<run> (runs, grid runs and seed runs named in config.yaml;
# unet2d's are cross-validated: results/unet2d/[<run>/]fold<k> and [<run>/]cv),
# results/<workload>/grid (grid runs ranked), results/<workload>/ttt (seed runs' times to
# target combined), results/<workload>/benchmark (train-step throughput per batch size x
# precision), results/compare (every finished run on one page). `accelpipe targets` lists them.
# See README.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/preflight.smk"
include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/trace.smk"
include: "rules/publish.smk"
include: "rules/benchmark.smk"
include: "rules/compare.smk"


from accelpipe.compare.runs import AGGREGATES


def built_results(wildcards):
    """The default target's run, and where Snakemake plans without running jobs (--report,
    --summary, --dag, --list-changes) every result folder of this config already built, so
    `snakemake --report results/report.html` holds every built run and aggregate. A run is
    built when published (provenance.json); a folder this config cannot name is left
    out."""
    default = ["results/unet2d/fold0"]
    # running jobs (or a dry run of them): the default target only
    if workflow.execution_settings is not None:
        return default
    runs = {str(run) for run in finished_runs(Path("results"))}
    built = [
        target.path
        for target in targets.buildable(config, len(runs))
        if target.path in runs
        or (target.kind in AGGREGATES and runs and Path(target.path).is_dir())
    ]
    return list(dict.fromkeys(default + built))


rule all:
    default_target: True
    input:
        built_results,
