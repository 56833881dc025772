rule benchmark_row:
    input:
        unpack(preflight_input),
        data=prepared_dir,
    output:
        directory("work/{workload}/benchmark/{row}"),
    log:
        "logs/{workload}/benchmark/{row}.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    threads: 4
    resources:
        accel=benchmark_accelerators,
        gpu=benchmark_gpus,
        nodes=benchmark_nodes,
        tasks=benchmark_nodes,
        mem_mb=8000,
        runtime=600,
    params:
        framework=framework,
        image=image_key,
        code=code_for("train"),
        cfg=benchmark_row_config,
        run=benchmark_run,
    shell:
        "accelpipe --log {log} --framework {params.framework} --accel {resources.accel}"
        " train --workload {wildcards.workload} --run {params.run} --prepared {input.data} --config-json {params.cfg:q}"
        " --out {output} --threads {threads}"


rule benchmark:
    input:
        rows=benchmark_rows,
    output:
        report(
            directory("results/{workload}/benchmark"),
            patterns=["{name}.png", "{name}.csv", "{name}.json"],
            caption="../report/benchmark.rst",
            category="{workload}",
            subcategory="benchmark",
        ),
    log:
        "logs/{workload}/benchmark.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    params:
        framework=framework,
        image=image_key,
        code=code_for("benchmark"),
        cfg=benchmark_config,
    shell:
        "accelpipe --log {log} --framework {params.framework} benchmark --workload {wildcards.workload} --rows {input.rows}"
        " --config-json {params.cfg:q} --out {output}"
