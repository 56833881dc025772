rule evaluate:
    input:
        data=prepared_dir,
        model="work/{workload}/{run}/train",
        code=code_for("evaluate"),
    output:
        directory("work/{workload}/{run}/eval"),
    log:
        "logs/{workload}/{run}/evaluate.log",
    conda:
        "../envs/torch-cpu.yaml"
    threads: 2
    params:
        cfg=evaluate_config,
    shell:
        "accelpipe --log {log} evaluate --workload {wildcards.workload}"
        " --run {wildcards.run} --prepared {input.data} --model {input.model}"
        " --config-json {params.cfg:q} --out {output} --threads {threads}"
