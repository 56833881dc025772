rule evaluate:
    input:
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
        framework=framework,
        image=image_key,
        code=code_for("evaluate"),
        cfg=evaluate_config,
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} --accel {resources.accel:q} evaluate --workload {wildcards.workload:q}"
        " --run {wildcards.run:q} --prepared {input.data:q} --model {input.model:q}"
        " --config-json {params.cfg:q} --out {output:q} --threads {threads:q}"
