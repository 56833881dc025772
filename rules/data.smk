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
    resources:
        disk_mb=raw_disk_mb,
    params:
        framework=framework,
        code=code_for("raw"),
        cfg=raw_config,
        downloads=f"{DATA}/downloads/{{dataset}}",
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} raw --dataset {wildcards.dataset:q} --config-json {params.cfg:q}"
        " --out {output:q} --downloads {params.downloads:q}"


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
    resources:
        disk_mb=prepare_disk_mb,
    params:
        framework=framework,
        code=code_for("prepare"),
        cfg=prepare_config,
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} prepare --dataset {wildcards.dataset:q} --variant {wildcards.variant:q}"
        " --raw {input.raw:q} --config-json {params.cfg:q} --out {output:q}"
        " --workers {threads:q}"
