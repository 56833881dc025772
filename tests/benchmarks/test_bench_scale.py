"""benchmarks/bench_scale.py's own arithmetic: the fit to full size and the synthetic blocks a
size makes. Its run is smoke-tested in test_smoke.py; nothing here times anything."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

from accelpipe.config import registry
from accelpipe.config.schema import validate
from benchmarks import run_all


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    # the script imports its sibling `smoke` as a script would (benchmarks/ on sys.path)
    sys.path.insert(0, str(run_all.HERE))
    try:
        return importlib.import_module("bench_scale")
    finally:
        sys.path.remove(str(run_all.HERE))


def test_fit_of_a_line_extrapolates_it_with_no_residual(bench: ModuleType) -> None:
    result = bench.fit([5, 10, 15], [3.0 + 2.0 * n for n in (5, 10, 15)], full=484)
    assert result == {"slope": 2.0, "intercept": 3.0, "full": 971.0, "residual": 0.0}


def test_fit_of_a_curve_shows_its_residual(bench: ModuleType) -> None:
    # y = n^2 at 1, 2, 3: the least-squares line is 4n - 3.33, residuals 1/3, -2/3, 1/3
    result = bench.fit([1, 2, 3], [1.0, 4.0, 9.0], full=10)
    assert result["slope"] == 4.0
    assert result["full"] == pytest.approx(36.7, abs=0.05)
    assert result["residual"] == pytest.approx((2 / 9) ** 0.5 / (14 / 3), abs=1e-4)


def test_fit_of_two_sizes_has_no_residual_to_show(bench: ModuleType) -> None:
    assert bench.fit([3, 6], [1.0, 2.5], full=9)["residual"] is None


@pytest.mark.parametrize("dataset", sorted(registry.DATASETS))
def test_each_size_is_a_valid_synthetic_block_of_the_real_shape(
    bench: ModuleType, dataset: str
) -> None:
    scale = bench.SCALES[dataset]
    counts = []
    for items in scale.sizes:
        block = scale.synthetic(items, scale.shape)
        config = validate({"datasets": {dataset: {"source": "synthetic", "synthetic": block}}})
        made = config["datasets"][dataset]["synthetic"]
        assert made.get("shape", made.get("size")) == list(scale.shape)
        counts.append(bench._count(made))
    # the default sizes make distinct counts near those asked, so a line can be fitted
    assert len(set(counts)) == len(counts) >= 2
    assert all(abs(c - n) <= n * 0.1 for c, n in zip(counts, scale.sizes, strict=True))


def test_full_size_peak_is_never_below_what_was_measured(bench: ModuleType) -> None:
    # a peak that does not grow with items: its fitted slope is noise, here pointing down
    rows = [
        {"items": n, "prepare_peak_rss_mb": rss, "prepare_peak_pss_mb": pss}
        | {k: float(n) for k in bench.FITTED if "peak" not in k}
        for n, rss, pss in ((10, 300.0, 500.0), (20, 299.0, 520.0), (30, 298.0, 540.0))
    ]
    items = [row["items"] for row in rows]
    fits = {k: bench.fit(items, [row[k] for row in rows], full=1000) for k in bench.FITTED}
    full = bench._full_size({"fit": fits, "sizes": rows})
    assert full["prepare_peak_rss_mb"] == 300  # the fit says 201 at 1000 items
    assert full["prepare_peak_pss_mb"] == 2480  # a peak that grows: the fit's
