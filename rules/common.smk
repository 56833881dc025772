import json
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

# The Snakefile reads the schema from this checkout's package; the rules run the
# `accelpipe` CLI installed beside the Python that runs Snakemake (see PATH below).
PACKAGE_ROOT = Path(workflow.basedir) / "workflow"
sys.path.insert(0, str(PACKAGE_ROOT))

from accelpipe.plan import (
    capacity,
    images,
    preflight,
    pretrained,
    stage_config,
    targets,
)
from accelpipe.config import registry
from accelpipe.launch import slurm
from accelpipe.core import provenance
from accelpipe.core.codegraph import code_key, stage_code
from accelpipe.compare.runs import AGGREGATES, finished_runs, run_files, run_of
from accelpipe.config.schema import run_train as run_train_settings
from accelpipe.config.schema import validate as validate_config
from accelpipe.datasets.download import DOWNLOADS_ENV
from accelpipe.core.errors import AccelpipeError, ConfigError
from accelpipe.config.runtime import EVAL_SETTINGS_ENV, RUNTIME_ENV
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
# One image per framework for the backend (<backend>-pytorch, <backend>-tensorflow), each
# tagged by the hash of its Dockerfile, requirements and the code its stages run. Only the
# container runtimes need them.
IMAGES = (
    {
        framework: images.image_ref(
            images.spec_for(config["backend"], framework),
            config["containers"]["registry"],
        )
        for framework in registry.FRAMEWORKS
    }
    if RUNTIME in ("docker", "apptainer")
    else {}
)


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
# the config does not have, with a message naming the key, before any job runs. A run is a
# name, or a fold of one (`fold<k>`, `<name>/fold<k>`: accelpipe.config.schema.split_fold); `cv`
# is the default run's cross-validation, `<name>/cv` another run's.
wildcard_constraints:
    workload="[a-z0-9]+",
    dataset="[a-z0-9]+",
    variant="[a-z0-9]+",
    run="([A-Za-z0-9_-]+/)?fold[0-9]+|(?!(cv|grid|ttt|benchmark|compare|diff)$)[A-Za-z0-9_-]+",
    cv="([A-Za-z0-9_-]+/)?cv",
    row="(auto|bf16|fp16|fp32)-b[1-9][0-9]*",


# a run of results/<workload>/diff/<A>_vs_<B> (rules/diff.smk): a run's name without `_vs_`
DIFF_RUN = f"(?!({'|'.join(AGGREGATES)})$)(?:(?!_vs_)[A-Za-z0-9_-])+"


def host_paths():
    """Host paths a containerised stage must see besides the working directory."""
    paths = [os.path.abspath(DATA)]
    for block in config["datasets"].values():
        if block["source"].startswith("path:"):
            paths.append(os.path.abspath(block["source"].removeprefix("path:")))
    paths += [os.path.abspath(p) for p in pretrained.host_paths(config)]
    return paths


def framework(wildcards):
    """The framework whose image runs the job: its workload's, else its dataset's (or, for
    starting weights, their workload's)."""
    if "workload" in wildcards.keys():
        return checked(registry.workload, wildcards.workload).framework
    if "weights" in wildcards.keys():
        return checked(pretrained.framework, config, wildcards.weights)
    return checked(registry.dataset, wildcards.dataset).framework


def container_image(wildcards):
    """The container directive: with --sdm apptainer Snakemake runs the rule in this image;
    for both container runtimes the URI is Snakemake's software-env rerun trigger, so a
    rebuilt image re-runs what ran in the old one."""
    if not IMAGES:
        return None
    return f"docker://{IMAGES[framework(wildcards)]}"


def runtime_settings(framework):
    """How `accelpipe` runs a framework's stages: here, or in its image (runtime docker)."""
    runtime = {
        "runtime": "docker" if RUNTIME == "docker" else "local",
        "backend": config["backend"],
        "pool": config["accelerators"]["pool"],
        "wait_s": config["accelerators"]["wait_s"],
    }
    if RUNTIME == "docker":
        c = config["containers"]
        runtime |= {
            "image": IMAGES[framework],
            "mounts": host_paths(),
            "env": c["env"],
            "docker_host": c["docker_host"],
            "build": {"base_image": c["base_image"], "offline": c["offline"]},
        }
    return runtime


