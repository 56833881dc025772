"""Building blocks for hand-built chrome traces and checking summaries against them."""

from __future__ import annotations

import pytest


def x_event(cat: str, name: str, ts: float, dur: float, where: dict, /, **args: object) -> dict:
    ev = {"ph": "X", "cat": cat, "name": name, **where, "ts": ts, "dur": dur}
    if args:
        ev["args"] = dict(args)
    return ev


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {
        "min": min(values),
        "mean": sum(values) / len(values),
        "median": median,
        "max": max(values),
        "total": sum(values),
    }


def assert_close(got: object, want: object) -> None:
    """Recursive equality with float tolerance (stats are rounded to 1 ns)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), (got, want)
        for key in want:
            assert_close(got[key], want[key])
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=2e-6)
    else:
        assert got == want
