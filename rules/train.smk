rule train:
    input:
        unpack(preflight_input),
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
        framework=framework,
        image=image_key,
        code=code_for("train"),
        cfg=train_config,
    shell:
        "accelpipe --log {log} --framework {params.framework} --accel {resources.accel}"
        " train --workload {wildcards.workload} --run {wildcards.run} --prepared {input.data} --config-json {params.cfg:q}"
        " --out {output} --threads {threads}"
