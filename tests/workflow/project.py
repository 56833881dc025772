"""A copy of the workflow in a temp dir with a tiny config, and a way to run snakemake on it.

Tests edit the copy (config, package modules) freely; the checkout is never touched.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
COPIED = ("Snakefile", "rules", "report", "envs", "workflow", "requirements", "config.yaml")

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
        "profile": {"schedule": {"wait": 0, "warmup": 1, "active": 2, "repeat": 1}},
    },
}


class Project:
    """A workflow copy plus helpers to run snakemake in it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def snakemake(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.root / "workflow")
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        cmd = [sys.executable, "-m", "snakemake", "--cores", "2", *args]
        proc = subprocess.run(cmd, cwd=self.root, env=env, text=True, capture_output=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def planned_jobs(self, *args: str) -> dict[str, int]:
        """Rules a dry run would execute, with their job counts (empty: nothing to do)."""
        out = self.snakemake("--dry-run", *args).stdout
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
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, root / name)
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    return Project(root)
