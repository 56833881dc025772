# accelpipe: dataset -> prepare -> train -> evaluate -> trace summary -> results.
# Targets: results/<workload>/<run> (runs, grid runs and seed runs named in config.yaml;
# a cross-validated workload's, one with `folds`: results/<workload>/[<run>/]fold<k> and
# [<run>/]cv),
# results/<workload>/grid (grid runs ranked), results/<workload>/ttt (seed runs' times to
# target combined), results/<workload>/benchmark (train-step throughput per batch size x
# precision), results/compare (every finished run on one page), results/<workload>/diff/<A>_vs_<B>
# (two runs side by side). `accelpipe targets` lists them.
# See README.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/preflight.smk"
include: "rules/data.smk"
include: "rules/weights.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/trace.smk"
include: "rules/publish.smk"
include: "rules/benchmark.smk"
include: "rules/compare.smk"
include: "rules/diff.smk"


rule all:
    default_target: True
    input:
        built_results,
