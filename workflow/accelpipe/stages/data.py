"""`raw` and `prepare`: fetch, synthesize or link a raw dataset; preprocess it."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from accelpipe import datasets
from accelpipe.config.schema import stage_slice
from accelpipe.core import provenance
from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path, read_json
from accelpipe.core.resources import gb
from accelpipe.datasets.download import VERIFIED_SUFFIX, verified_downloads
from accelpipe.datasets.sources import MADE_FROM, config_key, made_from, make_raw, raw_lock
from accelpipe.plan import capacity

log = logging.getLogger(__name__)
# The raw stage.json's record of the verified archives its folder was extracted from.
ARCHIVES = "archives"


def _enough(verdict: str | None) -> None:
    """The preflight's disk line (plan.capacity), before anything is downloaded or written."""
    if verdict is not None:
        raise DataError(verdict)


def run_raw(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    module = datasets.get(args.dataset)
    cfg, out = stage_slice(args), Path(args.out)
    with raw_lock(args.dataset, Path(args.downloads)):
        if made_from(out, cfg):  # by another workflow sharing data_root, while this one waited
            log.info("%s: made meanwhile by another run from the same config; kept", out)
            return
        _enough(capacity.raw_disk_verdict(args.dataset, cfg, out.parent))
        with atomic_path(out) as tmp:
            facts = make_raw(module.SOURCES, cfg, tmp, args.downloads)
            # the archives whose checksum matched, now extracted and checked into this folder:
            # what `accelpipe drop-archives` may drop
            facts[ARCHIVES] = verified_downloads(Path(args.downloads))
            facts[MADE_FROM] = config_key(cfg)
            provenance.write_stage(tmp, "raw", started, dataset=args.dataset, **facts)


def run_prepare(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    module = datasets.get(args.dataset)
    _enough(capacity.prepare_disk_verdict(args.dataset, Path(args.raw), Path(args.out)))
    # The dataset's prepare writes its output atomically itself.
    module.prepare_variant(
        args.variant,
        Path(args.raw),
        Path(args.out),
        stage_slice(args),
        workers=args.workers,
    )
    provenance.write_stage(
        Path(args.out), "prepare", started, dataset=args.dataset, variant=args.variant
    )


def run_drop_archives(args: argparse.Namespace) -> None:
    """Drop the dataset's downloaded archives that its raw folder's record shows verified
    (checksum matched) and extracted (the raw stage finished and checked its folder); keep
    any other (no checksum, another file, a raw folder not made) and say why."""
    raw = Path(args.data_root) / "raw" / args.dataset
    downloads = Path(args.data_root) / "downloads" / args.dataset
    stage = raw / provenance.STAGE_FILE
    if not stage.is_file():
        raise DataError(f"{raw}: no finished raw folder ({stage.name}); nothing dropped")
    recorded = read_json(stage).get(ARCHIVES, {})
    now = verified_downloads(downloads) if downloads.is_dir() else {}
    freed = 0
    for name in sorted(_archives(downloads)):
        archive = downloads / name
        if name not in recorded or now.get(name) != recorded[name]:
            log.warning("kept %s: %s does not record it verified and extracted", archive, stage)
            continue
        freed += archive.stat().st_size
        archive.unlink()
        archive.with_name(name + VERIFIED_SUFFIX).unlink(missing_ok=True)
        log.info("dropped %s (%s %s, extracted into %s)", archive, *_digest(recorded[name]), raw)
    log.info("%s: %s freed; a re-made raw folder downloads again", downloads, gb(freed))


def _archives(downloads: Path) -> list[str]:
    """The finished downloads in the folder: not their records, parts or locks."""
    if not downloads.is_dir():
        return []
    skip = (VERIFIED_SUFFIX, ".part", ".lock")
    return [f.name for f in downloads.iterdir() if f.is_file() and not f.name.endswith(skip)]


def _digest(record: dict[str, object]) -> tuple[object, object]:
    return record["algorithm"], record["digest"]
