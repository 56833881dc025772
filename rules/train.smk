rule train:
    input:
        runtime=runtime_file,
        data=prepared_dir,
    output:
        directory("work/{workload}/{run}/train"),
    log:
        "logs/{workload}/{run}/train.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    threads: 4
    resources:
        accel=train_accelerators,
        gpu=train_gpus,
        nodes=train_nodes,
        tasks=train_nodes,
        mem_mb=8000,
        runtime=600,
    params:
        code=code_for("train"),
        cfg=train_config,
    shell:
        "accelpipe --log {log} --runtime {input.runtime} --accel {resources.accel}"
        " train --workload {wildcards.workload} --run {wildcards.run} --prepared {input.data} --config-json {params.cfg:q}"
        " --out {output} --threads {threads}"
