"""A copy of the workflow in a temp dir with a tiny config, and a way to run snakemake on it.

Tests edit the copy (config, package modules) freely; the checkout is never touched.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COPIED = (
    "Snakefile",
    "rules",
    "report",
    "envs",
    "workflow",
    "requirements",
    "config.yaml",
    "docker",
    "pyproject.toml",
    "README.md",
    ".dockerignore",
)

# The tiny config (.test/config.yaml, runnable by hand): every stage in seconds on 2 cores.
TINY_CONFIG = yaml.safe_load((REPO / ".test" / "config.yaml").read_text())

# What each workload's end-to-end tests build on the tiny config, once per test run
# (built_project): its named runs, unet2d's fold 0, the segmenter's grid.
TINY_RUNS = {
    "unet2d": ("results/unet2d/fold0",),
    "resnet50": ("results/resnet50/bf16", "results/resnet50/fp32"),
    "swinunetr": ("results/swinunetr/default",),
    "ssd": ("results/ssd/bf16", "results/ssd/fp32"),
    "segmenter": ("results/segmenter/bf16", "results/segmenter/fp32", "results/segmenter/grid"),
}

T = TypeVar("T")


class Project:
    """A workflow copy plus helpers to run snakemake in it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _command(self, args: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.root / "workflow")
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        return [sys.executable, "-m", "snakemake", "--cores", "2", *args], env

    def snakemake(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd, env = self._command(args)
        proc = subprocess.run(cmd, cwd=self.root, env=env, text=True, capture_output=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def start_snakemake(self, *args: str) -> subprocess.Popen[str]:
        """Snakemake in the background, in its own process group so it can be killed whole."""
        cmd, env = self._command(args)
        return subprocess.Popen(
            cmd,
            cwd=self.root,
            env=env,
            text=True,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    @staticmethod
    def wait_for(probe: Callable[[], T | None], job: subprocess.Popen[str]) -> T:
        """Poll until `probe` returns something; fail if the job ends first (no time limit)."""
        while (found := probe()) is None:
            if job.poll() is not None:
                raise AssertionError(
                    f"snakemake ended before the awaited state:\n{job.stdout.read()}"
                )
            time.sleep(0.05)
        return found

    @staticmethod
    def kill(job: subprocess.Popen[str]) -> None:
        """SIGKILL snakemake and its jobs, as a crashed node or an OOM kill would."""
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        job.stdout.close()

    def planned_jobs(self, *args: str) -> dict[str, int]:
        """Rules a dry run would execute, with their job counts (empty: nothing to do)."""
        proc = self.snakemake("--dry-run", *args)
        out = proc.stdout + proc.stderr  # snakemake 9 logs to stderr
        if "Nothing to be done" in out:
            return {}
        table = out.split("Job stats:", 1)[1]
        jobs = dict(re.findall(r"^(\w+)\s+(\d+)\s*$", table, flags=re.MULTILINE))
        jobs.pop("total", None)
        return {rule: int(n) for rule, n in jobs.items()}

    def fingerprint(self, folder: str) -> dict[str, str]:
        """Content hash and mtime of every file under `folder`."""
        base = self.root / folder
        return {
            str(
                p.relative_to(base)
            ): f"{hashlib.sha256(p.read_bytes()).hexdigest()}:{p.stat().st_mtime_ns}"
            for p in sorted(base.rglob("*"))
            if p.is_file()
        }


def make_project(root: Path, config: dict = TINY_CONFIG) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(
                source, root / name, ignore=shutil.ignore_patterns("__pycache__", "wheelhouse")
            )
        else:
            shutil.copy2(source, root / name)
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    _commit_all(root)
    return Project(root)


def built_project(
    tmp_path_factory: pytest.TempPathFactory,
    targets: tuple[str, ...],
    config: dict = TINY_CONFIG,
) -> Project:
    """A private copy of a project with `targets` built under `config`.

    The build is made once per test run and shared by every pytest process (xdist workers
    share their base temp folder's parent), under a lock; each caller gets its own copy, mtimes
    and Snakemake's metadata kept, so nothing is planned again and edits stay private.
    """
    key = hashlib.sha256(yaml.safe_dump([config, sorted(targets)]).encode()).hexdigest()[:16]
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    build = shared / f"built-{key}"
    with (shared / f"built-{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (build / ".complete").exists():
            shutil.rmtree(build, ignore_errors=True)  # a build that failed part-way
            build.mkdir()
            make_project(build / "project", config).snakemake(*targets)
            (build / ".complete").touch()
    copy = tmp_path_factory.mktemp("built") / "project"
    shutil.copytree(build / "project", copy, symlinks=True)
    return Project(copy)


def _commit_all(root: Path) -> None:
    """The copy is a git checkout with one commit, as a user's clone: provenance records it."""
    (root / ".gitignore").write_text("data/\nwork/\nresults/\nlogs/\n.snakemake/\n")
    identity = ["-c", "user.name=accelpipe tests", "-c", "user.email=tests@localhost"]
    for args in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-q", "-m", "copy"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def head_commit(root: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()
