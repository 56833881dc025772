"""Benchmark the TFRecord preparations (COCO, ADE20K) against their I/O floor; prints one
JSON object with a result per dataset.

COCO's prepare (accelpipe.datasets.coco.prepare) reads every JPEG, checks its header, hashes
it and writes it into an Example. ADE20K's (accelpipe.datasets.ade20k.prepare) reads every
JPEG and annotation PNG, checks the JPEG header and the PNG's header and chunk CRCs and
writes both into an Example; with --verify-labels it also decodes every PNG to check its
values (segmenter.prepare.verify_labels, off by default).

The floor is what no converter that keeps the file bytes can avoid: reading the same files
(those it converts), split into the same shards and run on the same worker pool
(`datasets.pool.map_batches`, one pool for all splits), in the same process.
`ratio_to_floor` = floor_s / prepare_s (1.0: the conversion costs no more than reading the
bytes). The floor reads no instances JSON: prepare's parsing of it counts against prepare.

`copy_ratio_to_floor` = floor_s / copy_s bounds it from above: `copy` reads the same files
on the same pools and writes their bytes into the shard files, nothing else, so no converter
that writes the bytes it reads can do better. Where the disk reads about as fast as memory
(this VM: ~1 GB/s from an evicted file) writing is not free, and at a few thousand images
that bound falls below 1 (0.8-0.9 here).

`bound` gives each side's verdict (benchmarks/bound.py): `cpu` when it kept its workers' cores
busy, so only less work per record helps, `waits` when it left them idle (the disk, the
parent's serial part, a pool's start-up).

Each side is timed twice per repeat: `cold`, reading from disk (every input file is dropped
from the page cache first, posix_fadvise DONTNEED, as for a dataset larger than memory or
freshly downloaded), and `warm`, from the page cache (a re-run on a small set). The floor of the
warm case is a memory copy: there a converter pays its hashing and encoding in full.

`one_process` adds, per train record in this process with the inputs cached, the time to
read its files and to `encode` it (read, checks, hash or PNG decode, Example pieces): where the
pools' start-up and the disk no longer count (a large dataset on a fast disk), the ratio
tends to read_us / encode_us.

`--read-mb-per-s N` throttles reads from the disk holding the scratch folder to N MB/s for this
process and its workers (a blkio cgroup: cgroup v1 `blkio.throttle.read_bps_device` or v2
`io.max`; needs root): a disk slower than this VM's, where a converter's compute can hide
behind the reads. Only reads are limited; both sides are measured under the same limit.

The process imports what `accelpipe prepare` imports and no more: with TensorFlow imported,
every fork of a pool took ~10 ms longer on both sides, which flattered the ratio.

    PYTHONPATH=workflow python benchmarks/bench_tfrecord.py --train 320 --val 80 --size 640 480
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from math import inf
from pathlib import Path
from typing import Any

import bound  # sibling modules (sys.path[0] when run as a script)
import smoke

from accelpipe.datasets import ade20k, ade20k_layout, ade20k_tfrecord, coco, coco_tfrecord
from accelpipe.datasets.ade20k_synthetic import synthesize as ade20k_synthesize
from accelpipe.datasets.ade20k_tfrecord import pairs
from accelpipe.datasets.coco_instances import records
from accelpipe.datasets.coco_synthetic import synthesize as coco_synthesize
from accelpipe.datasets.pool import map_batches
from accelpipe.datasets.readahead import ahead

DATASETS = ("coco", "ade20k")
CACHES = ("cold", "warm")


def _paths(item: tuple[str, ...]) -> tuple[str, ...]:
    return item


def _shard_pass(task: tuple[str | None, list[tuple[str, ...]]]) -> int:
    """Read these files (with the read-ahead prepare gets, so only compute differs) and, where
    `task[0]` names a file, write their bytes to it one after another; the bytes read."""
    out_path, items = task
    total = 0
    with open(out_path, "wb") if out_path else contextlib.nullcontext() as out:
        for paths in ahead(items, _paths):
            for path in paths:
                with open(path, "rb") as fh:
                    data = fh.read()
                if out is not None:
                    out.write(data)
                total += len(data)
    return total


def _read_pass(
    files: dict[str, list[tuple[str, ...]]], shards: dict[str, int], workers: int, out: Path | None
) -> int:
    """Read those files, one task per shard on `workers` processes (one pool for all splits,
    as prepare's); the bytes read: the floor. With `out`, each task also writes its bytes to a
    file there: the copy."""
    if out is not None:
        out.mkdir()

    def batches() -> Iterator[list[tuple[str | None, list[tuple[str, ...]]]]]:
        for split, count in shards.items():
            items = files[split]
            yield [
                (str(out / f"{split}-{i}") if out else None, items[i::count]) for i in range(count)
            ]

    total = sum(map_batches(_shard_pass, batches(), workers))
    if out is not None:
        shutil.rmtree(out)
    return total


def _coco_items(raw: Path) -> dict[str, list[Any]]:
    """prepare's plan: the image records it writes (train images without boxes are skipped)."""
    out = {}
    for split in coco.SPLITS:
        ann_file, images = coco.annotation_file(raw, split), raw / f"{split}2017"
        out[split], _stats, _cats = records(ann_file, images, skip_empty=split == "train")
    return out


def _ade20k_items(raw: Path) -> dict[str, list[Any]]:
    """prepare's plan: every image with its annotation."""
    return {split: pairs(raw, split) for split in ade20k_layout.SPLITS}


def _per_record_us(
    items: list[Any], encode: Callable[[Any], bytes], files: Callable[[Any], Iterable[str]]
) -> dict[str, float]:
    """Microseconds per record in this one process, inputs in the page cache: reading its
    files, and `encode` (read, checks, hash or decode, Example), which a writer adds to it.
    Their quotient is the ratio where neither pool start-up nor the disk counts."""
    start = time.perf_counter()
    for item in items:
        for path in files(item):
            with open(path, "rb") as fh:
                fh.read()
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    for item in items:
        encode(item)
    encode_s = time.perf_counter() - start
    return {
        "read_us": round(read_s / len(items) * 1e6, 1),
        "encode_us": round(encode_s / len(items) * 1e6, 1),
    }


def _evict(files: list[Path]) -> None:
    """Drop these files from the page cache (their next read goes to the disk)."""
    os.sync()  # DONTNEED leaves dirty pages; flush them first
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _read_limit(scratch: Path, mb_per_s: float | None) -> Iterator[None]:
    """Reads from the disk holding `scratch` throttled to `mb_per_s` for this process and the
    workers it starts, by a blkio cgroup made for the run and removed after it."""
    if not mb_per_s:
        yield
        return
    dev = os.stat(scratch).st_dev
    device, rate = f"{os.major(dev)}:{os.minor(dev)}", int(mb_per_s * 1e6)
    v1, v2 = Path("/sys/fs/cgroup/blkio"), Path("/sys/fs/cgroup")
    if (v1 / "blkio.throttle.read_bps_device").exists():
        root, limit_file, limit = v1, "blkio.throttle.read_bps_device", f"{device} {rate}"
    elif "io" in (v2 / "cgroup.controllers").read_text().split():
        root, limit_file, limit = v2, "io.max", f"{device} rbps={rate}"
    else:
        raise SystemExit("--read-mb-per-s: no blkio (cgroup v1) or io (cgroup v2) controller")
    group = root / f"bench_tfrecord.{os.getpid()}"
    group.mkdir()
    try:
        (group / limit_file).write_text(limit)
        (group / "cgroup.procs").write_text(str(os.getpid()))
        yield
    finally:
        (root / "cgroup.procs").write_text(str(os.getpid()))
        group.rmdir()


def _measure(dataset: str, args: argparse.Namespace, scratch: Path) -> dict:
    shards = {"train": args.train_shards, "val": args.val_shards}
    options = {"verify_labels": True} if args.verify_labels and dataset == "ade20k" else {}
    module, synthesize, plan, encode, item_files = {
        "coco": (
            coco,
            coco_synthesize,
            _coco_items,
            coco_tfrecord.encode,
            coco_tfrecord.image_files,
        ),
        "ade20k": (
            ade20k,
            ade20k_synthesize,
            _ade20k_items,
            functools.partial(ade20k_tfrecord.encode, verify_labels=bool(options)),
            ade20k_tfrecord.pair_files,
        ),
    }[dataset]
    raw = synthesize(
        scratch / f"{dataset}-raw", train_images=args.train, val_images=args.val, size=args.size
    )
    items = plan(raw)
    files = {
        split: [tuple(item_files(i)) for i in split_items] for split, split_items in items.items()
    }
    inputs = [p for p in raw.rglob("*") if p.is_file()]
    sides = ("floor", "copy", "prepare")
    best = {c: {side: bound.Pass(wall_s=inf) for side in sides} for c in CACHES}
    input_bytes, written = 0, {}
    for i in range(args.repeats):  # interleaved so both sides see the same machine state
        for cache in CACHES:
            measured = {}
            for side in sides:
                if cache == "cold":
                    _evict(inputs)
                with bound.timed() as measured[side]:
                    if side == "prepare":
                        out = module.prepare(
                            raw,
                            scratch / f"{dataset}-prep{i}",
                            train_shards=args.train_shards,
                            val_shards=args.val_shards,
                            workers=args.workers,
                            **options,
                        )
                    else:
                        copy_to = scratch / f"{dataset}-copy{i}" if side == "copy" else None
                        input_bytes = _read_pass(files, shards, args.workers, copy_to)
            written = json.loads((out / "dataset.json").read_text())["splits"]
            shutil.rmtree(out)
            for side in sides:
                best[cache][side] = min(best[cache][side], measured[side], key=lambda p: p.wall_s)
    images = args.train + args.val
    return (
        {
            "images": images,
            "records": written["train"]["images"] + written["val"]["images"],
            "size": list(args.size),
            "shards": shards,
            "workers": args.workers,
            **options,
            **({"read_mb_per_s_limit": args.read_mb_per_s} if args.read_mb_per_s else {}),
            "input_mb": round(input_bytes / 1e6, 2),
        }
        | {cache: _timings(best[cache], images, input_bytes, args.workers) for cache in CACHES}
        | {"one_process": _per_record_us(items["train"], encode, item_files)}
    )


def _timings(
    best: dict[str, bound.Pass], images: int, input_bytes: int, workers: int
) -> dict[str, Any]:
    floor_s, copy_s, prepare_s = (best[side].wall_s for side in ("floor", "copy", "prepare"))
    return {
        "floor_s": round(floor_s, 4),
        "copy_s": round(copy_s, 4),
        "copy_ratio_to_floor": round(floor_s / copy_s, 3),
        "prepare_s": round(prepare_s, 4),
        "images_per_s": round(images / prepare_s, 1),
        "mb_per_s": round(input_bytes / 1e6 / prepare_s, 1),
        "ratio_to_floor": round(floor_s / prepare_s, 3),
        "bound": {side: bound.verdict(measured, workers) for side, measured in best.items()},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=(*DATASETS, "all"), default="all")
    ap.add_argument("--train", type=int, default=320, help="synthetic train images")
    ap.add_argument("--val", type=int, default=80, help="synthetic val images")
    ap.add_argument("--size", type=int, nargs=2, default=(640, 480), metavar=("W", "H"))
    ap.add_argument("--train-shards", type=int, default=8)
    ap.add_argument("--val-shards", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="best of N timings for each side")
    ap.add_argument(
        "--verify-labels", action="store_true", help="ADE20K: decode every PNG in prepare"
    )
    ap.add_argument("--tmp", default=None, help="scratch folder on a disk, not tmpfs")
    ap.add_argument(
        "--read-mb-per-s", type=float, default=None, help="throttle reads from that disk (root)"
    )
    args = smoke.parse_args(
        ap,
        argv,
        train=2,
        val=1,
        size=(64, 48),
        train_shards=1,
        val_shards=1,
        workers=1,
        repeats=1,
    )

    chosen = DATASETS if args.dataset == "all" else (args.dataset,)
    scratch = Path(tempfile.mkdtemp(prefix="bench_tfrecord.", dir=args.tmp))
    try:
        with _read_limit(scratch, args.read_mb_per_s):
            measured = {d: _measure(d, args, scratch) for d in chosen}
            result = {"bench": "tfrecord", "smoke": args.smoke} | measured
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