# Where the stages run travels in the environment every job inherits (accelpipe.config.runtime),
# not in params or inputs: it is not what a stage makes, so a new backend, runtime or pool
# never re-makes the data. Stages whose results depend on the device carry the backend in
# their config slice and the image in `image_key`.
os.environ[RUNTIME_ENV] = json.dumps(
    {f: runtime_settings(f) for f in registry.FRAMEWORKS}
)
os.environ[f"APPTAINERENV_{RUNTIME_ENV}"] = os.environ[RUNTIME_ENV]
# Evaluate settings that cannot change what training makes (the batch size of a forward pass,
# loader workers: config.EVAL_OUTSIDE_TRAIN_KEY) are not in train's params, Snakemake's rerun
# trigger: the train jobs evaluating inside training read them from here (docs/stages.md).
os.environ[EVAL_SETTINGS_ENV] = json.dumps(stage_config.eval_settings(config))
os.environ[f"APPTAINERENV_{EVAL_SETTINGS_ENV}"] = os.environ[EVAL_SETTINGS_ENV]
# How downloads are watched (rate floor, progress lines, lock wait) cannot change what a raw
# job makes either: the raw jobs read it from here, not from their params.
os.environ[DOWNLOADS_ENV] = json.dumps(config["downloads"])
os.environ[f"APPTAINERENV_{DOWNLOADS_ENV}"] = os.environ[DOWNLOADS_ENV]


# The preflight of each framework's image: `accelpipe doctor` once per backend and image
# (rules/preflight.smk), named by the image (or backend and framework where stages run here).
PREFLIGHT = {
    preflight.name(config["backend"], f, IMAGES.get(f)): f for f in registry.FRAMEWORKS
}


def preflight_input(wildcards):
    """Train jobs (and the publishing of their runs) on cuda, rocm and gaudi need the
    preflight of their image; the cpu backend has none."""
    if config["backend"] == "cpu":
        return {}
    f = framework(wildcards)
    return {"preflight": preflight.path(config["backend"], f, IMAGES.get(f))}


def preflight_arg(wildcards):
    """publish's --preflight: the file of the run's image, empty on the cpu backend."""
    return preflight_input(wildcards).get("preflight", "")


def preflight_framework(wildcards):
    if wildcards.image not in PREFLIGHT:
        raise WorkflowError(
            f"invalid target: work/preflight/{wildcards.image}.json is no preflight of this "
            f"config (backend {config['backend']}: {', '.join(sorted(PREFLIGHT))})"
        )
    return PREFLIGHT[wildcards.image]


def preflight_container(wildcards):
    """--sdm apptainer: the preflight runs in the image its train jobs run in."""
    return f"docker://{IMAGES[preflight_framework(wildcards)]}" if IMAGES else None


def preflight_needs(wildcards):
    """What the image's train jobs ask (accelpipe.plan.preflight.needs): resources, not params,
    so a changed device count never re-runs the preflight (and every train after it)."""
    return preflight.needs(config, preflight_framework(wildcards))


def preflight_gpus(wildcards):
    """Slurm --gpus of the preflight job on cuda and rocm: as many as the biggest train job
    asks per node, so it checks what such a job gets."""
    if config["backend"] not in ("cuda", "rocm"):
        return 0
    return preflight_needs(wildcards)["devices"]


def image_key(wildcards):
    """Params of the stages after the data: the image they run in (docker or apptainer),
    so a rebuilt image re-runs them; "local" where they run in this environment."""
    return IMAGES.get(framework(wildcards), "local")


def checked(check, *args):
    """Run a `targets` check; a target the config cannot have stops the plan, naming the key."""
    try:
        return check(*args)
    except AccelpipeError as err:  # a bad key, or a bad data file it reads
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
    """Slurm `--gpus` per train job on cuda and rocm (0: no flag): the job's total, one per
    process on every node. Gaudi clusters name their gres per site: profiles/slurm-gaudi
    sets it."""
    if config["backend"] not in ("cuda", "rocm"):
        return 0
    settings = run_train(wildcards)
    return settings["devices"] * settings["nodes"]


def evaluate_gpus(wildcards):
    return 1 if config["backend"] in ("cuda", "rocm") else 0


