rule summarize_trace:
    input:
        train="work/{workload}/{run}/train",
    output:
        directory("work/{workload}/{run}/trace"),
    log:
        "logs/{workload}/{run}/summarize_trace.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    params:
        framework=framework,
        image=image_key,
        code=code_for("summarize-trace"),
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} summarize-trace --traces {input.train:q}/traces --out {output:q}"
