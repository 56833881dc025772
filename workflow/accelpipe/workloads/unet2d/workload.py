"""nnU-Net 2D on BraTS (MSD Task01): DynUNet2D, Dice+CE with deep supervision, Dice per label.

Label values and names come from the prepared config.json (the `labels` of the task's
dataset.json), so a `path:` copy of another MSD task is scored on its own labels.

Runs are folds: `[<run>/]fold0` .. `fold<k-1>` of the k-fold split written by prepare.

Training may span several processes (started by torchrun, see `accelpipe.launch.torch_launch`): each
rank loads its shard of the global batch and rank 0 writes the outputs. The Dice term is a batch
Dice over each rank's shard, as in the reference's multi-GPU runs, so a run on N processes
follows, but does not equal, the one-process run. Evaluation stays one process.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from accelpipe.config.schema import split_fold
from accelpipe.config.settings import TrainSlice, view
from accelpipe.core.errors import ConfigError
from accelpipe.core.io import read_json, write_json
from accelpipe.devices import torch_device
from accelpipe.engines.evaluations import InTrainingEval, in_training_eval
from accelpipe.engines.torch_trainer import TrainJob, load_for_eval, run_training
from accelpipe.inputs.slices import SliceBatches
from accelpipe.launch import torch_launch
from accelpipe.models.dynunet2d import DynUNet2D
from accelpipe.models.losses import DeepSupervisionLoss, DiceCELoss
from accelpipe.models.metrics import dice_per_class
from accelpipe.workloads.base import no_starting_weights
from accelpipe.workloads.unet2d.declaration import UNet2DEvaluate, UNet2DModel, UNet2DTrain


def fold_of(run: str, n_folds: int) -> int:
    """The fold a run trains: `fold<k>` or `<name>/fold<k>`."""
    parts = split_fold(run)
    if parts is None or parts[1] >= n_folds:
        raise ConfigError(
            f"unet2d run {run!r} is not a fold: expected [<run>/]fold0..fold{n_folds - 1}"
        )
    return parts[1]


def split(prepared: Path, run: str) -> dict[str, list[str]]:
    folds = read_json(prepared / "folds.json")
    return cast("dict[str, list[str]]", folds["folds"][fold_of(run, folds["n_folds"])])


def build_model(model_block: dict[str, Any], data_cfg: dict[str, Any]) -> DynUNet2D:
    """The DynUNet of a `unet2d.model` block (the config's, or the one a checkpoint saved)."""
    model = view(UNet2DModel, model_block, where="unet2d.model")
    return DynUNet2D(
        in_channels=data_cfg["in_channels"],
        n_class=data_cfg["n_class"],
        filters=model.filters,
        strides=model.strides,
        deep_supervision=model.deep_supervision,
        deep_supr_num=model.deep_supr_num,
    )


def train(
    prepared: Path, run: str, cfg: TrainSlice, work_dir: Path, weights: Path | None = None
) -> dict[str, Any] | None:
    """Train one fold into `work_dir` (resuming if it holds a checkpoint).

    Returns the run facts on rank 0 (the only rank that writes), None on the other ranks.
    """
    no_starting_weights("unet2d", weights)
    data_cfg = read_json(prepared / "config.json")
    cases = split(prepared, run)["train"]

    def make_job(
        train_cfg: UNet2DTrain, device: torch_device.Device, ctx: torch_launch.DistContext
    ) -> TrainJob:
        steps = train_cfg.steps_per_epoch or len(cases)
        seed = train_cfg.seed * 100_003
        # Indexed once per run (every label file is read); each epoch reseeds a copy.
        run_batches = SliceBatches(
            prepared,
            cases,
            batch_size=train_cfg.batch_size,
            steps=steps,
            oversampling=train_cfg.oversampling,
            augment=train_cfg.augment,
            seed=seed,
            rank=ctx.rank,
            world_size=ctx.world_size,
        )

        def batches(
            epoch: int,
        ) -> torch.utils.data.DataLoader[tuple[torch.Tensor, torch.Tensor]]:
            # Seeded per epoch so a resumed run sees the same batches as an uninterrupted one.
            return torch.utils.data.DataLoader(
                run_batches.reseeded(seed + epoch),
                batch_size=None,
                num_workers=train_cfg.loader_workers,
                pin_memory=device.backend != "cpu",
            )

        # Every parameter gets a gradient (the deep-supervision heads feed the loss).
        return TrainJob(
            build_model(cfg["model"], data_cfg),
            DeepSupervisionLoss(DiceCELoss()),
            batches,
            steps,
            checkpoint={"model": cfg["model"], "data": data_cfg, "run": run},
            facts={"train_cases": len(cases)},
            evaluation=_in_training(cfg, train_cfg, device, prepared, run),
        )

    return run_training(cfg, cfg.train_as(UNet2DTrain), work_dir, make_job)


def _in_training(
    cfg: TrainSlice,
    train_cfg: UNet2DTrain,
    device: torch_device.Device,
    prepared: Path,
    run: str,
) -> InTrainingEval | None:
    """The fold's evaluations inside training (train.eval_every), scored as `evaluate` does."""

    def samples() -> tuple[int, int]:
        cases = split(prepared, run)
        return len(cases["train"]), len(cases["val"])

    return in_training_eval(
        "unet2d",
        cfg,
        train_cfg,
        UNet2DEvaluate,
        lambda model, ev: score(model, device, prepared, run, ev.batch_size),
        samples,
    )


def label_names(data_cfg: dict[str, Any]) -> dict[int, str]:
    """Foreground label value -> name, from a prepared config.json (dataset.json's labels)."""
    labels = data_cfg.get("labels") or {str(c): str(c) for c in range(data_cfg["n_class"])}
    return {int(k): str(v) for k, v in sorted(labels.items(), key=lambda kv: int(kv[0])) if int(k)}


def _model_from_checkpoint(checkpoint: dict[str, Any]) -> DynUNet2D:
    return build_model(checkpoint["model"], checkpoint["data"])


@torch.no_grad()
def predict_volume(
    model: torch.nn.Module, device: torch_device.Device, image: np.ndarray, batch_size: int
) -> np.ndarray:
    """Label map (D, H, W) for a (C, D, H, W) volume, predicted slice by slice."""
    slices = torch.from_numpy(np.ascontiguousarray(image.transpose(1, 0, 2, 3)))
    labels = []
    for start in range(0, slices.shape[0], batch_size):
        batch = device.to_device(slices[start : start + batch_size], image=True)
        with device.autocast():
            logits = model(batch)
        labels.append(logits.argmax(dim=1).to(torch.uint8).cpu())
    return torch.cat(labels).numpy()


def _scored_cases(
    model: torch.nn.Module, device: torch_device.Device, prepared: Path, run: str, batch_size: int
) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """(case, predicted label map, Dice per foreground label) of each validation volume of the
    run's fold."""
    classes = tuple(label_names(read_json(prepared / "config.json")))
    for case in split(prepared, run)["val"]:
        image = np.load(prepared / f"{case}_x.npy", mmap_mode="r")
        target = np.load(prepared / f"{case}_y.npy", mmap_mode="r")[0]
        pred = predict_volume(model, device, image, batch_size)
        yield case, pred, dice_per_class(pred, target, classes)


def _dice_metrics(names: dict[int, str], rows: list[tuple[str, np.ndarray]]) -> dict[str, Any]:
    """The metrics of the cases' Dice rows: per label and their mean, averaged over cases."""
    per_class = np.mean([d for _, d in rows], axis=0)
    listed = ", ".join(f"{c} {name}" for c, name in names.items())
    return {
        "metric": "dice",
        "dice": {str(c): round(float(v), 6) for c, v in zip(names, per_class, strict=True)},
        "labels": {str(c): name for c, name in names.items()},
        "mean_dice": round(float(per_class.mean()), 6),
        "n_cases": len(rows),
        "note": f"Dice fractions 0..1 per label ({listed}), averaged over validation volumes; "
        "a label absent from target and prediction scores 1",
    }


def score(
    model: torch.nn.Module, device: torch_device.Device, prepared: Path, run: str, batch_size: int
) -> dict[str, Any]:
    """The evaluate stage's metrics of `model` as it is (the train stage's evaluations)."""
    rows = [
        (case, dice) for case, _, dice in _scored_cases(model, device, prepared, run, batch_size)
    ]
    return _dice_metrics(label_names(read_json(prepared / "config.json")), rows)


def evaluate(
    prepared: Path, run: str, cfg: dict[str, Any], model_dir: Path, out_dir: Path
) -> dict[str, Any]:
    """Dice per label on the fold's validation volumes.

    Writes metrics.json, per_case_dice.csv and predictions/<case>.npy into `out_dir`.
    """
    ev = view(UNet2DEvaluate, cfg["evaluate"], where="unet2d.evaluate")
    model, device, _ = load_for_eval(model_dir, cfg, _model_from_checkpoint)
    names = label_names(read_json(prepared / "config.json"))
    (out_dir / "predictions").mkdir(parents=True)
    rows = []
    for case, pred, dice in _scored_cases(model, device, prepared, run, ev.batch_size):
        np.save(out_dir / "predictions" / f"{case}.npy", pred)
        rows.append((case, dice))
    metrics = {"workload": "unet2d", "run": run} | _dice_metrics(names, rows)
    write_json(out_dir / "metrics.json", metrics)
    with (out_dir / "per_case_dice.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["case", *(f"dice_{name}" for name in names.values()), "mean"])
        for case, dice in rows:
            writer.writerow([case, *(f"{v:.6f}" for v in dice), f"{dice.mean():.6f}"])
    return metrics
