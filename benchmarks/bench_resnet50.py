"""ResNet-50 stage overhead: our train img/s vs a minimal loop's, and the loader's img/s vs ours.

Measured in this process with the shipped config.yaml's `resnet50` block (its small model,
image size, batch, optimizer, label smoothing and channels-last), on CPU in fp32 unless the
options say otherwise (`--device cuda --precision bf16`, `--full` for the real ResNet-50 at
224 px, batch 256, 1000 classes):

* ours: accelpipe's Trainer (workloads.resnet50.workload.build_model, CrossEntropyLoss with label
  smoothing, optimizer and LR schedule from accelpipe.models.optim, GradScaler, autocast, to_device
  with channels-last, record_function sections, per-step log row) running
  `Trainer._run_epoch` over a fixed list of pre-made (image, label) batches already on the
  device, in the loader's NCHW layout: the loader and the host-to-device copy are excluded.
  The profiler is off (settings.PROFILE_OFF); one profiled epoch covering the block's
  profile schedule is reported as extra information.
* minimal: the same ResNet (same init seed) in the same memory format, the same optimizer
  (torch.optim.SGD over the same decay / no-decay groups, or accelpipe's LARS, which torch
  lacks), CrossEntropyLoss(label_smoothing), torch.autocast when not fp32, plain
  zero_grad / forward / loss / backward / step on the same tensors.

The variants alternate in rounds (the order flips every round); the ratio is the median of
the per-round ratios ours / minimal in img/s. Target: >= 0.95. With cuda the clocks are read
after a synchronize.

Loader: IndexedImages + TrainTransform + make_loader over a synthetic ImageNet index
(prepared in a temp dir) with the block's loader_workers and batch; img/s after the first
batch, against our train img/s. Prints one JSON object as the last line.

On a machine shared with other jobs, two OpenMP threads stall whenever another process holds
a core, and single rounds swing several-fold; `--threads 1` keeps the ratio steady there
(ratio_of_best and ratio_cpu_time are printed as cross-checks).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import statistics
import tempfile
from collections.abc import Iterator
from operator import truediv
from pathlib import Path
from typing import Any

import torch
import yaml

from accelpipe.config.schema import validate
from accelpipe.config.settings import ProfileSettings, view
from accelpipe.datasets import imagenet
from accelpipe.datasets.sources import make_raw
from accelpipe.devices import torch_device
from accelpipe.inputs.imagefolder import IndexedImages, TrainTransform, make_loader
from accelpipe.models import optim
from accelpipe.models.resnet50 import ResNet
from accelpipe.workloads.resnet50.declaration import ResNet50Train
from accelpipe.workloads.resnet50.workload import build_model
from benchmarks import smoke
from benchmarks.step_harness import (
    Batch,
    TrainerSteps,
    alternate,
    loader_rate,
    same_weights,
    timed,
)

REPO = Path(__file__).resolve().parents[1]
TARGET = 0.95
FULL_MODEL = {"width": 64, "layers": [3, 4, 6, 3], "image_size": 224}
FULL_BATCH, FULL_CLASSES = 256, 1000
# Synthetic JPEGs near ImageNet's typical 500x375 for --full, so decoding costs what it does.
FULL_JPEG_SIZE = [500, 375]


def make_batches(
    n: int, batch: int, size: int, classes: int, device: torch_device.Device, seed: int
) -> list[Batch]:
    """`n` distinct normalized-image batches (NCHW, as the loader gives) on the device."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        image = torch.randn(batch, 3, size, size, generator=gen)
        label = torch.randint(0, classes, (batch,), generator=gen)
        out.append((image.to(device.torch_device), label.to(device.torch_device)))
    return out


