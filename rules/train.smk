rule train:
    input:
        data=prepared_dir,
        code=code_for("train"),
    output:
        directory("work/{workload}/{run}/train"),
    log:
        "logs/{workload}/{run}/train.log",
    conda:
        "../envs/torch-cpu.yaml"
    threads: 4
    resources:
        mem_mb=8000,
        runtime=600,
    params:
        cfg=train_config,
    shell:
        "accelpipe --log {log} train --workload {wildcards.workload}"
        " --run {wildcards.run} --prepared {input.data} --config-json {params.cfg:q}"
        " --out {output} --threads {threads}"
