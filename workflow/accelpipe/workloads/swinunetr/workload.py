"""SwinUNETR on NSCLC-Radiomics: the GTV-1 tumour mask from CT, MONAI pipeline and network.

Runs are named in config (`swinunetr.runs`), each a set of overrides of `swinunetr.train`.
Training: DiceCE on one sigmoid channel, AdamW, linear warmup then cosine, random 3D crops
from a CacheDataset. Evaluation: sliding-window inference (gaussian blending) over each whole
validation volume, Dice per case.
"""

from __future__ import annotations

import csv
import itertools
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import torch

# isort: off
from accelpipe.devices import tensorboard_stub  # noqa: F401  before MONAI: see there

# isort: on
from monai.inferers import sliding_window_inference
from monai.losses import DiceCELoss

from accelpipe.config.settings import TrainSlice, view
from accelpipe.core.io import read_json, write_json
from accelpipe.devices import torch_device, workload_auto
from accelpipe.engines.evaluations import InTrainingEval, in_training_eval
from accelpipe.engines.torch_trainer import TrainJob, load_for_eval, run_training
from accelpipe.inputs import volume_cache, volumes
from accelpipe.launch import torch_launch
from accelpipe.models.metrics import dice_per_class
from accelpipe.models.swinunetr import build_model
from accelpipe.workloads.base import no_starting_weights
from accelpipe.workloads.swinunetr.declaration import SwinUNETREvaluate, SwinUNETRTrain

# What "auto" means for this workload (its registry entry: fp16 on rocm), handed to the engine.
AUTO_PRECISION = workload_auto("swinunetr")
log = logging.getLogger(__name__)


def _settings(cfg: Mapping[str, Any], model_cfg: dict[str, Any]) -> volumes.VolumeSettings:
    return volumes.VolumeSettings.from_config(cfg["transforms"], model_cfg["roi"])


def train(
    prepared: Path, run: str, cfg: TrainSlice, work_dir: Path, weights: Path | None = None
) -> dict[str, Any] | None:
    """Train the run into `work_dir` (resuming from its checkpoint); facts on rank 0 only."""
    no_starting_weights("swinunetr", weights)
    items = volumes.datalist(prepared, "training")
    settings = _settings(cfg, cfg["model"])
    label = read_json(prepared / "datalist.json")["label"]  # the ROI prepare extracted

    def make_job(
        train_cfg: SwinUNETRTrain, device: torch_device.Device, ctx: torch_launch.DistContext
    ) -> TrainJob:
        share = volumes.rank_share(items, train_cfg.seed, ctx.rank, ctx.world_size)
        cache = volume_cache.plan_for(
            share,
            settings.spacing,
            train_cfg.cache_rate,
            train_cfg.cache_memory_gb,
            ctx.local_world_size,
        )
        log.info("rank %d: %s", ctx.rank, cache.line())
        loader = volumes.train_loader(
            items,
            volumes.train_transforms(settings, train_cfg.num_samples, train_cfg.augment),
            batch_size=train_cfg.batch_size // ctx.world_size,
            cache_rate=train_cfg.cache_rate,
            workers=train_cfg.loader_workers,
            pin_memory=device.backend != "cpu",
            seed=train_cfg.seed,
            rank=ctx.rank,
            world_size=ctx.world_size,
            cache=cache,
        )
        steps = train_cfg.steps_per_epoch or len(loader)
        pairs = volumes.endless_pairs(loader)

        def batches(epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            # One loader for the whole run: its persistent workers and cache outlive epochs.
            return itertools.islice(pairs, steps)

        return TrainJob(
            build_model(cfg["model"]),
            DiceCELoss(sigmoid=True),
            batches,
            steps,
            checkpoint={"model": cfg["model"], "transforms": cfg["transforms"], "label": label},
            facts={
                "train_volumes": len(items),
                "crops_per_volume": train_cfg.num_samples,
                "volume_cache": cache.facts(),  # rank 0's; each rank logs its own
            },
            evaluation=_in_training(cfg, train_cfg, device, prepared, settings, label),
        )

    return run_training(
        cfg,
        cfg.train_as(SwinUNETRTrain),
        work_dir,
        make_job,
        AUTO_PRECISION,
    )


def _in_training(
    cfg: TrainSlice,
    train_cfg: SwinUNETRTrain,
    device: torch_device.Device,
    prepared: Path,
    settings: volumes.VolumeSettings,
    label: str,
) -> InTrainingEval | None:
    """The run's evaluations inside training (train.eval_every), scored as `evaluate` does
    (its prediction reads the evaluate block itself)."""

    def score(model: torch.nn.Module, _: SwinUNETREvaluate) -> dict[str, Any]:
        dice = [d for *_, d in _scored_cases(model, device, prepared, cfg, settings)]
        return _dice_metrics(cfg, label, dice)

    def samples() -> tuple[int, int]:
        return (
            len(volumes.datalist(prepared, "training")),
            len(volumes.datalist(prepared, "validation")),
        )

    return in_training_eval("swinunetr", cfg, train_cfg, SwinUNETREvaluate, score, samples)


def _model_from_checkpoint(checkpoint: dict[str, Any]) -> torch.nn.Module:
    return build_model(checkpoint["model"])


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    device: torch_device.Device,
    image: torch.Tensor,
    cfg: Mapping[str, Any],
    roi: tuple[int, int, int],
) -> np.ndarray:
    """Binary mask (X, Y, Z) for one (1, X, Y, Z) volume by gaussian-blended sliding windows."""
    ev = view(SwinUNETREvaluate, cfg["evaluate"], where="swinunetr.evaluate")
    with device.autocast():
        logits = sliding_window_inference(
            image[None].to(device.torch_device),
            roi_size=roi,
            sw_batch_size=ev.sw_batch_size,
            predictor=model,
            overlap=ev.overlap,
            mode=ev.mode,
        )
    assert isinstance(logits, torch.Tensor)  # the model's one output, not a tuple or dict
    return (torch.sigmoid(logits.float())[0, 0] > ev.threshold).cpu().numpy().astype(np.uint8)


