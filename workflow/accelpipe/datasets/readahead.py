"""Read-ahead for converters that read many files in a known order.

A converter that reads a file, then hashes or decodes it, leaves the disk idle while it
computes and the CPU idle while it reads. `ahead` tells the kernel (posix_fadvise WILLNEED)
which files come next, a few items ahead of the one being converted, so their reads run
while the current item is worked on. Only a hint: where the platform lacks it, or a file is
missing (the converter's own read names it), nothing happens.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

Item = TypeVar("Item")

WINDOW = 8  # items hinted ahead: a few MB of JPEGs, enough to keep a disk queue busy


def will_need(path: str) -> None:
    """Start reading `path` into the page cache in the background."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def ahead(
    items: Sequence[Item], files: Callable[[Item], Iterable[str]], window: int = WINDOW
) -> Iterator[Item]:
    """`items` in order; the files of the next `window` items are hinted before each one."""
    for index in range(min(window, len(items))):
        for path in files(items[index]):
            will_need(path)
    for index, item in enumerate(items):
        if index + window < len(items):
            for path in files(items[index + window]):
                will_need(path)
        yield item
