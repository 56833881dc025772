rule build_image:
    output:
        "work/images/{image}.json",
    log:
        "logs/images/{image}.log",
    conda:
        "../envs/torch-cpu.yaml"
    params:
        backend=config["backend"],
        options=image_build_options,
    shell:
        "accelpipe --log {log} images build --backend {params.backend} {params.options}"
        " --out {output}"
