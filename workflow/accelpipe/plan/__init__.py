"""What Snakemake imports to plan the DAG: the targets a config asks for, each stage's config
slice, the preflight of each image, the images' tags and the runs' starting weights."""
