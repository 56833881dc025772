rule evaluate:
    input:
        image=image_input,
        data=prepared_dir,
        model="work/{workload}/{run}/train",
        code=code_for("evaluate"),
    output:
        directory("work/{workload}/{run}/eval"),
    log:
        "logs/{workload}/{run}/evaluate.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    threads: 2
    resources:
        accel=evaluate_accelerators,
        gpu=evaluate_gpus,
    params:
        runtime=runtime_config,
        cfg=evaluate_config,
    shell:
        "accelpipe --log {log} --runtime {params.runtime:q} --accel {resources.accel} evaluate --workload {wildcards.workload}"
        " --run {wildcards.run} --prepared {input.data} --model {input.model}"
        " --config-json {params.cfg:q} --out {output} --threads {threads}"
