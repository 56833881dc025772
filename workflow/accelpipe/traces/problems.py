"""The two ways a file can fail to be summarized, raised inside the package and turned into
one ``DataError`` line naming the file by ``summary.summarize_traces``."""

from __future__ import annotations


class Malformed(Exception):
    """The bytes are not a well-formed trace. ``offset`` is the byte (of the decompressed
    stream) where reading went wrong, when known, so the message can say where to look."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class Unsupported(Exception):
    """Well-formed JSON, but not a trace this summarizer reads (another profiler's format,
    or no trace at all)."""
