"""Data loading vs training: batches/s the slice loader produces vs batches/s the train step eats.

Both are measured in this process on the same prepared data and config (the embedded
default's model and batch size, CPU). Prints one JSON object; target ratio >= 3.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import smoke  # the sibling module (sys.path[0] when run as a script)
import torch
import yaml

from accelpipe.config.schema import validate
from accelpipe.datasets import brats
from accelpipe.inputs.slices import SliceBatches
from accelpipe.models.dynunet2d import DynUNet2D
from accelpipe.models.losses import DeepSupervisionLoss, DiceCELoss

REPO = Path(__file__).resolve().parents[1]


def loader_rate(prepared: Path, cases: list[str], cfg: dict, batches: int, workers: int) -> float:
    dataset = SliceBatches(
        prepared,
        cases,
        batch_size=cfg["batch_size"],
        steps=batches + 2,
        oversampling=cfg["oversampling"],
        augment=cfg["augment"],
        seed=1,
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
    it = iter(loader)
    next(it), next(it)  # worker start-up is not throughput
    started = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches / (time.perf_counter() - started)


def step_rate(model_cfg: dict, train_cfg: dict, patch: list[int], steps: int) -> float:
    model = DynUNet2D(
        4,
        4,
        model_cfg["filters"],
        model_cfg["strides"],
        model_cfg["deep_supervision"],
        model_cfg["deep_supr_num"],
    )
    loss_fn = DeepSupervisionLoss(DiceCELoss())
    optim = torch.optim.AdamW(model.parameters(), lr=train_cfg["lr"])
    image = torch.randn(train_cfg["batch_size"], 4, *patch)
    label = torch.randint(0, 4, (train_cfg["batch_size"], 1, *patch))

    def step() -> None:
        optim.zero_grad(set_to_none=True)
        loss_fn(model(image), label).backward()
        optim.step()

    step(), step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=None, help="default: train.loader_workers")
    parser.add_argument("--cases", type=int, default=None, help="default: the synthetic data's")
    # five cases: prepare splits them into five folds
    args = smoke.parse_args(parser, argv, batches=1, steps=1, workers=0, cases=5)
    config = validate(yaml.safe_load((REPO / "config.yaml").read_text()))
    block, synth = config["unet2d"], config["datasets"]["brats"]["synthetic"]
    workers = block["train"]["loader_workers"] if args.workers is None else args.workers
    n_cases = synth["cases"] if args.cases is None else args.cases
    with tempfile.TemporaryDirectory() as tmp:
        raw = brats.synthesize(Path(tmp) / "raw", cases=n_cases, shape=synth["shape"], seed=0)
        prepared = brats.prepare(
            raw, Path(tmp) / "prepared", patch_size=block["prepare"]["patch_size"]
        )
        cases = json.loads((prepared / "config.json").read_text())["cases"]
        loader = loader_rate(prepared, cases, block["train"], args.batches, workers)
    torch.set_num_threads(torch.get_num_threads())
    train = step_rate(block["model"], block["train"], block["prepare"]["patch_size"], args.steps)
    print(
        json.dumps(
            {
                "bench": "loader_vs_train",
                "smoke": args.smoke,
                "batch_size": block["train"]["batch_size"],
                "loader_workers": workers,
                "loader_batches_per_s": round(loader, 2),
                "train_batches_per_s": round(train, 2),
                "ratio": round(loader / train, 2),
                "target_ratio": 3.0,
            }
        )
    )


if __name__ == "__main__":
    main()
