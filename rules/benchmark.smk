rule benchmark_row:
    input:
        unpack(preflight_input),
        unpack(run_weights_input),
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
        weights=run_weights_arg,
        cfg=benchmark_row_config,
        run=benchmark_run,
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} --accel {resources.accel:q}"
        " train --workload {wildcards.workload:q} --run {params.run:q} --prepared {input.data:q} --config-json {params.cfg:q}"
        " --out {output:q} --threads {threads:q} --weights={params.weights:q}"


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
        "accelpipe --log {log:q} --framework {params.framework:q} benchmark --workload {wildcards.workload:q} --rows {input.rows:q}"
        " --config-json {params.cfg:q} --out {output:q}"
