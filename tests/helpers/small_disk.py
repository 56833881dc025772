"""A real small file system to fill: a tmpfs mounted for one test (root only; skips with the
reason elsewhere), so a full disk is met as users meet it, not mocked."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(where: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (created) for the block, unmounted after."""
    where.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)]
    try:
        done = subprocess.run(mount, capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command to make a small file system to fill")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=True)


def fill(disk: Path, leave_bytes: int) -> Path:
    """Write a file that leaves about `leave_bytes` free on `disk`; return it."""
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    filler = disk / "filler.bin"
    with filler.open("wb") as fh:
        fh.write(bytes(max(free - leave_bytes, 0)))
    return filler
