rule summarize_trace:
    input:
        runtime=runtime_file,
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
        code=code_for("summarize-trace"),
    shell:
        "accelpipe --log {log} --runtime {input.runtime} summarize-trace --traces {input.train}/traces --out {output}"
