"""Provenance: stage records (timing, host) and the provenance.json a result folder carries."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import accelpipe
from accelpipe.core.io import read_json, write_json
from accelpipe.core.redact import redact_data

STAGE_FILE = "stage.json"
# The checkout's git state as JSON, read by the workflow where the checkout is and handed to
# every job (local, Slurm, container), since a container holds no checkout.
GIT_STATE_ENV = "ACCELPIPE_GIT_STATE"
# Recorded by every stage that trains; the engine adds its framework's (accelpipe.engines).
PACKAGES = ("numpy", "nibabel", "snakemake", "jsonschema", "matplotlib")


# How many hex digits of a config hash the runs listing and the compare page show.
SHORT_HASH = 12


def config_hash(slices: dict[str, Any]) -> str:
    """The hash of a run's config: sha256 of the canonical JSON (sorted keys, no spaces: the
    form the rules pass) of the config slices its result depends on (stage_config.run_slices).
    Equal hashes: the same data, training and evaluation settings."""
    text = json.dumps(slices, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def stage_record(stage: str, started: float, **facts: Any) -> dict[str, Any]:
    """What every stage writes to its output's stage.json."""
    return {
        "stage": stage,
        "finished": now_iso(),
        "seconds": round(time.perf_counter() - started, 3),
        "host": socket.gethostname(),
        "image": os.environ.get("ACCELPIPE_IMAGE"),  # set by the docker runtime
        "accelpipe": accelpipe.__version__,
        **facts,
    }


def write_stage(out: Path, stage: str, started: float, **facts: Any) -> None:
    """The stage.json a stage leaves in its output folder."""
    write_json(out / STAGE_FILE, stage_record(stage, started, **facts))


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(repo: Path) -> dict[str, Any]:
    """Commit and dirtiness of the checkout that holds the workflow (None outside git)."""

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(
                ["git", "-C", str(repo), *args], check=True, text=True, capture_output=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def checkout_state() -> dict[str, Any]:
    """The git state the workflow handed in, else that of the checkout holding this package."""
    handed_in = os.environ.get(GIT_STATE_ENV)
    if handed_in:
        return json.loads(handed_in)
    return git_state(accelpipe.REPO)


def system(preflight: Path | None) -> dict[str, Any] | None:
    """The system the run's image saw before training: the preflight's facts (driver, the
    devices, the framework build) and where and when it checked; None without a preflight
    (the cpu backend)."""
    if preflight is None:
        return None
    report = read_json(preflight)
    where = {key: report.get(key) for key in ("host", "time", "image")}
    return {**report.get("system", {}), **where, "preflight": str(preflight)}


def build(
    stage_dirs: dict[str, Path], config_slice: dict[str, Any], preflight: Path | None = None
) -> dict[str, Any]:
    """provenance.json: code version, config (credentials in its URLs redacted), packages,
    device, the system the preflight saw and per-stage timings."""
    stages = {name: read_json(d / STAGE_FILE) for name, d in stage_dirs.items()}
    train = stages.get("train", {})
    return {
        "created": now_iso(),
        "git": checkout_state(),
        "accelpipe": accelpipe.__version__,
        # the hash of the run's config (config_hash), which the publish slice carries
        "config_hash": config_slice.get("config_hash"),
        "config": redact_data(config_slice),  # a result folder is passed around
        "backend": train.get("backend"),
        "device": train.get("device"),
        "precision": train.get("precision"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        # as the train stage saw them: it may have run in another image than this one
        "packages": train.get("packages") or package_versions(),
        "system": system(preflight),
        "stages": {
            name: {key: s.get(key) for key in ("seconds", "finished", "host", "image")}
            for name, s in stages.items()
        },
    }
