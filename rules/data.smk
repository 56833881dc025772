rule raw_dataset:
    input:
        image=image_input,
        code=code_for("raw"),
    output:
        directory(f"{DATA}/raw/{{dataset}}"),
    log:
        "logs/raw/{dataset}.log",
    cache: "omit-software"
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    params:
        runtime=runtime_config,
        cfg=raw_config,
        downloads=f"{DATA}/downloads/{{dataset}}",
    shell:
        "accelpipe --log {log} --runtime {params.runtime:q} raw --dataset {wildcards.dataset} --config-json {params.cfg:q}"
        " --out {output} --downloads {params.downloads}"


rule prepare_dataset:
    input:
        image=image_input,
        raw=f"{DATA}/raw/{{dataset}}",
        code=code_for("prepare"),
    output:
        directory(f"{DATA}/prepared/{{dataset}}/{{variant}}"),
    log:
        "logs/prepare/{dataset}_{variant}.log",
    cache: "omit-software"
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    threads: 4
    params:
        runtime=runtime_config,
        cfg=prepare_config,
    shell:
        "accelpipe --log {log} --runtime {params.runtime:q} prepare --dataset {wildcards.dataset} --variant {wildcards.variant}"
        " --raw {input.raw} --config-json {params.cfg:q} --out {output}"
        " --workers {threads}"