def train_mem_mb(wildcards):
    """Slurm --mem of a train job: what its processes on a node need (accelpipe.plan.capacity,
    the figures train checks before it starts), at least 8 GB."""
    run_train(wildcards)  # an unknown run is named first
    return capacity.train_mem_mb(config, wildcards.workload, wildcards.run)


def raw_disk_mb(wildcards):
    """disk_mb of a raw job: its download and extraction, from the dataset's figures
    (accelpipe.plan.capacity, those its own disk check uses)."""
    return capacity.data_disk_mb(config, wildcards.dataset, "raw")


def prepare_disk_mb(wildcards):
    """disk_mb of a prepare job: the prepared copy it writes, from the same figures."""
    return capacity.data_disk_mb(config, wildcards.dataset, "prepare")


def train_nodes(wildcards):
    """Nodes a train job spans; under Slurm one job task per node, from which the launch
    starts its srun step (torchrun per node, or one TensorFlow worker per device)."""
    return run_train(wildcards)["nodes"]


def nodes_that_fit(wildcards):
    """More nodes than the largest partition of the Slurm cluster here holds stop the plan,
    naming the workload's key (sbatch would refuse the job without naming it). Called from
    the train job's params, which Snakemake evaluates while it plans; no Slurm, no check.
    """
    nodes = run_train(wildcards)["nodes"]
    largest = slurm.largest_partition() if nodes > 1 else None
    if largest is not None and nodes > largest:
        raise WorkflowError(
            f"config key '{wildcards.workload}.train.nodes': {nodes} nodes, but the largest "
            f"partition of this Slurm cluster has {largest}"
        )


def evaluate_accelerators(wildcards):
    """Evaluation runs in one process on one accelerator."""
    return 0 if config["backend"] == "cpu" else 1


