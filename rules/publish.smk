rule publish_run:
    input:
        unpack(preflight_input),
        raw=raw_dir,
        data=prepared_dir,
        model="work/{workload}/{run}/train",
        eval="work/{workload}/{run}/eval",
        trace="work/{workload}/{run}/trace",
    output:
        report(
            directory("results/{workload}/{run}"),
            patterns=["{name}.png", "{name}.csv", "{name}.json", "{name}.md"],
            caption="../report/run.rst",
            category="{workload}",
            subcategory="{run}",
        ),
    log:
        "logs/{workload}/{run}/publish.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    params:
        framework=framework,
        image=image_key,
        code=code_for("publish"),
        cfg=publish_config,
        preflight=preflight_arg,
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} publish --workload {wildcards.workload:q} --raw {input.raw:q} --prepared {input.data:q} --model {input.model:q}"
        " --eval {input.eval:q} --trace {input.trace:q} --config-json {params.cfg:q}"
        " --preflight={params.preflight:q} --out {output:q}"


rule cross_validation:
    input:
        runs=fold_results,
    output:
        report(
            directory("results/{workload}/{cv}"),
            patterns=["{name}.csv", "{name}.json"],
            caption="../report/cv.rst",
            category="{workload}",
            subcategory="{cv}",
        ),
    log:
        "logs/{workload}/{cv}.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    params:
        framework=framework,
        image=image_key,
        code=code_for("aggregate"),
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} aggregate --runs {input.runs:q} --out {output:q}"


rule grid:
    input:
        runs=grid_results,
    output:
        report(
            directory("results/{workload}/grid"),
            patterns=["{name}.png", "{name}.csv", "{name}.json"],
            caption="../report/grid.rst",
            category="{workload}",
            subcategory="grid",
        ),
    log:
        "logs/{workload}/grid.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    params:
        framework=framework,
        image=image_key,
        code=code_for("grid"),
        cfg=grid_config,
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} grid --workload {wildcards.workload:q} --runs {input.runs:q}"
        " --config-json {params.cfg:q} --out {output:q}"


rule ttt:
    input:
        runs=ttt_results,
    output:
        report(
            directory("results/{workload}/ttt"),
            patterns=["{name}.csv", "{name}.json"],
            caption="../report/ttt.rst",
            category="{workload}",
            subcategory="time to target",
        ),
    log:
        "logs/{workload}/ttt.log",
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    params:
        framework=framework,
        image=image_key,
        code=code_for("ttt"),
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} ttt --workload {wildcards.workload:q} --runs {input.runs:q}"
        " --out {output:q}"
