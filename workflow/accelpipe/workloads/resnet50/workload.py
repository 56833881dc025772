"""ResNet-50 v1.5 on ImageNet 2012 (or its synthetic stand-in): top-1 / top-5 accuracy.

Runs are named in config (`resnet50.runs`, e.g. `bf16` and `fp32`), each a set of overrides
of `resnet50.train`. Training follows the Habana / NVIDIA recipes: random-resized crop + flip,
label smoothing, SGD or LARS with warmup then polynomial or cosine decay, channels-last and
bf16 autocast where the backend has it, eager or graph mode (`compile`). JPEG decoding and
augmentation run in the DataLoader's persistent workers, into pinned memory.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sized
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler

from accelpipe.config.settings import TrainSlice, view
from accelpipe.core.errors import DataError
from accelpipe.core.io import read_json, write_json
from accelpipe.devices import torch_device
from accelpipe.engines.evaluations import in_training_eval
from accelpipe.engines.torch_trainer import TrainJob, load_for_eval, run_training
from accelpipe.inputs.imagefolder import EvalTransform, IndexedImages, TrainTransform, make_loader
from accelpipe.launch import torch_launch
from accelpipe.models.metrics import topk_correct
from accelpipe.models.resnet50 import ResNet
from accelpipe.workloads.base import no_starting_weights
from accelpipe.workloads.resnet50.declaration import ResNet50Evaluate, ResNet50Model, ResNet50Train

TOPK = (1, 5)


def build_model(model_block: dict[str, Any], classes: int) -> ResNet:
    """The ResNet of a `resnet50.model` block (the config's, or the one a checkpoint saved)."""
    model = view(ResNet50Model, model_block, where="resnet50.model")
    return ResNet(layers=model.layers, num_classes=classes, width=model.width)


def _epoch_batches(
    loader: DataLoader[tuple[torch.Tensor, int]],
    sampler: DistributedSampler[int] | None,
    epoch: int,
    steps: int,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` batches for `epoch`: one pass over the loader, repeated if steps asks for more.
    A training set without one full batch is an error, not an endless loop of empty passes."""
    done = 0
    while done < steps:
        if sampler is not None:  # a new permutation per pass, the same on every rank
            sampler.set_epoch(epoch * 1000 + done)
        passed = done
        for batch in loader:
            yield batch
            done += 1
            if done == steps:
                return
        if done == passed:
            images = len(cast(Sized, loader.dataset))
            raise DataError(
                f"resnet50: the training set ({images} images) holds no full batch of "
                f"{loader.batch_size} per process (resnet50.train.batch_size over the "
                "processes): lower the batch size or prepare more images"
            )


def train(
    prepared: Path, run: str, cfg: TrainSlice, work_dir: Path, weights: Path | None = None
) -> dict[str, Any] | None:
    """Train the run into `work_dir` (resuming from its checkpoint); facts on rank 0 only."""
    no_starting_weights("resnet50", weights)
    index = read_json(prepared / "config.json")
    size = view(ResNet50Model, cfg["model"], where="resnet50.model").image_size

    def make_job(
        train_cfg: ResNet50Train, device: torch_device.Device, ctx: torch_launch.DistContext
    ) -> TrainJob:
        dataset = IndexedImages(prepared, "train", TrainTransform(size=size))
        sampler: DistributedSampler[int] | None = None
        if ctx.world_size > 1:
            sampler = DistributedSampler(
                dataset, ctx.world_size, ctx.rank, shuffle=True, seed=train_cfg.seed, drop_last=True
            )
        loader = make_loader(
            dataset,
            batch_size=train_cfg.batch_size // ctx.world_size,
            shuffle=True,
            workers=train_cfg.loader_workers,
            pin_memory=device.backend != "cpu",
            seed=train_cfg.seed,
            drop_last=True,  # equal batches keep the step time and batch statistics honest
            sampler=sampler,
        )
        steps = train_cfg.steps_per_epoch or len(loader)

        def batches(epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            return _epoch_batches(loader, sampler, epoch, steps)

        loss = torch.nn.CrossEntropyLoss(label_smoothing=train_cfg.label_smoothing)
        evaluation = in_training_eval(
            "resnet50",
            cfg,
            train_cfg,
            ResNet50Evaluate,
            lambda model, ev: _scores(model, device, prepared, ev, size, index["classes"])[0],
            lambda: (len(dataset), index["val"]),
        )
        return TrainJob(
            build_model(cfg["model"], index["classes"]),
            loss,
            batches,
            steps,
            checkpoint={"model": cfg["model"], "classes": index["classes"]},
            facts={"train_images": len(dataset), "classes": index["classes"]},
            evaluation=evaluation,
        )

    return run_training(cfg, cfg.train_as(ResNet50Train), work_dir, make_job)


def _model_from_checkpoint(checkpoint: dict[str, Any]) -> ResNet:
    return build_model(checkpoint["model"], checkpoint["classes"])


@torch.no_grad()
def _count_correct(
    model: torch.nn.Module,
    device: torch_device.Device,
    loader: DataLoader[tuple[torch.Tensor, int]],
    classes: int,
) -> tuple[dict[int, int], np.ndarray, np.ndarray]:
    """Top-k hits over the loader, plus per-class (top-1 hits, images)."""
    hits = dict.fromkeys(TOPK, 0)
    class_hits, class_seen = np.zeros(classes, np.int64), np.zeros(classes, np.int64)
    for images, labels in loader:
        with device.autocast():
            logits = model(device.to_device(images, image=True))
        logits = logits.float().cpu()
        for k, n in topk_correct(logits, labels, TOPK).items():
            hits[k] += n
        top1 = logits.argmax(dim=1).numpy() == labels.numpy()
        np.add.at(class_hits, labels.numpy(), top1)
        np.add.at(class_seen, labels.numpy(), 1)
    return hits, class_hits, class_seen


def _scores(
    model: torch.nn.Module,
    device: torch_device.Device,
    prepared: Path,
    ev: ResNet50Evaluate,
    image_size: int,
    classes: int,
) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """Top-1 / top-5 of `model` on the validation split (resize + centre crop), and the
    per-class (top-1 hits, images): the evaluate stage's scoring, and the train stage's
    inside training."""
    dataset = IndexedImages(prepared, "val", EvalTransform(size=image_size))
    loader = make_loader(
        dataset,
        batch_size=ev.batch_size,
        shuffle=False,
        workers=ev.loader_workers,
        pin_memory=device.backend != "cpu",
        seed=0,
        drop_last=False,
    )
    hits, class_hits, class_seen = _count_correct(model, device, loader, classes)
    n = len(dataset)
    metrics = {
        "metric": "top1",
        "top1": round(hits[1] / n, 6),
        "top5": round(hits[5] / n, 6),
        "n_images": n,
        "classes": classes,
        "chance_top1": round(1 / classes, 6),
        "note": "fractions 0..1 of validation images whose label is the top (top1) or among the "
        "five top (top5) predictions; resize to size/0.875 and centre crop",
    }
    return metrics, class_hits, class_seen


def evaluate(
    prepared: Path, run: str, cfg: dict[str, Any], model_dir: Path, out_dir: Path
) -> dict[str, Any]:
    """Top-1 / top-5 on the validation split (resize + centre crop).

    Writes metrics.json and per_class_accuracy.csv into `out_dir`.
    """
    ev = view(ResNet50Evaluate, cfg["evaluate"], where="resnet50.evaluate")
    model, device, checkpoint = load_for_eval(model_dir, cfg, _model_from_checkpoint)
    size, classes = checkpoint["model"]["image_size"], checkpoint["classes"]
    scores, class_hits, class_seen = _scores(model, device, prepared, ev, size, classes)
    metrics = {"workload": "resnet50", "run": run} | scores
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "metrics.json", metrics)
    wnids = read_json(prepared / "classes.json")["wnids"]
    with (out_dir / "per_class_accuracy.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["label", "wnid", "images", "top1"])
        for label, (hit, seen) in enumerate(zip(class_hits, class_seen, strict=True)):
            accuracy = f"{hit / seen:.6f}" if seen else ""
            writer.writerow([label, wnids[label], int(seen), accuracy])
    return metrics