class Minimal:
    """The same ResNet and optimizer math in the plainest loop."""

    def __init__(
        self,
        model_cfg: dict[str, Any],
        classes: int,
        train_cfg: ResNet50Train,
        device: torch_device.Device,
        batches: list[Batch],
    ) -> None:
        torch.manual_seed(train_cfg.seed)
        model = ResNet(tuple(model_cfg["layers"]), classes, model_cfg["width"])
        self.memory_format = (
            torch.channels_last if train_cfg.channels_last else torch.contiguous_format
        )
        self.model = model.to(device.torch_device, memory_format=self.memory_format)
        self.model.train()
        decay, no_decay = optim.split_decay(self.model)
        if train_cfg.optimizer == "sgd":
            groups = [
                {"params": decay, "weight_decay": train_cfg.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ]
            self.optim: torch.optim.Optimizer = torch.optim.SGD(
                groups, lr=train_cfg.lr, momentum=train_cfg.momentum
            )
        else:  # lars: no torch equivalent, so accelpipe's (as the trainer builds it on CPU/GPU)
            groups = [{"params": decay, "lars": True}, {"params": no_decay, "lars": False}]
            self.optim = optim.LARS(
                groups,
                lr=train_cfg.lr,
                momentum=train_cfg.momentum,
                weight_decay=train_cfg.weight_decay,
            )
        self.loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=train_cfg.label_smoothing)
        dtype = device.autocast_dtype
        self.autocast = (
            torch.autocast(device.torch_device.type, dtype=dtype) if dtype is not None else None
        )
        self.batches = batches

    def run(self, steps: int) -> None:
        for image, label in itertools.islice(itertools.cycle(self.batches), steps):
            image = image.contiguous(memory_format=self.memory_format)
            self.optim.zero_grad(set_to_none=True)
            with self.autocast or contextlib.nullcontext():
                loss = self.loss_fn(self.model(image), label)
            loss.backward()
            self.optim.step()


def measure_steps(
    model_cfg: dict[str, Any],
    classes: int,
    train_cfg: ResNet50Train,
    device: torch_device.Device,
    profile: ProfileSettings,
    args: argparse.Namespace,
    tmp: Path,
) -> dict[str, Any]:
    size, batch = model_cfg["image_size"], train_cfg.batch_size
    batches = make_batches(args.distinct_batches, batch, size, classes, device, seed=0)
    torch.manual_seed(train_cfg.seed)
    loss = torch.nn.CrossEntropyLoss(label_smoothing=train_cfg.label_smoothing)
    model = build_model(model_cfg, classes)
    ours = TrainerSteps(model, loss, train_cfg, device, batches, tmp / "work", profile)
    minimal = Minimal(model_cfg, classes, train_cfg, device, batches)
    same_init = same_weights(ours.trainer.model, minimal.model)
    wall, cpu = alternate(
        {"ours": ours.run, "minimal": minimal.run},
        args.rounds,
        args.steps,
        args.warmup_steps,
        device,
    )
    img_s = {name: batch / statistics.median(t) for name, t in wall.items()}
    out: dict[str, Any] = {
        "same_init": same_init,
        "img_per_s": {k: round(v, 1) for k, v in img_s.items()},
        "step_ms": {k: round(statistics.median(v) * 1e3, 2) for k, v in wall.items()},
        "step_ms_rounds": {k: [round(x * 1e3, 1) for x in v] for k, v in wall.items()},
        # Each round's two timings share that moment's load: the median of the per-round
        # ratios is the estimate; the ratio of the medians is shown beside it.
        "ratio": round(statistics.median(map(truediv, wall["minimal"], wall["ours"])), 4),
        "ratio_of_medians": round(img_s["ours"] / img_s["minimal"], 4),
        "ratio_of_best": round(min(wall["minimal"]) / min(wall["ours"]), 4),
    }
    if device.backend == "cpu":  # CPU time is less hit by other jobs' load (cpu only)
        out["ratio_cpu_time"] = round(
            statistics.median(map(truediv, cpu["minimal"], cpu["ours"])), 4
        )
    if args.profiled:
        # One epoch covering the block's profiler schedule (traces written to tmp): the
        # img/s while the profiler runs, against the minimal loop's median.
        s = profile.schedule
        steps = max(args.steps, (s.wait + s.warmup + s.active) * max(s.repeat, 1))
        w, _ = timed(lambda: ours.run(steps, profiled=True), device)
        out["profiled_steps"] = steps
        out["img_per_s_profiled"] = round(batch * steps / w, 1)
        out["ratio_profiled"] = round(batch * steps / w / img_s["minimal"], 4)
    ours.close()
    return out


def _passes(loader: torch.utils.data.DataLoader) -> Iterator[Batch]:
    while True:  # one pass after another, as the stage repeats passes to fill an epoch
        yield from loader


