"""Prepare each dataset at its real per-item size at two or three sizes; prints one JSON object
with time, CPU time, peak memory and disk per item, and their linear fit to the full dataset.

Per dataset, per size (`--sizes`, items: cases, patients or images), the raw stage makes the
dataset with its synthetic source at the real per-item shape (BraTS 240x240x155, four
modalities and the label; NSCLC 512x512x130 CT; ImageNet ~500x375 JPEG; COCO 640x480; ADE20K
512x384), and the prepare stage prepares it into the variant its workload trains on. Each
stage runs as `accelpipe raw` / `accelpipe prepare` does: the CLI's `main` with the argv and
config slice the rule passes (slice check, disk preflight, `--workers`, provenance), in a
process forked for it, so its figures are its own:

- `*_s`: wall seconds of the stage (the interpreter's start and the import of the CLI and the
  dataset's module, ~0.5 s a stage, are not in it: the stage's process is forked from this
  one, which imported them);
- `*_cpu_s`: user + system CPU seconds of the stage's process and every worker it waited for
  (`os.wait4`'s rusage: RUSAGE_SELF + RUSAGE_CHILDREN of the stage);
- `*_peak_rss_mb`: the largest peak RSS of any ONE process of the stage (the parent or a
  worker; wait4's ru_maxrss, exact); `*_peak_pss_mb`: the peak of the SUM of PSS over the
  stage's process tree, sampled every 0.1 s (shared pages split between their processes, so
  it adds up like a cgroup's charge; a peak shorter than the interval can be missed);
- `raw_mb`, `downloads_mb`, `prepared_mb`: bytes of the files (apparent size) under the raw
  folder, the downloads folder (ImageNet's synthetic tars, which its raw stage imports like a
  user's) and the prepared folder.

The raw stage's figures measure the synthetic generator (and for ImageNet the import of its
tars), which is not what a user with the real data runs: they are reported, and fitted, apart
from prepare's. Not measured: the download of the official archives and their extraction, a
cold page cache (the raw files were just written).

Each figure is fitted by least squares as `intercept + slope x items` over the sizes; `slope`
is the figure per item, `full` the fit at the full dataset's item count (config.registry's
RealSize.items) and `residual` the RMS of the fit's residuals over the mean figure (0 with two
sizes, where a line always fits: `null` then; large where linear does not hold).

    PYTHONPATH=workflow python benchmarks/bench_scale.py --datasets brats coco --sizes 5 10 20

`--smoke` shrinks the per-item shapes too (so its numbers measure nothing); a measured run
always prepares items of the real size.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import smoke  # the sibling module (sys.path[0] when run as a script)

from accelpipe import cli, datasets, stages
from accelpipe.config import registry
from accelpipe.config.schema import validate
from accelpipe.plan import stage_config, targets

MB = 1e6
SAMPLE_S = 0.1  # the PSS sampler's interval


def _cases(key: str) -> Callable[[int, Sequence[int]], dict[str, Any]]:
    """A volume dataset's synthetic block for `items` cases of `shape`."""
    return lambda items, shape: {key: items, "shape": list(shape)}


def _images(val_share: float) -> Callable[[int, Sequence[int]], dict[str, Any]]:
    """An image dataset's synthetic block: `items` images, val at the real dataset's share."""

    def block(items: int, shape: Sequence[int]) -> dict[str, Any]:
        val = max(1, round(items * val_share))
        return {"train_images": items - val, "val_images": val, "size": list(shape)}

    return block


# ImageNet's real train:val is ~1281:50 images per class; here 25:1, one class per 26 images
IMAGENET_PER_CLASS = (25, 1)


def _imagenet(items: int, shape: Sequence[int]) -> dict[str, Any]:
    train, val = IMAGENET_PER_CLASS
    classes = max(2, round(items / (train + val)))
    return {"classes": classes, "train_per_class": train, "val_per_class": val, "size": list(shape)}


def _count(block: dict[str, Any]) -> int:
    """The items a synthetic block makes."""
    if "classes" in block:
        return int(block["classes"] * (block["train_per_class"] + block["val_per_class"]))
    if "train_images" in block:
        return int(block["train_images"] + block["val_images"])
    return int(block.get("cases", block.get("patients", 0)))


