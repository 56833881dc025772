# accelpipe doctor before the first long job: once per backend and image (accelpipe.plan.preflight).
# On cuda, rocm and gaudi the train jobs need its file, so a failing check stops the workflow
# before any of them starts; it has no data input, so it runs first (and first among the
# jobs ready at the start: priority). The cpu backend needs none. It has no code key and its
# asks travel in resources: a re-run would re-run every train of the image after it (a new
# image, a new tag, is a new preflight anyway).
rule preflight:
    output:
        "work/preflight/{image}.json",
    log:
        "logs/preflight/{image}.log",
    wildcard_constraints:
        image="[a-z0-9-]+",
    priority: 100
    conda:
        "../envs/cpu.yaml"
    container:
        preflight_container
    resources:
        gpu=preflight_gpus,
        devices=lambda wildcards: preflight_needs(wildcards)["devices"],
        world_size=lambda wildcards: preflight_needs(wildcards)["world_size"],
        precision=lambda wildcards: preflight_needs(wildcards)["precision"],
    params:
        framework=preflight_framework,
        backend=config["backend"],
    shell:
        "accelpipe --log {log:q} --framework {params.framework:q} doctor --backend {params.backend:q}"
        " --framework {params.framework:q} --devices {resources.devices:q} --world-size {resources.world_size:q}"
        " --precision {resources.precision:q} --json {output:q}"