def as_json(value):
    """Config slices travel to the CLI as canonical JSON (also Snakemake's params trigger)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def code_for(stage):
    """Params function: the key of the package code a stage executes (its import graph, each
    module's AST without docstrings), so editing what a module runs re-runs the stages that
    import it and no others, and a comment or docstring re-runs nothing."""

    def key(wildcards):
        plugin = wildcards.get("dataset") or wildcards.get("workload")
        if "dataset" in wildcards.keys():
            checked(targets.check_dataset, plugin)
        elif "workload" in wildcards.keys():
            workload_data(wildcards)
        return code_key(stage_code(entry_modules(stage, plugin)))

    return key


def raw_config(wildcards):
    """The raw job's slice; where its folder is still to be made, the disk it needs is
    checked first (accelpipe.plan.capacity): not enough stops the plan in one line."""
    slice_json = stage_json(stage_config.raw, wildcards.dataset)
    verdict = capacity.plan_raw_verdict(config, wildcards.dataset)
    if verdict is not None:
        raise WorkflowError(verdict)
    return slice_json


def prepare_config(wildcards):
    return stage_json(stage_config.prepare, wildcards.dataset, wildcards.variant)


def train_config(wildcards):
    nodes_that_fit(wildcards)
    return stage_json(stage_config.train, wildcards.workload, wildcards.run)


def evaluate_config(wildcards):
    return stage_json(stage_config.evaluate, wildcards.workload, wildcards.run)


def publish_config(wildcards):
    return stage_json(stage_config.publish, wildcards.workload, wildcards.run)


def stage_json(slice_of, *names):
    """A stage's config slice (accelpipe.plan.stage_config) as the JSON its rule passes."""
    return as_json(checked(slice_of, config, *names))


# Starting weights (rules/weights.smk): a train job (and a benchmark row) depends on them only
# where its model names a pretrained source.
def weights_config(wildcards):
    return as_json(checked(pretrained.weights_slice, config, wildcards.weights))


def run_weights_input(wildcards):
    """{"weights": folder} where the run's model starts from pretrained weights, else {}."""
    if "run" in wildcards.keys():
        name = checked(
            pretrained.run_weights, config, wildcards.workload, wildcards.run
        )
    else:  # a benchmark row: the workload's own model
        name = checked(pretrained.base_weights, config, wildcards.workload)
    return {"weights": f"{DATA}/weights/{name}"} if name else {}


def run_weights_arg(wildcards):
    """train's --weights: the folder, or empty where the model starts from random init."""
    return run_weights_input(wildcards).get("weights", "")


def raw_dir(wildcards):
    dataset, _ = workload_data(wildcards)
    return f"{DATA}/raw/{dataset}"


def prepared_dir(wildcards):
    dataset, variant = workload_data(wildcards)
    return f"{DATA}/prepared/{dataset}/{variant}"


def fold_results(wildcards):
    runs = checked(
        targets.cross_validation_runs, config, wildcards.workload, wildcards.cv
    )
    return [f"results/{wildcards.workload}/{run}" for run in runs]


def grid_results(wildcards):
    runs = checked(targets.check_grid, config, wildcards.workload)
    return [f"results/{wildcards.workload}/{run}" for run in runs]


def ttt_results(wildcards):
    runs = checked(targets.check_ttt, config, wildcards.workload)
    return [f"results/{wildcards.workload}/{run}" for run in runs]


def grid_config(wildcards):
    """The grid's keys (its columns); the runs themselves are the rule's inputs."""
    return as_json({"keys": sorted(config[wildcards.workload]["grid"])})


def benchmark_row_train(wildcards):
    """A benchmark row's train settings (its precision and global batch applied)."""
    return checked(
        stage_config.benchmark_row, config, wildcards.workload, wildcards.row
    )["train"]


def benchmark_accelerators(wildcards):
    """A benchmark row leases its devices as a train job does: each row its own cards."""
    if config["backend"] == "cpu":
        return 0
    return benchmark_row_train(wildcards)["devices"]


def benchmark_gpus(wildcards):
    if config["backend"] not in ("cuda", "rocm"):
        return 0
    settings = benchmark_row_train(wildcards)
    return settings["devices"] * settings["nodes"]


def benchmark_nodes(wildcards):
    return benchmark_row_train(wildcards)["nodes"]


def benchmark_row_config(wildcards):
    return stage_json(stage_config.benchmark_row, wildcards.workload, wildcards.row)


def benchmark_run(wildcards):
    return checked(targets.benchmark_run, config, wildcards.workload)


def benchmark_rows(wildcards):
    rows = checked(targets.benchmark_rows, config, wildcards.workload)
    return [f"work/{wildcards.workload}/benchmark/{row}" for row in rows]


def benchmark_config(wildcards):
    return stage_json(stage_config.benchmark, wildcards.workload)


def compare_runs(wildcards):
    """results/compare: every finished run's folder as Snakemake plans; none is one message."""
    runs = finished_runs(Path("results"))
    if not runs:
        raise WorkflowError(
            "results/compare: no finished run yet (no results/<workload>/<run>/provenance.json); "
            "make runs first (`accelpipe targets` lists them), then results/compare in a "
            "command of its own (it compares the runs that exist when Snakemake starts)"
        )
    return [str(run) for run in runs]


def compare_inputs(wildcards):
    """The files of those runs that the page shows: a re-published run re-runs compare."""
    return [str(f) for run in compare_runs(wildcards) for f in run_files(Path(run))]


def compare_config(wildcards):
    """The prices, and each run's config hash under this config: the page flags a run whose
    recorded hash differs (stale), and a changed config re-makes the page."""
    runs = [run_of(Path(run)) for run in compare_runs(wildcards)]
    hashes = stage_config.current_hashes(config, runs)
    return as_json({"cost": config["cost"], "config_hashes": hashes})


def built_results(wildcards):
    """The default target's run, and where Snakemake plans without running jobs (--report,
    --summary, --dag, --list-changes) every result folder of this config already built, so
    `snakemake --report results/report.html` holds every built run and aggregate. A run is
    built when published (provenance.json); a folder this config cannot name is left
    out."""
    default = [targets.default_target(config)]
    # running jobs (or a dry run of them): the default target only
    if workflow.execution_settings is not None:
        return default
    runs = {str(run) for run in finished_runs(Path("results"))}
    built = [
        target.path
        for target in targets.buildable(config, len(runs))
        if target.path in runs
        or (target.kind in AGGREGATES and runs and Path(target.path).is_dir())
    ]
    return list(dict.fromkeys(default + built))
