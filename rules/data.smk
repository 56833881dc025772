rule raw_dataset:
    input:
        runtime=data_runtime_file,
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
        code=code_for("raw"),
        cfg=raw_config,
        downloads=f"{DATA}/downloads/{{dataset}}",
    shell:
        "accelpipe --log {log} --runtime {input.runtime} raw --dataset {wildcards.dataset} --config-json {params.cfg:q}"
        " --out {output} --downloads {params.downloads}"


rule prepare_dataset:
    input:
        runtime=data_runtime_file,
        raw=f"{DATA}/raw/{{dataset}}",
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
        code=code_for("prepare"),
        cfg=prepare_config,
    shell:
        "accelpipe --log {log} --runtime {input.runtime} prepare --dataset {wildcards.dataset} --variant {wildcards.variant}"
        " --raw {input.raw} --config-json {params.cfg:q} --out {output}"
        " --workers {threads}"
