"""A dataset URL with credentials through the real workflow (issue 30, items 4 and 7): a
user:password and a signed query string reach the server, and nowhere else: not provenance,
not the stage's log, not a file under results/, not the console. The downloads settings
reach the raw job without being part of its key."""

from __future__ import annotations

import copy
import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from accelpipe.datasets.brats import synthesize
from tests.helpers.http_server import FileServer
from tests.workflow.project import TINY_CONFIG, make_project

pytestmark = pytest.mark.e2e
TASK = "Task01_BrainTumour"
SECRETS = ("pa55word", "AKIASECRETID", "5ecre75ig", "T0KENVALUE")
QUERY = "X-Amz-Credential=AKIASECRETID&X-Amz-Signature=5ecre75ig&X-Amz-Security-Token=T0KENVALUE"


def _served_task(tmp_path: Path) -> Path:
    """The tiny config's synthetic brats as the MSD tar a server hands out."""
    synth = TINY_CONFIG["datasets"]["brats"]["synthetic"]
    task = synthesize(tmp_path / "user", cases=synth["cases"], shape=tuple(synth["shape"]), seed=0)
    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / f"{TASK}.tar", "w") as tar:
        tar.add(task, arcname=TASK)
    return served


def _files_with_secrets(folder: Path) -> list[str]:
    return [
        str(p)
        for p in folder.rglob("*")
        if p.is_file() and any(s.encode() in p.read_bytes() for s in SECRETS)
    ]


def _signed_config(server: FileServer, served: Path) -> dict:
    """The tiny config with brats from the server at a URL with credentials: in the config
    file, where a user keeps it (Snakemake itself echoes a --config command line)."""
    url = server.url(f"{TASK}.tar").replace("http://", "http://alice:pa55word@") + "?" + QUERY
    md5 = hashlib.md5((served / f"{TASK}.tar").read_bytes()).hexdigest()
    config = copy.deepcopy(TINY_CONFIG)
    config["datasets"]["brats"] |= {"source": "msd", "msd": {"url": url, "md5": md5}}
    return config


def test_credentials_of_a_dataset_url_are_published_nowhere(tmp_path: Path) -> None:
    served = _served_task(tmp_path)
    (tmp_path / "project").mkdir()
    with FileServer(served) as server:
        project = make_project(tmp_path / "project", _signed_config(server, served))
        progress = 'downloads={"progress_every_s": 0.000001}'  # a progress line per read
        proc = project.snakemake("results/unet2d/fold0", "--config", progress)
        # How downloads are watched is not the raw job's key: changing it re-runs nothing.
        other = 'downloads={"min_rate_bytes_s": 5, "lock_wait_s": 60}'
        assert project.planned_jobs("results/unet2d/fold0", "--config", other) == {}
    assert [r.query for r in server.log] == [dict(p.split("=") for p in QUERY.split("&"))]
    console = proc.stdout + proc.stderr
    assert not [s for s in SECRETS if s in console], console
    root = project.root
    provenance = json.loads((root / "results/unet2d/fold0/provenance.json").read_text())
    shown = provenance["config"]["datasets"]["brats"]["msd"]["url"]
    assert shown.startswith("http://***@127.0.0.1:") and "X-Amz-Signature=***" in shown
    stage_log = (root / "logs/raw/brats.log").read_text()
    assert "downloading http://***@127.0.0.1" in stage_log
    assert f"{TASK}.tar: " in stage_log and "%) at " in stage_log  # progress lines
    for folder in ("results", "logs", ".snakemake/log", "data/raw"):
        assert _files_with_secrets(root / folder) == [], folder
