rule evaluate:
    input:
        runtime=runtime_file,
        data=prepared_dir,
        model="work/{workload}/{run}/train",
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
        code=code_for("evaluate"),
        cfg=evaluate_config,
    shell:
        "accelpipe --log {log} --runtime {input.runtime} --accel {resources.accel} evaluate --workload {wildcards.workload}"
        " --run {wildcards.run} --prepared {input.data} --model {input.model}"
        " --config-json {params.cfg:q} --out {output} --threads {threads}"
