import json
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

# The Snakefile reads the schema from this checkout's package; the rules run the
# `accelpipe` CLI installed beside the Python that runs Snakemake (see PATH below).
PACKAGE_ROOT = Path(workflow.basedir) / "workflow"
sys.path.insert(0, str(PACKAGE_ROOT))

from accelpipe import containers, provenance, targets
from accelpipe.codegraph import stage_code
from accelpipe.config import run_train as run_train_settings
from accelpipe.config import validate as validate_config
from accelpipe.errors import ConfigError
from accelpipe.stages import entry_modules

try:
    _validated = validate_config(dict(config))
except ConfigError as err:
    raise WorkflowError(f"invalid config: {err}") from None
config.clear()
config.update(_validated)

DATA = config["data_root"]
# provenance.json records the commit of this checkout, read here because a job may run in an
# image without it; jobs get it through the environment (apptainer through APPTAINERENV_).
_git_state = json.dumps(provenance.git_state(Path(workflow.basedir)))
os.environ[provenance.GIT_STATE_ENV] = _git_state
os.environ[f"APPTAINERENV_{provenance.GIT_STATE_ENV}"] = _git_state
RUNTIME = config["runtime"]
# The backend's image, tagged by the hash of its Dockerfile and the package sources.
IMAGE = containers.image_ref(
    containers.spec_for(config["backend"]), config["containers"]["registry"]
)
IMAGE_MARKER = f"work/images/{containers.image_slug(IMAGE)}.json"
# The container directive: with --sdm apptainer (runtime apptainer) Snakemake runs every
# rule in the image; for both container runtimes the URI is Snakemake's software-env
# rerun trigger, so a rebuilt image re-runs what ran in the old one.
CONTAINER = f"docker://{IMAGE}" if RUNTIME in ("docker", "apptainer") else None


# The rules run `accelpipe` from PATH. Put the directory of the Python running Snakemake
# first, so `.venv/bin/snakemake` runs that venv's `accelpipe` from a shell that never
# activated it. Jobs inside an image (--sdm apptainer) or a conda env use that
# environment's own PATH; Slurm jobs re-read this file in the job's Snakemake.
envvars:
    "PATH",


os.environ["PATH"] = os.pathsep.join(
    [str(Path(sys.executable).parent), os.environ["PATH"]]
)


# Names match loosely; the input functions then refuse a workload, run, dataset or variant
# the config does not have, with a message naming the key, before any job runs.
wildcard_constraints:
    workload="[a-z0-9]+",
    dataset="[a-z0-9]+",
    variant="[a-z0-9]+",
    run="(?!cv$)[A-Za-z0-9_-]+",


def host_paths():
    """Host paths a containerised stage must see besides the working directory."""
    paths = [os.path.abspath(DATA)]
    for block in config["datasets"].values():
        if block["source"].startswith("path:"):
            paths.append(os.path.abspath(block["source"].removeprefix("path:")))
    return paths


def runtime_config(wildcards):
    """How `accelpipe` runs a stage: here, or in the backend's image (runtime docker)."""
    runtime = {
        "runtime": "docker" if RUNTIME == "docker" else "local",
        "backend": config["backend"],
        "pool": config["accelerators"]["pool"],
    }
    if RUNTIME == "docker":
        runtime |= {
            "image": IMAGE,
            "mounts": host_paths(),
            "env": config["containers"]["env"],
            "docker_host": config["containers"]["docker_host"],
        }
    return as_json(runtime)


def image_input(wildcards):
    """runtime docker: every stage waits for its image to be built (once)."""
    return [IMAGE_MARKER] if RUNTIME == "docker" else []


def checked(check, *args):
    """Run a `targets` check; a target the config cannot have stops the plan, naming the key."""
    try:
        return check(*args)
    except ConfigError as err:
        raise WorkflowError(f"invalid target: {err}") from None


def workload_data(wildcards):
    return checked(targets.workload_data, wildcards.workload)


