"""A copy of the workflow in a temp dir with a tiny config, and a way to run snakemake on it.

Tests edit the copy (config, package modules) freely; the checkout is never touched.
"""

from __future__ import annotations

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
