rule raw_dataset:
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
        framework=framework,
        code=code_for("raw"),
        cfg=raw_config,
        downloads=f"{DATA}/downloads/{{dataset}}",
    shell:
        "accelpipe --log {log} --framework {params.framework} raw --dataset {wildcards.dataset} --config-json {params.cfg:q}"
        " --out {output} --downloads {params.downloads}"


rule prepare_dataset:
    input:
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
        framework=framework,
        code=code_for("prepare"),
        cfg=prepare_config,
    shell:
        "accelpipe --log {log} --framework {params.framework} prepare --dataset {wildcards.dataset} --variant {wildcards.variant}"
        " --raw {input.raw} --config-json {params.cfg:q} --out {output}"
        " --workers {threads}"
