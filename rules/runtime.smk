# Where the stages of one framework run: locally, or (runtime docker) in the backend's
# image, built here once per DAG. Every stage reads this file through `--runtime`.
rule stage_runtime:
    output:
        "work/runtime/{framework}.json",
    log:
        "logs/runtime/{framework}.log",
    localrule: True
    conda:
        "../envs/cpu.yaml"
    params:
        cfg=stage_runtime_config,
    shell:
        "accelpipe --log {log} runtime --framework {wildcards.framework} --config-json {params.cfg:q}"
        " --out {output}"
