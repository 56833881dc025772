"""Benchmark BraTS preprocessing against its I/O floor; prints one JSON object.

The floor is what prepare cannot avoid: gzip-decompressing every .nii.gz (images and labels)
with the same number of worker processes. `ratio_to_floor` = floor_s / prepare_s (1.0 means
prepare costs no more than decompression alone). `bound` says, for each side, whether it
kept its workers' cores busy (`cpu`: only less work per case helps) or waited (benchmarks/bound.py).

    PYTHONPATH=workflow python benchmarks/bench_prepare.py --cases 16 --shape 128 128 64

`--variant` rewrites the synthetic images as another NIfTI variant before timing (labels stay
NIfTI-1): `nifti2`, `big-endian` (NIfTI-1) or `scaled` (int16 with scl_slope/scl_inter); the
default `nifti1` is the little-endian float32 NIfTI-1 of the MSD download.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import shutil
import sys
import tempfile
from pathlib import Path

import bound  # sibling modules (sys.path[0] when run as a script)
import nibabel as nib
import numpy as np
import smoke

from accelpipe.datasets import brats

VARIANTS = ("nifti1", "nifti2", "big-endian", "scaled")


def _rewrite(image: Path, variant: str) -> None:
    """Save `image` again as `variant` (same voxels, up to int16 rounding for `scaled`)."""
    data = np.asanyarray(nib.load(image).dataobj)
    nifti2 = variant == "nifti2"
    header = (nib.Nifti2Header if nifti2 else nib.Nifti1Header)(
        endianness=">" if variant == "big-endian" else "<"
    )
    img = (nib.Nifti2Image if nifti2 else nib.Nifti1Image)(data, np.eye(4), header)
    img.set_data_dtype(np.int16 if variant == "scaled" else data.dtype)
    nib.save(img, image)


def _decompressed_size(path: str) -> int:
    with gzip.open(path, "rb") as f:
        return len(f.read())


def _floor(files: list[str], workers: int) -> int:
    """Gunzip all `files` on `workers` processes (same pool type as prepare); the bytes."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    if workers <= 1:
        return sum(map(_decompressed_size, files))
    with ctx.Pool(workers) as pool:
        return sum(pool.imap_unordered(_decompressed_size, files, chunksize=1))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=16)
    ap.add_argument("--shape", type=int, nargs=3, default=(128, 128, 64), metavar=("X", "Y", "Z"))
    ap.add_argument("--patch", type=int, nargs=2, default=(192, 160), metavar=("H", "W"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="best of N timings for each side")
    ap.add_argument("--variant", choices=VARIANTS, default="nifti1", help="images' NIfTI variant")
    ap.add_argument("--tmp", default=None, help="scratch folder (default: system temp)")
    # five cases: prepare splits them into five folds
    args = smoke.parse_args(
        ap, argv, cases=5, shape=(32, 32, 16), patch=(32, 32), workers=1, repeats=1
    )

    scratch = Path(tempfile.mkdtemp(prefix="bench_prepare.", dir=args.tmp))
    try:
        task = brats.synthesize(scratch / "raw", cases=args.cases, shape=args.shape)
        if args.variant != "nifti1":
            for image in sorted((task / "imagesTr").glob("*.nii.gz")):
                _rewrite(image, args.variant)
        files = sorted(str(p) for p in task.rglob("*.nii.gz"))
        input_mb = sum(Path(f).stat().st_size for f in files) / 1e6
        best = {side: bound.Pass(wall_s=float("inf")) for side in ("floor", "prepare")}
        for i in range(args.repeats):  # interleaved so both sides see the same cache state
            with bound.timed() as floor:
                raw_bytes = _floor(files, args.workers)
            with bound.timed() as prep:
                brats.prepare(
                    task, scratch / f"prep{i}", patch_size=args.patch, workers=args.workers
                )
            shutil.rmtree(scratch / f"prep{i}")
            for side, measured in (("floor", floor), ("prepare", prep)):
                best[side] = min(best[side], measured, key=lambda p: p.wall_s)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    raw_mb, floor_s, prepare_s = raw_bytes / 1e6, best["floor"].wall_s, best["prepare"].wall_s
    result = {
        "bench": "prepare",
        "smoke": args.smoke,
        "cases": args.cases,
        "shape": list(args.shape),
        "workers": args.workers,
        "variant": args.variant,
        "input_mb": round(input_mb, 2),
        "raw_mb": round(raw_mb, 2),
        "floor_s": round(floor_s, 4),
        "prepare_s": round(prepare_s, 4),
        "cases_per_s": round(args.cases / prepare_s, 2),
        "mb_per_s": round(raw_mb / prepare_s, 1),
        "ratio_to_floor": round(floor_s / prepare_s, 3),
        "bound": {side: bound.verdict(measured, args.workers) for side, measured in best.items()},
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
