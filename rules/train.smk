rule train:
    input:
        image=image_input,
        data=prepared_dir,
        code=code_for("train"),
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
        runtime=runtime_config,
        cfg=train_config,
    shell:
        "accelpipe --log {log} --runtime {params.runtime:q} --accel {resources.accel}"
        " train --workload {wildcards.workload} --run {wildcards.run} --prepared {input.data} --config-json {params.cfg:q}"
        " --out {output} --threads {threads}"