def run_train(wildcards):
    """The run's train settings: `<workload>.train` with `<workload>.runs.<run>` applied."""
    checked(targets.check_run, config, wildcards.workload, wildcards.run)
    return run_train_settings(
        config[wildcards.workload], wildcards.workload, wildcards.run
    )


def train_accelerators(wildcards):
    """Accelerators a train job leases (resources: accel): one per process on this node."""
    if config["backend"] == "cpu":
        return 0
    return run_train(wildcards)["devices"]


def train_gpus(wildcards):
    """Slurm `--gpus` per train job on cuda and rocm (0: no flag). Gaudi clusters name
    their gres per site: profiles/slurm-gaudi sets it."""
    if config["backend"] not in ("cuda", "rocm"):
        return 0
    return run_train(wildcards)["devices"]


def evaluate_gpus(wildcards):
    return 1 if config["backend"] in ("cuda", "rocm") else 0


def train_nodes(wildcards):
    """Nodes a train job spans; under Slurm one launcher task (srun + torchrun) per node."""
    return run_train(wildcards)["nodes"]


def evaluate_accelerators(wildcards):
    """Evaluation runs in one process on one accelerator."""
    return 0 if config["backend"] == "cpu" else 1


def image_build_options(wildcards):
    c = config["containers"]
    options = [f"--registry {c['registry']}"]
    if c["base_image"]:
        options.append(f"--base-image {c['base_image']}")
    if c["offline"]:
        options.append("--offline")
    if c["docker_host"]:
        options.append(f"--docker-host {c['docker_host']}")
    return " ".join(options)


def as_json(value):
    """Config slices travel to the CLI as canonical JSON (also Snakemake's params trigger)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def code_for(stage):
    """Input function: the package files a stage executes (its import graph), so editing
    one re-runs the stages that import it and no others."""

    def modules(wildcards):
        plugin = wildcards.get("dataset") or wildcards.get("workload")
        if "dataset" in wildcards.keys():
            checked(targets.check_dataset, plugin)
        elif "workload" in wildcards.keys():
            workload_data(wildcards)
        return [str(p) for p in stage_code(entry_modules(stage, plugin))]

    return modules


def raw_config(wildcards):
    checked(targets.check_dataset, wildcards.dataset)
    return as_json(config["datasets"][wildcards.dataset])


def prepare_config(wildcards):
    workload = checked(targets.variant_owner, wildcards.dataset, wildcards.variant)
    block = config[workload]
    slice_ = {"prepare": block.get("prepare", {})}
    if "folds" in block:
        slice_["folds"] = block["folds"]
    return as_json(slice_)


def workload_settings(wildcards):
    """The workload's config block as one run sees it: `train` resolved, `runs` dropped."""
    block = {k: v for k, v in config[wildcards.workload].items() if k != "runs"}
    return block | {"train": run_train(wildcards)}


def train_config(wildcards):
    block = workload_settings(wildcards)
    keys = ("model", "train", "profile", "transforms")
    return as_json(
        {"backend": config["backend"]} | {k: block[k] for k in keys if k in block}
    )


def evaluate_config(wildcards):
    block = workload_settings(wildcards)
    train = block["train"]
    precision = {k: train[k] for k in ("precision", "channels_last") if k in train}
    return as_json(
        {
            "backend": config["backend"],
            "evaluate": block["evaluate"],
            "train": precision,
        }
    )


def publish_config(wildcards):
    dataset, _ = workload_data(wildcards)
    return as_json(
        {
            "backend": config["backend"],
            "runtime": config["runtime"],
            "datasets": {dataset: config["datasets"][dataset]},
            wildcards.workload: workload_settings(wildcards),
        }
    )


def raw_dir(wildcards):
    dataset, _ = workload_data(wildcards)
    return f"{DATA}/raw/{dataset}"


def prepared_dir(wildcards):
    dataset, variant = workload_data(wildcards)
    return f"{DATA}/prepared/{dataset}/{variant}"


def fold_results(wildcards):
    folds = checked(targets.check_cross_validation, config, wildcards.workload)
    return [f"results/{wildcards.workload}/fold{k}" for k in range(folds)]
