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

# Small enough that a fold trains in seconds on 2 cores, big enough to exercise
# every stage (deep supervision, loader workers, profiler cycle, 5 folds).
TINY_CONFIG = {
    "datasets": {
        "brats": {"source": "synthetic", "synthetic": {"cases": 5, "shape": [32, 32, 16]}}
    },
    "unet2d": {
        "folds": 5,
        "prepare": {"patch_size": [32, 32]},
        "model": {"filters": [8, 16, 32], "strides": [1, 2, 2], "deep_supr_num": 1},
        "train": {"epochs": 2, "steps_per_epoch": 3, "batch_size": 4, "loader_workers": 1},
        "evaluate": {"batch_size": 16},
        # active: steps 3 and 4, the last of epoch 0 and the first of epoch 1 (loader_first)
        "profile": {"schedule": {"wait": 1, "warmup": 1, "active": 2, "repeat": 1}},
    },
    "swinunetr": {
        "model": {"roi": [64, 32, 32], "feature_size": 12, "depths": [1, 1, 1, 1]},
        "train": {
            "epochs": 2,
            "steps_per_epoch": 2,
            "num_samples": 2,
            "warmup_epochs": 1,
            "loader_workers": 1,
        },
        "evaluate": {"sw_batch_size": 2},
        "profile": {"schedule": {"wait": 0, "warmup": 1, "active": 2, "repeat": 1}},
        "runs": {"default": {}, "fp16": {"precision": "fp16"}},
    },
    "resnet50": {
        "model": {"width": 8, "layers": [1, 1, 1, 1], "image_size": 32},
        "train": {
            "epochs": 2,
            "steps_per_epoch": 3,
            "batch_size": 8,
            "optimizer": "lars",
            "lr": 1.0,
            "loader_workers": 1,
        },
        "evaluate": {"batch_size": 16, "loader_workers": 1},
        "profile": {"schedule": {"wait": 1, "warmup": 1, "active": 2, "repeat": 1}},
        "runs": {
            "bf16": {"precision": "bf16"},
            "fp32": {"precision": "fp32"},
            "graph": {"precision": "fp32", "compile": True},
            "ddp": {"precision": "fp32", "devices": 2},
        },
    },
}
TINY_CONFIG["datasets"] |= {
    "nsclc": {"synthetic": {"patients": 4, "shape": [48, 48, 24]}},
    "imagenet": {"synthetic": {"classes": 4, "train_per_class": 6, "val_per_class": 2}},
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