@dataclass(frozen=True)
class Scale:
    """How one dataset is made at a size: its synthetic block per item count and shape."""

    synthetic: Callable[[int, Sequence[int]], dict[str, Any]]
    shape: tuple[int, ...]  # the real per-item shape (the synthetic block's `shape`/`size`)
    sizes: tuple[int, ...]  # the default item counts
    smoke_shape: tuple[int, ...]
    smoke_sizes: tuple[int, ...]


SCALES = {
    # BraTS: five folds need five cases
    "brats": Scale(_cases("cases"), (240, 240, 155), (5, 10, 15), (32, 32, 16), (5, 6)),
    "nsclc": Scale(_cases("patients"), (512, 512, 130), (3, 6, 9), (32, 32, 16), (3, 4)),
    "imagenet": Scale(_imagenet, (500, 375), (208, 416, 832), (32, 24), (52, 78)),
    "coco": Scale(_images(5_000 / 123_287), (640, 480), (200, 400, 800), (64, 48), (3, 4)),
    "ade20k": Scale(_images(2_000 / 22_210), (512, 384), (200, 400, 800), (64, 48), (2, 3)),
}


def _variant(dataset: str) -> str:
    """The prepared variant the dataset's workload trains on."""
    for workload in registry.WORKLOADS:
        data, variant = targets.workload_data(workload)
        if data == dataset:
            return variant
    raise SystemExit(f"no workload reads {dataset}")


class PssSampler(threading.Thread):
    """The peak of the summed PSS of a process and its descendants, sampled until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while True:  # a sample at the start, so a stage shorter than the interval has one
            self.peak = max(self.peak, self._pss())
            if self.done.wait(SAMPLE_S):
                return

    def _pss(self) -> int:
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:  # the stage has ended
            return 0
        total = 0
        for proc in tree:
            try:
                total += proc.memory_full_info().pss
            except psutil.Error:  # a worker that ended between listing and reading
                continue
        return total

    def stop(self) -> int:
        self.done.set()
        self.join()
        return self.peak


def _stage(argv: list[str]) -> dict[str, float]:
    """Run `accelpipe <argv>` (cli.main) in a forked process; its wall, CPU and memory."""
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the stage's process: exit without running this one's cleanup
        status = 1
        try:
            status = cli.main(argv)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    sampler = PssSampler(pid)
    sampler.start()
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    pss = sampler.stop()
    if status != 0:
        log = argv[argv.index("--log") + 1]
        raise SystemExit(f"accelpipe {argv[2]} failed (status {status}); see {log}")
    return {
        "s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss * 1024 / MB,  # Linux reports KiB
        "peak_pss_mb": pss / MB,
    }


def _argv(log: Path, stage: str, **options: object) -> list[str]:
    """`accelpipe --log <log> <stage> --<option> <value> ...`'s arguments, as a rule's."""
    flags = [[f"--{k.replace('_', '-')}", str(v)] for k, v in options.items()]
    return ["--log", str(log), stage, *(part for flag in flags for part in flag)]


def _bytes(folder: Path) -> int:
    """Apparent size of the files under `folder` (0 where it does not exist)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _one_size(dataset: str, items: int, shape: Sequence[int], workers: int, root: Path) -> dict:
    """Make and prepare `dataset` at `items` items of `shape` under `root` (the caller
    removes it)."""
    synthetic = SCALES[dataset].synthetic(items, shape)
    config = validate({"datasets": {dataset: {"source": "synthetic", "synthetic": synthetic}}})
    variant = _variant(dataset)
    raw, downloads = root / "raw" / dataset, root / "downloads" / dataset
    prepared = root / "prepared" / dataset / variant
    prepared.parent.mkdir(parents=True)
    made = _stage(
        _argv(
            root / "raw.log",
            "raw",
            dataset=dataset,
            config_json=json.dumps(stage_config.raw(config, dataset)),
            out=raw,
            downloads=downloads,
        )
    )
    done = _stage(
        _argv(
            root / "prepare.log",
            "prepare",
            dataset=dataset,
            variant=variant,
            raw=raw,
            out=prepared,
            config_json=json.dumps(stage_config.prepare(config, dataset, variant)),
            workers=workers,
        )
    )
    row = {
        "items": _count(config["datasets"][dataset]["synthetic"]),
        **{f"raw_{k}": v for k, v in made.items()},
        **{f"prepare_{k}": v for k, v in done.items()},
        "raw_mb": _bytes(raw) / MB,
        "downloads_mb": _bytes(downloads) / MB,
        "prepared_mb": _bytes(prepared) / MB,
    }
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


