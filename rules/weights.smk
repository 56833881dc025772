# Starting weights (accelpipe.plan.pretrained, accelpipe.weights): fetched, checked and converted
# once into data_root/weights/<name>/, cached between workflows like the data. A train job
# (and a benchmark row) depends on them only where its model names a pretrained source.


rule weights:
    output:
        directory(f"{DATA}/weights/{{weights}}"),
    log:
        "logs/weights/{weights}.log",
    wildcard_constraints:
        weights="[A-Za-z0-9_-]+",
    cache: "omit-software"
    conda:
        "../envs/cpu.yaml"
    container:
        container_image
    params:
        framework=framework,
        code=code_for("weights"),
        cfg=weights_config,
        downloads=f"{DATA}/downloads/weights/{{weights}}",
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} weights --name {wildcards.weights:q} --config-json {params.cfg:q}"
        " --out {output:q} --downloads {params.downloads:q}"
