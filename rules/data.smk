rule raw_dataset:
    input:
        code=code_for("raw"),
    output:
        directory(f"{DATA}/raw/{{dataset}}"),
    log:
        "logs/raw/{dataset}.log",
    cache: "omit-software"
    conda:
        "../envs/torch-cpu.yaml"
    params:
        cfg=raw_config,
        downloads=f"{DATA}/downloads/{{dataset}}",
    shell:
        "accelpipe --log {log} raw --dataset {wildcards.dataset} --config-json {params.cfg:q}"
        " --out {output} --downloads {params.downloads}"


rule prepare_dataset:
    input:
        raw=f"{DATA}/raw/{{dataset}}",
        code=code_for("prepare"),
    output:
        directory(f"{DATA}/prepared/{{dataset}}/{{variant}}"),
    log:
        "logs/prepare/{dataset}_{variant}.log",
    cache: "omit-software"
    conda:
        "../envs/torch-cpu.yaml"
    threads: 4
    params:
        cfg=prepare_config,
    shell:
        "accelpipe --log {log} prepare --dataset {wildcards.dataset} --variant {wildcards.variant}"
        " --raw {input.raw} --config-json {params.cfg:q} --out {output}"
        " --workers {threads}"
