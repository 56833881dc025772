"""Read-ahead hints: items come back in order, each item's files hinted a window ahead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelpipe.datasets import readahead


def test_items_come_in_order_with_the_next_windows_files_hinted_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    monkeypatch.setattr(readahead, "will_need", lambda path: events.append(f"hint {path}"))
    items = [f"f{i}" for i in range(5)]
    for item in readahead.ahead(items, lambda item: (item, item + ".png"), window=2):
        events.append(f"use {item}")
    hints = lambda i: [f"hint f{i}", f"hint f{i}.png"]  # noqa: E731
    expected = hints(0) + hints(1)
    for i in range(5):
        expected += (hints(i + 2) if i + 2 < 5 else []) + [f"use f{i}"]
    assert events == expected


def test_fewer_items_than_the_window_are_each_hinted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    hinted: list[str] = []
    monkeypatch.setattr(readahead, "will_need", hinted.append)
    assert list(readahead.ahead(["a", "b"], lambda item: (item,), window=8)) == ["a", "b"]
    assert hinted == ["a", "b"]


def test_a_hint_reads_nothing_wrong_and_a_missing_file_is_left_to_the_reader(
    tmp_path: Path,
) -> None:
    path = tmp_path / "image.jpg"
    path.write_bytes(b"\xff\xd8" + os.urandom(1000))
    readahead.will_need(str(path))  # only a hint: the file is unchanged and still readable
    assert len(path.read_bytes()) == 1002
    readahead.will_need(str(tmp_path / "missing.jpg"))  # no error: the read names it later
