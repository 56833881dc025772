"""TINY_CONFIG's BraTS data (tests/workflow/project.py), prepared: 5 synthetic cases of
32x32x16, 5 folds; for tests that train or load unet2d without the workflow."""

from __future__ import annotations

from pathlib import Path


def tiny_prepared(root: Path) -> Path:
    """The prepared 2D slices of the tiny synthetic task, built under `root`."""
    from accelpipe.datasets import brats

    task = brats.synthesize(root / "raw", cases=5, shape=(32, 32, 16), seed=0)
    return brats.prepare(task, root / "prep", patch_size=(32, 32), n_folds=5)