# the figures fitted against items
FITTED = (
    "prepare_s",
    "prepare_cpu_s",
    "prepare_peak_rss_mb",
    "prepare_peak_pss_mb",
    "raw_s",
    "raw_cpu_s",
    "raw_mb",
    "downloads_mb",
    "prepared_mb",
)


def fit(x: Sequence[float], y: Sequence[float], full: int) -> dict[str, float | None]:
    """Least-squares line y = intercept + slope * x; its value at `full` and its relative RMS
    residual (None with two points, which any line fits exactly)."""
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((xi - mx) ** 2 for xi in x)
    slope = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y, strict=True)) / sxx
    intercept = my - slope * mx
    residual = None
    if n > 2:
        rms = math.sqrt(
            sum((yi - intercept - slope * xi) ** 2 for xi, yi in zip(x, y, strict=True)) / n
        )
        residual = round(rms / my, 4) if my else 0.0
    return {
        "slope": round(slope, 6),
        "intercept": round(intercept, 4),
        "full": round(intercept + slope * full, 1),
        "residual": residual,
    }


def _measure(dataset: str, sizes: Sequence[int], shape: Sequence[int], args: Any) -> dict:
    real = registry.dataset(dataset).real
    # imported once here, not in each stage (like the interpreter's start)
    importlib.import_module(stages.MODULES["prepare"])
    datasets.get(dataset)
    rows = []
    for items in sizes:
        root = Path(tempfile.mkdtemp(prefix=f"bench_scale.{dataset}.", dir=args.tmp))
        try:
            rows.append(_one_size(dataset, items, shape, args.workers, root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(json.dumps({dataset: rows[-1]}), file=sys.stderr)
    counts = [row["items"] for row in rows]
    if len(set(counts)) < 2:
        raise SystemExit(f"{dataset}: sizes {list(sizes)} make {counts} items: need two counts")
    fits = {k: fit(counts, [row[k] for row in rows], real.items) for k in FITTED}
    return {
        "shape": list(shape),
        "variant": _variant(dataset),
        "full_items": real.items,
        "sizes": rows,
        "fit": fits,
        # the registry's full-size disk figures (the preflight's), beside the fit's
        "registry_mb": {"extracted": real.extracted / MB, "prepared": real.prepared / MB},
    }


def _full_size(measured: dict[str, Any]) -> dict[str, float | None]:
    """The headline per dataset: the fit at full size, in hours, MB and GB."""
    f, rows = measured["fit"], measured["sizes"]
    residuals = [f[k]["residual"] for k in ("prepare_s", "prepared_mb")]

    def peak(key: str) -> int:
        # more items never need less memory: where the fit's slope is noise and points down,
        # the largest peak measured
        return round(max(f[key]["full"], *(row[key] for row in rows)))

    return {
        "prepare_h": round(f["prepare_s"]["full"] / 3600, 3),
        "prepare_cpu_h": round(f["prepare_cpu_s"]["full"] / 3600, 3),
        "prepare_peak_rss_mb": peak("prepare_peak_rss_mb"),
        "prepare_peak_pss_mb": peak("prepare_peak_pss_mb"),
        "raw_gb": round(f["raw_mb"]["full"] / 1e3, 2),
        "downloads_gb": round(f["downloads_mb"]["full"] / 1e3, 2),
        "prepared_gb": round(f["prepared_mb"]["full"] / 1e3, 2),
        "worst_residual": None if None in residuals else max(residuals),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", choices=tuple(SCALES), default=list(SCALES))
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="item counts (default: per dataset)"
    )
    # the prepare rule's `threads: 4`, as Snakemake gives it on a machine with fewer cores
    ap.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--tmp", default=None, help="scratch folder on a disk, not tmpfs")
    args = smoke.parse_args(ap, argv, workers=1)

    load = os.getloadavg()[0]
    measured = {}
    for dataset in args.datasets:
        scale = SCALES[dataset]
        sizes = args.sizes or (scale.smoke_sizes if args.smoke else scale.sizes)
        shape = scale.smoke_shape if args.smoke else scale.shape
        measured[dataset] = _measure(dataset, sizes, shape, args)
    result = {
        "bench": "scale",
        "smoke": args.smoke,
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "load_1m": {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)},
        "full_size": {d: _full_size(m) for d, m in measured.items()},
        "datasets": measured,
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
