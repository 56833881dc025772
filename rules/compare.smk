# results/compare: every finished run (a results/<workload>/<run>/ with provenance.json when
# Snakemake plans) on one page. The run files are inputs because they exist, not outputs of
# a rule here, so this never trains: a re-published run (newer files) or a new one re-runs
# only compare. Pure Python and matplotlib: it runs where Snakemake runs, in no image.


rule compare:
    input:
        runs=compare_inputs,
    output:
        report(
            directory("results/compare"),
            patterns=["{name}.html", "{name}.png", "{name}.csv", "{name}.json"],
            caption="../report/compare.rst",
            category="compare",
        ),
    log:
        "logs/compare.log",
    localrule: True
    conda:
        "../envs/cpu.yaml"
    params:
        code=code_for("compare"),
        runs=compare_runs,
        cfg=compare_config,
    shell:
        "accelpipe --log {log:q} compare --runs {params.runs:q} --config-json {params.cfg:q} --out {output:q}"
