"""unet2d's training loader: indexed once per run, the same batches each epoch as a loader
built for that epoch alone (issue 33 item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from accelpipe import cli
from accelpipe.inputs.slices import SliceBatches
from accelpipe.workloads.unet2d import workload as unet2d
from tests.helpers.brats_data import tiny_prepared

pytestmark = pytest.mark.torch

EPOCHS, STEPS = 3, 2


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_prepared(tmp_path_factory.mktemp("brats"))


def _config() -> dict:
    from accelpipe.config.schema import validate

    return validate(
        {
            "unet2d": {
                "model": {"filters": [8, 16, 32], "strides": [1, 2, 2], "deep_supr_num": 1},
                "train": {
                    "epochs": EPOCHS,
                    "steps_per_epoch": STEPS,
                    "batch_size": 2,
                    "eval_every": 0,
                    "loader_workers": 0,
                },
                "profile": {"enabled": False},
            },
        }
    )


def _draws(ds: SliceBatches) -> list[tuple[int, tuple[int, ...]]]:
    """(case index, slice indices) of each batch `ds` yields, in order."""
    rng = np.random.default_rng([ds.seed, ds.epoch, 0])
    rng.integers(2**62)  # the augmentation generator's seed, drawn first
    return [_key(*ds.sample(rng)) for _ in range(ds.steps)]


def _key(ci: int, sel: slice | np.ndarray) -> tuple[int, tuple[int, ...]]:
    if isinstance(sel, slice):
        return ci, tuple(range(sel.start, sel.stop))
    return ci, tuple(int(z) for z in sel)


def test_a_multi_epoch_run_scans_the_labels_once_and_draws_each_epochs_batches(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelpipe.engines import torch_trainer
    from accelpipe.plan import stage_config

    scanned: list[str] = []
    loaded: list[tuple[int, tuple[int, ...]]] = []
    index, load = SliceBatches._index, SliceBatches.load

    def counting_index(self: SliceBatches, case: str) -> tuple[int, np.ndarray]:
        scanned.append(case)
        return index(self, case)

    def recording_load(self: SliceBatches, ci: int, sel: slice | np.ndarray):  # type: ignore[no-untyped-def]
        loaded.append(_key(ci, sel))
        return load(self, ci, sel)

    monkeypatch.setattr(SliceBatches, "_index", counting_index)
    monkeypatch.setattr(SliceBatches, "load", recording_load)
    monkeypatch.setattr(torch_trainer, "limit_threads", lambda n: None)
    config = _config()
    argv = [
        *("--log", str(tmp_path / "train.log"), "train", "--workload", "unet2d"),
        *("--run", "fold0", "--prepared", str(prepared), "--out", str(tmp_path / "train")),
        *("--config-json", json.dumps(stage_config.train(config, "unet2d", "fold0"))),
    ]
    assert cli.main(argv) == 0
    cases = unet2d.split(prepared, "fold0")["train"]
    assert sorted(scanned) == sorted(cases)  # each label file once, not once per epoch

    monkeypatch.undo()
    train = config["unet2d"]["train"]
    expected = []
    for epoch in range(EPOCHS):  # a loader built for that epoch alone, as a resumed run would
        fresh = SliceBatches(
            prepared,
            cases,
            batch_size=train["batch_size"],
            steps=STEPS,
            oversampling=train["oversampling"],
            seed=train["seed"] * 100_003 + epoch,
        )
        expected += _draws(fresh)
    assert loaded == expected
    assert len(set(loaded)) > 1  # the epochs really draw different batches
