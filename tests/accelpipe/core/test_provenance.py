"""Provenance: the checkout's git state, handed in by the workflow or read from the checkout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from accelpipe.core import provenance


def _git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
    return subprocess.run(
        ["git", *identity, *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_git_state_reads_commit_and_dirtiness(checkout: Path) -> None:
    head = _git(checkout, "rev-parse", "HEAD")
    assert provenance.git_state(checkout) == {"commit": head, "dirty": False}
    (checkout / "a.py").write_text("x = 2\n")
    assert provenance.git_state(checkout) == {"commit": head, "dirty": True}
    (checkout / "untracked.txt").write_text("")  # untracked files do not make it dirty
    (checkout / "a.py").write_text("x = 1\n")
    assert provenance.git_state(checkout)["dirty"] is False


def test_outside_a_checkout_nothing_is_invented(tmp_path: Path) -> None:
    assert provenance.git_state(tmp_path) == {"commit": None, "dirty": None}


def test_state_handed_in_by_the_workflow_wins(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = {"commit": "0" * 40, "dirty": True}
    monkeypatch.setenv(provenance.GIT_STATE_ENV, json.dumps(handed))
    monkeypatch.setattr("accelpipe.REPO", checkout)
    assert provenance.checkout_state() == handed
    monkeypatch.delenv(provenance.GIT_STATE_ENV)
    assert provenance.checkout_state()["commit"] == _git(checkout, "rev-parse", "HEAD")


def test_provenance_json_carries_no_credential_of_a_dataset_url(tmp_path: Path) -> None:
    stage = tmp_path / "train"
    provenance.write_stage(stage, "train", 0.0)
    url = "https://alice:pa55word@host/Task01.tar?X-Amz-Signature=5ecre75ig&X-Amz-Date=1"
    config = {"datasets": {"brats": {"source": "msd", "msd": {"url": url}}}}
    record = provenance.build({"train": stage}, config)
    shown = record["config"]["datasets"]["brats"]["msd"]["url"]
    assert shown == "https://***@host/Task01.tar?X-Amz-Signature=***&X-Amz-Date=1"
    assert "pa55word" not in json.dumps(record) and "5ecre75ig" not in json.dumps(record)
