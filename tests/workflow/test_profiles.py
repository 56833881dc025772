"""The cluster profiles: profiles/slurm*, profiles/cluster-generic.

Snakemake's own argument parser reads each profile (with the executor plugins' settings),
the plugins' own code turns the accelerator resources into sbatch flags, and a dry run of
the workflow shows the resources each rule's jobs would ask for. tests/integration/
test_slurm.py runs profiles/slurm-test on a real Slurm.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from snakemake.cli import get_argument_parser
from snakemake_executor_plugin_slurm.submit_string import get_submit_command
from snakemake_executor_plugin_slurm.utils import set_gres_string
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

from accelpipe.config.schema import validate
from accelpipe.plan import capacity
from tests.workflow.project import Project, make_project

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"
SLURM = ("slurm", "slurm-cuda", "slurm-rocm", "slurm-gaudi", "slurm-test")
ALL = (*SLURM, "cluster-generic")
# backend -> what its profile asks Slurm for per train/evaluate job, and the sbatch flag
ACCELERATORS = {
    "cuda": ({"gpu": 1}, "--gpus=1"),  # asked by the rules themselves (resources: gpu)
    "rocm": ({"gpu": 1}, "--gpus=1"),
    "gaudi": ({"gres": "gpu:1"}, "--gres=gpu:1"),
}
ACCELERATED_RULES = {"train", "evaluate"}

per_profile = pytest.mark.parametrize("name", ALL)
per_backend = pytest.mark.parametrize("backend", sorted(ACCELERATORS))


def parse(name: str) -> Any:
    """The options Snakemake takes from the profile (no command-line arguments)."""
    return get_argument_parser(profiles=[str(PROFILES / name)]).parse_args([])


def config_pairs(values: list[str] | None) -> dict[str, str]:
    return dict(item.split("=", 1) for item in values or [])


def raw_resources(resources: Any) -> dict[str, Any]:
    """A parsed resource set as written in the profile (Snakemake evaluates it per job)."""
    return {name: resource.raw for name, resource in (resources or {}).items()}


class _Resources(dict):
    """What the plugin reads from a job's resources: .get() and attribute access."""

    __getattr__ = dict.__getitem__


def sbatch_line(resources: dict[str, Any], threads: int = 4) -> str:
    """The sbatch command the slurm plugin builds for a job with these resources."""
    job = SimpleNamespace(resources=_Resources(resources), threads=threads)
    params = {
        "run_uuid": "run",
        "slurm_logfile": "log",
        "comment_str": "rule_train",
        "account": "",
        "partition": "",
        "workdir": "/w",
    }
    return get_submit_command(job, params) + set_gres_string(job)


def test_every_cluster_profile_is_covered() -> None:
    found = {p.parent.name for p in PROFILES.glob("*/config.v8+.yaml")}
    assert {n for n in found if n.startswith(("slurm", "cluster"))} == set(ALL)


@per_profile
def test_profile_submits_every_job_and_retries_failed_ones(name: str) -> None:
    args = parse(name)
    assert args.executor == ("cluster-generic" if name == "cluster-generic" else "slurm")
    assert args.retries == 2  # a cancelled or failed job is resubmitted
    assert args.rerun_incomplete is True
    assert args.jobs > 0 and args.latency_wait > 0
    # the plugin's own settings class accepts the profile's plugin options
    ExecutorPluginRegistry().get_plugin(args.executor).get_settings(args)


@pytest.mark.parametrize("name", [n for n in SLURM if n != "slurm-test"])
def test_site_settings_are_left_to_the_site(name: str) -> None:
    # partition and account differ per site; runtime and mem_mb come from the rules
    assert parse(name).default_resources is None


@per_backend
def test_accelerator_profile_sets_the_backend(backend: str) -> None:
    assert config_pairs(parse(f"slurm-{backend}").config) == {"backend": backend}


@per_backend
def test_accelerator_requests_become_sbatch_flags(backend: str) -> None:
    wanted, flag = ACCELERATORS[backend]
    assert flag in sbatch_line(wanted).split()
    per_rule = parse(f"slurm-{backend}").set_resources
    if backend == "gaudi":  # a site-specific gres name: the profile sets it
        assert set(per_rule) == ACCELERATED_RULES | {"preflight"}
        assert all(raw_resources(resources) == wanted for resources in per_rule.values())
    else:  # GPUs come from the workflow's rules, not the profile
        assert per_rule == {}


def test_cpu_jobs_ask_for_no_accelerator() -> None:
    line = sbatch_line({"mem_mb": 8000, "runtime": 600}, threads=4).split()
    assert {"--mem", "8000", "-t", "600", "--cpus-per-task=4", "--ntasks=1"} <= set(line)
    assert not any(flag.startswith(("--gpus", "--gres")) for flag in line)


@pytest.mark.parametrize("name", ["slurm", "cluster-generic", "slurm-test"])
def test_cpu_profiles_leave_the_backend_alone(name: str) -> None:
    args = parse(name)
    assert args.config is None and args.set_resources == {}


