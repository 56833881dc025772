rule summarize_trace:
    input:
        image=image_input,
        train="work/{workload}/{run}/train",
        code=code_for("summarize-trace"),
    output:
        directory("work/{workload}/{run}/trace"),
    log:
        "logs/{workload}/{run}/summarize_trace.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    params:
        runtime=runtime_config,
    shell:
        "accelpipe --log {log} --runtime {params.runtime:q} summarize-trace --traces {input.train}/traces --out {output}"
