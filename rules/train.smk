rule train:
    input:
        unpack(preflight_input),
        unpack(run_weights_input),
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
        mem_mb=train_mem_mb,
        runtime=600,
    params:
        framework=framework,
        image=image_key,
        code=code_for("train"),
        weights=run_weights_arg,
        cfg=train_config,
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} --accel {resources.accel:q}"
        " train --workload {wildcards.workload:q} --run {wildcards.run:q} --prepared {input.data:q} --config-json {params.cfg:q}"
        " --out {output:q} --threads {threads:q} --weights={params.weights:q}"