def test_test_profile_polls_squeue_for_a_cluster_without_accounting() -> None:
    args = parse("slurm-test")
    settings = ExecutorPluginRegistry().get_plugin("slurm").get_settings(args)
    assert settings.status_command == "squeue"
    # squeue forgets a job MinJobAge (300 s) after it ends; the plugin keeps using squeue
    # only while MinJobAge >= 3x this interval
    assert settings.init_seconds_before_status_checks * 3 <= 300
    assert settings.keep_successful_logs  # tests read the Slurm job ids from the logs
    assert raw_resources(args.default_resources)["slurm_partition"] == "debug"


def test_cluster_generic_submits_with_sbatch_by_default() -> None:
    args = parse("cluster-generic")
    submit = args.cluster_generic_submit_cmd
    assert "sbatch --parsable" in submit  # the first line of output is the job id
    for field in ("{threads}", "{resources.mem_mb}", "{resources.runtime}"):
        assert field in submit
    # every rule has what the submit command fills in
    assert {"runtime", "mem_mb"} <= set(raw_resources(args.default_resources))
    assert args.cluster_generic_cancel_cmd == "scancel"


@pytest.mark.parametrize(
    ("squeue", "sacct", "status"),
    [
        ("PENDING", None, "running"),
        ("RUNNING", None, "running"),
        ("COMPLETING", None, "running"),
        ("COMPLETED", None, "success"),
        ("FAILED", None, "failed"),
        ("CANCELLED", None, "failed"),
        ("TIMEOUT", None, "failed"),
        ("OUT_OF_MEMORY", None, "failed"),
        (None, "CANCELLED by 1000", "failed"),  # gone from squeue, sacct remembers
        (None, "COMPLETED", "success"),
        (None, None, "success"),  # nobody remembers it: Snakemake then checks the outputs
    ],
)
def test_cluster_generic_status_command(
    tmp_path: Path, squeue: str | None, sacct: str | None, status: str
) -> None:
    # stand-ins that answer like squeue/sacct do for a known job, or fail like for a gone one
    for tool, state in (("squeue", squeue), ("sacct", sacct)):
        script = tmp_path / tool
        answer = f"echo '{state}'" if state else "echo 'Invalid job id specified' >&2; exit 1"
        script.write_text(f"#!/bin/sh\n{answer}\n")
        script.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    command = parse("cluster-generic").cluster_generic_status_cmd
    # the plugin runs "<status command> '<job id>'" through the shell
    out = subprocess.run(
        f"{command} '42'", shell=True, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout == f"{status}\n"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return make_project(tmp_path_factory.mktemp("profiles"))


def planned_resources(project: Project, name: str) -> dict[str, dict[str, str]]:
    """rule -> the resources a dry run through the profile shows for its job."""
    proc = project.snakemake(
        "--profile", str(PROFILES / name), "--dry-run", "--forceall", "work/unet2d/fold0/eval"
    )
    jobs = re.findall(r"^rule (\w+):\n(?:    .*\n)*?    resources: (.*)$", proc.stdout, re.M)
    return {rule: dict(item.split("=", 1) for item in res.split(", ")) for rule, res in jobs}


@pytest.mark.e2e
@per_profile
def test_workflow_dry_runs_through_the_profile(project: Project, name: str) -> None:
    planned = planned_resources(project, name)
    backend = name.removeprefix("slurm-") if name.removeprefix("slurm-") in ACCELERATORS else None
    rules = {"raw_dataset", "prepare_dataset", "train", "evaluate"}
    assert set(planned) == rules | ({"preflight"} if backend else set())
    for rule, resources in planned.items():
        # a gpu resource of 0 makes no --gpus flag (the plugin skips falsy values)
        asked = {k: resources.get(k) if resources.get(k) != "0" else None for k in ("gpu", "gres")}
        if rule == "preflight":
            # the devices the biggest train job asks (the tiny config's ddp runs: 2) on cuda
            # and rocm, the profile's gres on gaudi; nothing leased
            wanted = ACCELERATORS["gaudi"][0] if backend == "gaudi" else {"gpu": 2}
            assert {k: v for k, v in asked.items() if v} == {k: str(v) for k, v in wanted.items()}
            assert "accel" not in resources
        elif backend and rule in ACCELERATED_RULES:
            wanted = ACCELERATORS[backend][0]
            assert {k: v for k, v in asked.items() if v} == {k: str(v) for k, v in wanted.items()}
            assert resources["accel"] == "1"  # accelpipe leases as many as Slurm gives
        else:
            assert asked == {"gpu": None, "gres": None}, rule
    # train's own time and memory, not the profile's
    assert planned["train"]["runtime"] == "600" and planned["train"]["mem_mb"] == "8000"
    # the data jobs' disk from the dataset's figures (the ones their own checks use)
    config = validate(yaml.safe_load((project.root / "config.yaml").read_text()))
    for rule, stage in (("raw_dataset", "raw"), ("prepare_dataset", "prepare")):
        assert planned[rule]["disk_mb"] == str(capacity.data_disk_mb(config, "brats", stage))
