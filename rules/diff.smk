# results/<workload>/diff/<A>_vs_<B>: two published runs of a workload side by side (diff.md,
# diff.json; docs/stages.md), each figure with an interval and a verdict. The report is kept
# whatever it finds (--report-only): the gate that fails on a headline regression is
# `accelpipe diff <run A> <run B>` (exit 3). Pure Python: it runs where Snakemake runs.


rule diff:
    input:
        a="results/{workload}/{a}",
        b="results/{workload}/{b}",
    output:
        report(
            directory("results/{workload}/diff/{a}_vs_{b}"),
            patterns=["{name}.md", "{name}.json"],
            caption="../report/diff.rst",
            category="{workload}",
            subcategory="diff",
        ),
    log:
        "logs/{workload}/diff/{a}_vs_{b}.log",
    wildcard_constraints:
        a=DIFF_RUN,
        b=DIFF_RUN,
    localrule: True
    conda:
        "../envs/cpu.yaml"
    params:
        code=code_for("diff"),
        cfg=lambda wildcards: stage_json(stage_config.diff),
    shell:
        "accelpipe --log {log:q} diff {input.a:q} {input.b:q} --config-json {params.cfg:q} --out {output:q} --report-only"
