"""A `data_root` with a space, a single quote and `$(...)` in it (issue 30, item 1): every job
gets the path as one argument, so the run succeeds, writes its data under that very folder and
runs nothing the path spells. Before the rules quoted their placeholders (`:q`), the raw job
ran the `touch` and a space failed every job ("unrecognized arguments")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.workflow.project import COPIED, TINY_CONFIG, make_project

pytestmark = pytest.mark.e2e


def test_a_hostile_data_root_reaches_every_job_as_one_path(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    data_root = tmp_path / f"data dir 'quoted' $(touch {canary})"
    (tmp_path / "workflow").mkdir()
    project = make_project(tmp_path / "workflow", TINY_CONFIG | {"data_root": str(data_root)})

    # every rule that takes a data path: raw, prepare, train, evaluate, publish (unet2d: the
    # tiny config's quickest run through all of them)
    project.snakemake("results/unet2d/fold0")

    assert not canary.exists(), "a path from the config ran as shell code"
    for made in ("raw/brats/stage.json", "prepared/brats/2d/folds.json", "downloads/brats"):
        assert (data_root / made).exists(), made  # the data went where the config said
    result = project.root / "results/unet2d/fold0"
    assert "mean_dice" in json.loads((result / "metrics.json").read_text())
    # nothing was made from the words of a split path (`data`, `dir`, ... in the workflow)
    made_here = {p.name for p in project.root.iterdir()}
    assert made_here <= {*COPIED, ".git", ".gitignore", ".snakemake", "logs", "work", "results"}
