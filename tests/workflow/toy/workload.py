"""toy: train and evaluate one convolution on fold 0 of the prepared BraTS slices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from accelpipe.config.settings import TrainSlice, view
from accelpipe.core.io import read_json, write_json
from accelpipe.devices import torch_device
from accelpipe.engines.torch_trainer import TrainJob, load_for_eval, run_training
from accelpipe.inputs.slices import SliceBatches
from accelpipe.launch import torch_launch
from accelpipe.models.losses import DiceCELoss
from accelpipe.models.metrics import dice_per_class
from accelpipe.workloads.base import no_starting_weights
from accelpipe.workloads.toy.declaration import ToyEvaluate, ToyModel, ToyTrain


def _split(prepared: Path) -> dict[str, list[str]]:
    split: dict[str, list[str]] = read_json(prepared / "folds.json")["folds"][0]
    return split


def _model(model_block: dict[str, Any], data_cfg: dict[str, Any]) -> torch.nn.Module:
    kernel = view(ToyModel, model_block, where="toy.model").kernel
    return torch.nn.Conv2d(data_cfg["in_channels"], data_cfg["n_class"], kernel, padding="same")


def train(
    prepared: Path, run: str, cfg: TrainSlice, work_dir: Path, weights: Path | None = None
) -> dict[str, Any] | None:
    no_starting_weights("toy", weights)
    data_cfg = read_json(prepared / "config.json")
    cases = _split(prepared)["train"]

    def make_job(
        train_cfg: ToyTrain, device: torch_device.Device, ctx: torch_launch.DistContext
    ) -> TrainJob:
        steps = train_cfg.steps_per_epoch or len(cases)

        def batches(epoch: int) -> SliceBatches:
            return SliceBatches(
                prepared,
                cases,
                batch_size=train_cfg.batch_size,
                steps=steps,
                augment=False,
                seed=train_cfg.seed * 100_003 + epoch,
                rank=ctx.rank,
                world_size=ctx.world_size,
            )

        model = _model(cfg["model"], data_cfg)
        checkpoint = {"model": cfg["model"], "data": data_cfg}
        return TrainJob(model, DiceCELoss(), batches, steps, checkpoint=checkpoint)

    return run_training(cfg, cfg.train_as(ToyTrain), work_dir, make_job)


@torch.no_grad()
def evaluate(
    prepared: Path, run: str, cfg: dict[str, Any], model_dir: Path, out_dir: Path
) -> dict[str, Any]:
    """Mean Dice over the foreground labels of fold 0's validation volumes."""
    ev = view(ToyEvaluate, cfg["evaluate"], where="toy.evaluate")
    model, device, _ = load_for_eval(model_dir, cfg, lambda c: _model(c["model"], c["data"]))
    classes = tuple(range(1, read_json(prepared / "config.json")["n_class"]))
    rows = []
    for case in _split(prepared)["val"]:
        image = np.load(prepared / f"{case}_x.npy").transpose(1, 0, 2, 3)  # slices first
        target = np.load(prepared / f"{case}_y.npy")[0]
        labels = []
        for start in range(0, len(image), ev.batch_size):
            batch = device.to_device(torch.from_numpy(image[start : start + ev.batch_size]))
            labels.append(model(batch).argmax(dim=1).cpu().numpy())
        rows.append(dice_per_class(np.concatenate(labels), target, classes))
    metrics = {"workload": "toy", "run": run, "mean_dice": round(float(np.mean(rows)), 6)}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "metrics.json", metrics)
    return metrics
