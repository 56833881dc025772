"""The diff's statistics (accelpipe.results.diff_stats) on small arrays worked out by hand."""

from __future__ import annotations

from statistics import pvariance

import numpy as np
import pytest

from accelpipe.results.diff_stats import (
    FASTER,
    NOT_COMPARED,
    SLOWER,
    WITHIN_NOISE,
    Spread,
    bootstrap_difference,
    bound_difference,
    verdict,
)


def _mean(draws: np.ndarray) -> np.ndarray:
    return np.asarray(draws[:, :, 0].mean(axis=1))


A = np.array([[10.0], [11.0], [12.0], [13.0], [10.5], [12.5]])


def test_the_bootstrap_of_a_constant_shift_holds_the_shift_and_leaves_out_zero() -> None:
    low, high = bootstrap_difference(A, A + 5.0, _mean, 2000, 0.95) or (0.0, 0.0)
    assert 0 < low < 5.0 < high
    # the resamples of A and of B are independent: the interval is as wide as the spread
    # of two means of six steps allows, under the 3 ms range of the steps
    assert high - low < 3.0


def test_the_bootstrap_of_the_same_steps_holds_zero_and_is_the_same_every_time() -> None:
    first = bootstrap_difference(A, A[::-1], _mean, 2000, 0.95)
    assert first is not None and first[0] < 0 < first[1]
    assert bootstrap_difference(A, A[::-1], _mean, 2000, 0.95) == first  # fixed seed


def test_the_bootstrap_needs_two_steps_in_each_run() -> None:
    assert bootstrap_difference(A[:1], A, _mean, 100, 0.95) is None
    assert bootstrap_difference(A, A[:1], _mean, 100, 0.95) is None


def test_the_variance_bound_is_the_largest_a_sample_with_that_range_and_mean_has() -> None:
    spread = Spread(count=3, mean=2.0, low=1.0, high=3.0)
    assert spread.variance_bound() == 1.0
    assert pvariance([1.0, 2.0, 3.0]) <= 1.0 == pvariance([1.0, 3.0])  # reached at the ends


def test_the_bound_interval_is_the_normal_one_at_the_bounds() -> None:
    a, b = Spread(4, 10.0, 9.0, 11.0), Spread(4, 12.0, 11.0, 13.0)
    low, high = bound_difference(a, b, 0.95) or (0.0, 0.0)
    half = 1.959964 * (1 / 4 + 1 / 4) ** 0.5
    assert low == pytest.approx(2.0 - half) and high == pytest.approx(2.0 + half)


def test_one_instance_gives_no_bound_interval() -> None:
    assert bound_difference(Spread(1, 10.0, 10.0, 10.0), Spread(4, 12.0, 11.0, 13.0), 0.95) is None


@pytest.mark.parametrize(
    ("a", "b", "interval", "higher_is_faster", "expected"),
    [
        (10.0, 12.0, (1.0, 3.0), False, SLOWER),  # a time grew
        (10.0, 8.0, (-3.0, -1.0), False, FASTER),
        (10.0, 12.0, (1.0, 3.0), True, FASTER),  # a throughput grew
        (10.0, 8.0, (-3.0, -1.0), True, SLOWER),
        (10.0, 12.0, (-1.0, 5.0), False, WITHIN_NOISE),  # the interval holds 0
        (100.0, 101.0, (0.5, 1.5), False, WITHIN_NOISE),  # 1% < min_change
        (10.0, 12.0, None, False, NOT_COMPARED),
    ],
)
def test_verdict(
    a: float,
    b: float,
    interval: tuple[float, float] | None,
    higher_is_faster: bool,
    expected: str,
) -> None:
    assert verdict(a, b, interval, higher_is_faster, min_change=0.02) == expected