def _scored_cases(
    model: torch.nn.Module,
    device: torch_device.Device,
    prepared: Path,
    cfg: Mapping[str, Any],
    settings: volumes.VolumeSettings,
) -> Iterator[tuple[str, np.ndarray, np.ndarray, float]]:
    """(patient, predicted mask, affine, Dice) of each validation volume, in the resampled
    (training) space."""
    transform = volumes.eval_transforms(settings)
    for item in volumes.datalist(prepared, "validation"):
        data = transform(item)
        pred = predict(model, device, data["image"].as_tensor(), cfg, settings.roi)
        target = data["label"].as_tensor()[0].numpy().astype(np.uint8)
        name = item.get("patient") or Path(item["image"]).name.split(".")[0]
        affine = np.asarray(data["image"].affine, dtype=np.float64)
        yield name, pred, affine, float(dice_per_class(pred, target, (1,))[0])


def _dice_metrics(cfg: Mapping[str, Any], label: str, dice: list[float]) -> dict[str, Any]:
    return {
        "metric": "dice",
        "dice": {label: round(float(np.mean(dice)), 6)},
        "mean_dice": round(float(np.mean(dice)), 6),
        "n_cases": len(dice),
        "note": f"Dice fraction 0..1 of the {label} mask per validation volume (sigmoid > "
        f"{cfg['evaluate']['threshold']}, sliding window {cfg['evaluate']['mode']}, overlap "
        f"{cfg['evaluate']['overlap']}), averaged; an empty mask predicted empty scores 1",
    }


def evaluate(
    prepared: Path, run: str, cfg: dict[str, Any], model_dir: Path, out_dir: Path
) -> dict[str, Any]:
    """Dice of the predicted mask per validation volume, in the resampled (training) space.

    Writes metrics.json, per_case_dice.csv and predictions/<patient>.nii.gz into `out_dir`.
    """
    model, device, checkpoint = load_for_eval(
        model_dir, cfg, _model_from_checkpoint, AUTO_PRECISION
    )
    settings = _settings(checkpoint, checkpoint["model"])
    (out_dir / "predictions").mkdir(parents=True)
    rows = []
    for name, pred, affine, dice in _scored_cases(model, device, prepared, cfg, settings):
        # nibabel ships py.typed but leaves Nifti1Image.__init__ unannotated
        nifti = nib.Nifti1Image(pred, affine)  # type: ignore[no-untyped-call]
        nib.save(nifti, out_dir / "predictions" / f"{name}.nii.gz")
        rows.append((name, dice))
    label = checkpoint["label"]
    scores = _dice_metrics(cfg, label, [d for _, d in rows])
    metrics = {"workload": "swinunetr", "run": run} | scores
    write_json(out_dir / "metrics.json", metrics)
    with (out_dir / "per_case_dice.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["case", f"dice_{label}"])
        writer.writerows((name, f"{d:.6f}") for name, d in rows)
    return metrics