def measure_loader(
    prepared: Path, size: int, train_cfg: ResNet50Train, device: torch_device.Device, batches: int
) -> dict[str, Any]:
    dataset = IndexedImages(prepared, "train", TrainTransform(size=size))
    loader = make_loader(
        dataset,
        batch_size=train_cfg.batch_size,
        shuffle=True,
        workers=train_cfg.loader_workers,
        pin_memory=device.backend != "cpu",
        seed=train_cfg.seed,
        drop_last=True,
    )
    it = _passes(loader)
    first, rate = loader_rate(it, batches)
    it.close()
    del loader  # stop the persistent workers before the step timing
    return {
        "train_images": len(dataset),
        "loader_workers": train_cfg.loader_workers,
        "first_batch_s": round(first, 3),
        "loader_img_per_s": round(rate, 1),
    }


def prepare_data(imagenet_cfg: dict[str, Any], tmp: Path) -> Path:
    (tmp / "downloads").mkdir()
    make_raw(imagenet.SOURCES, imagenet_cfg, tmp / "raw", tmp / "downloads")
    options = {"prepare": {}}
    return imagenet.prepare_variant("index", tmp / "raw", tmp / "prepared", options, workers=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument(
        "--full", action="store_true", help="real ResNet-50: width 64, 3-4-6-3, 224 px, batch 256"
    )
    parser.add_argument("--batch", type=int, default=None, help="default: config (256 --full)")
    parser.add_argument("--classes", type=int, default=None, help="default: data (1000 --full)")
    parser.add_argument("--steps", type=int, default=3, help="steps per variant per round")
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--distinct-batches", type=int, default=3, help="pre-made batches cycled")
    parser.add_argument("--threads", type=int, default=None, help="default: torch's")
    parser.add_argument("--loader-batches", type=int, default=20)
    parser.add_argument("--workers", type=int, default=None, help="default: train.loader_workers")
    parser.add_argument(
        "--no-profiled", dest="profiled", action="store_false", help="skip the profiled variant"
    )
    args = smoke.parse_args(
        parser,
        argv,
        batch=4,
        loader_batches=1,
        workers=0,
        **smoke.STEP_LOOP,
    )
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    config = validate(yaml.safe_load((REPO / "config.yaml").read_text()))
    block, data_cfg = config["resnet50"], config["datasets"]["imagenet"]
    model_cfg, synth = dict(block["model"]), dict(data_cfg["synthetic"])
    # The step alone, as a benchmark row trains (stage_config.benchmark_row): no evaluation
    # inside training, which the Trainer would refuse to schedule without the job's evaluator.
    train = {**block["train"], "precision": args.precision, "eval_every": 0}
    classes = synth["classes"]
    if args.full:
        model_cfg.update(FULL_MODEL)
        train["batch_size"], classes = FULL_BATCH, FULL_CLASSES
        synth["size"] = FULL_JPEG_SIZE
    if args.batch is not None:
        train["batch_size"] = args.batch
    if args.classes is not None:
        classes = args.classes
    if args.workers is not None:
        train["loader_workers"] = args.workers
    # At least two full batches per pass over the synthetic images (drop_last).
    need = math.ceil(2 * train["batch_size"] / synth["classes"])
    synth["train_per_class"] = max(synth["train_per_class"], need)
    # One epoch of `steps`: the schedule's warmup and decay span what the bench runs.
    train_cfg = dataclasses.replace(
        view(ResNet50Train, train), epochs=1, steps_per_epoch=args.steps
    )
    device = torch_device.resolve(args.device, train_cfg.precision, train_cfg.channels_last)
    profile = view(ProfileSettings, smoke.profile(block["profile"], args.smoke))
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        prepared = prepare_data({**data_cfg, "synthetic": synth}, tmp)
        size = model_cfg["image_size"]
        loader = measure_loader(prepared, size, train_cfg, device, args.loader_batches)
        steps = measure_steps(model_cfg, classes, train_cfg, device, profile, args, tmp)
    result = {
        "bench": "resnet50_train_vs_minimal",
        "smoke": args.smoke,
        "device": device.name,
        "threads": torch.get_num_threads(),
        "precision": device.precision,
        "channels_last": train_cfg.channels_last,
        "optimizer": train_cfg.optimizer,
        "model": {**model_cfg, "classes": classes},
        "batch_size": train_cfg.batch_size,
        "steps_per_round": args.steps,
        "rounds": args.rounds,
        **steps,
        "target_ratio_min": TARGET,
        "pass": steps["ratio"] >= TARGET,
        "jpeg_size": synth["size"],
        **loader,
        "loader_vs_train": round(loader["loader_img_per_s"] / steps["img_per_s"]["ours"], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
