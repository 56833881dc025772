rule build_image:
    output:
        "work/images/{image}.json",
    log:
        "logs/images/{image}.log",
    conda:
        "../envs/cpu.yaml"
    params:
        backend=config["backend"],
        framework=image_framework,
        options=image_build_options,
    shell:
        "accelpipe --log {log} images build --backend {params.backend} --framework {params.framework}"
        " {params.options}"
        " --out {output}"
