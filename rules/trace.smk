rule summarize_trace:
    input:
        train="work/{workload}/{run}/train",
        code=package_files(["traces.py"]),
    output:
        directory("work/{workload}/{run}/trace"),
    log:
        "logs/{workload}/{run}/summarize_trace.log",
    conda:
        "../envs/torch-cpu.yaml"
    shell:
        "accelpipe --log {log} summarize-trace --traces {input.train}/traces --out {output}"
